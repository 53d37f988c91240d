package image

import (
	"context"
	"flag"
	"os"
	"testing"

	"github.com/mcsd-io/mcsd/test/framework"
)

// env is the testbed (two clusters with a data plane), nil with -short.
var env *framework.Env

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		return m.Run()
	}
	// mcsd runs from its image, installed by the test.
	return framework.Main(m, framework.Options{Name: "e2e-image", Clusters: 2, WithoutControllers: true}, func(_ context.Context, e *framework.Env) error {
		env = e
		return nil
	})
}
