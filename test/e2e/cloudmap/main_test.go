package cloudmap

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/mcsd-io/mcsd/test/framework"
)

var env *framework.Env

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	moto, err := framework.StartMoto(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer moto.Stop()
	return framework.Main(m, framework.Options{Name: "e2e-cloudmap", Clusters: 2, OpenRegistry: moto.Open, NoDataPlane: true}, func(_ context.Context, e *framework.Env) error {
		env = e
		return nil
	})
}
