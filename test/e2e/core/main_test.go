// Package core holds the end-to-end scenarios of export and import on three
// real clusters that share an etcd registry, one mcsd per cluster.
package core

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/mcsd-io/mcsd/test/e2e/framework"
)

var env *framework.Env

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx := context.Background()
	var err error
	env, err = framework.Start(ctx, framework.Options{Name: "e2e-core", Clusters: 3})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start e2e environment:", err)
		return 1
	}
	defer func() {
		if err := env.Close(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, "close e2e environment:", err)
		}
	}()
	if err := env.StartControllers(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "start controllers:", err)
		return 1
	}
	return m.Run()
}
