package install

import (
	"os"
	"testing"

	fw "github.com/mcsd-io/mcsd/test/framework"
)

// env is the testbed (two clusters and a registry), nil with -short.
var env *fw.Env

// The tests start mcsd themselves, under the shipped RBAC.
func TestMain(m *testing.M) {
	if run := os.Getenv(unsyncedEnv); run != "" {
		os.Exit(runUnsyncedChild(run))
	}
	opts := fw.Options{Name: "e2e-install", Clusters: 2, WithoutControllers: true, NoDataPlane: true, ShortWithout: true}
	os.Exit(fw.Main(m, opts, fw.Keep(&env)))
}
