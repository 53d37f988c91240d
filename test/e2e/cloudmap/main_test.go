// Package cloudmap runs mcsd end to end with the AWS Cloud Map registry
// backend, against a local Cloud Map emulator (moto), on two real clusters.
package cloudmap

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/cloudmap"
	"github.com/mcsd-io/mcsd/pkg/registry/cloudmap/mototest"
	"github.com/mcsd-io/mcsd/test/e2e/framework"
)

var env *framework.Env

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx := context.Background()
	moto, err := mototest.Run(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "start moto (needs python3; see hack/moto):", err)
		return 1
	}
	defer moto.Stop()
	open := func(ctx context.Context, id registry.Identity) (registry.Registry, error) {
		return cloudmap.New(ctx, cloudmap.Options{
			Identity:     id,
			Region:       mototest.Region,
			Endpoint:     moto.URL,
			Credentials:  mototest.Credentials,
			TTL:          10 * time.Second,
			PollInterval: 300 * time.Millisecond,
			ListInterval: time.Second,
		})
	}
	env, err = framework.Start(ctx, framework.Options{Name: "e2e-cloudmap", Clusters: 2, OpenRegistry: open})
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
