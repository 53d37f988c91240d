package install

import (
	"context"
	"flag"
	"os"
	"testing"

	"github.com/mcsd-io/mcsd/test/framework"
)

// env is the testbed (two clusters and a registry), nil with -short.
var env *framework.Env

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		return m.Run()
	}
	// The tests start mcsd themselves, under the shipped RBAC.
	return framework.Main(m, framework.Options{Name: "e2e-install", Clusters: 2, WithoutControllers: true, NoDataPlane: true}, func(_ context.Context, e *framework.Env) error {
		env = e
		return nil
	})
}

// needTestbed skips t when the testbed is not running (-short).
func needTestbed(t *testing.T) {
	t.Helper()
	if env == nil {
		t.Skip("needs the testbed; skipped with -short")
	}
}
