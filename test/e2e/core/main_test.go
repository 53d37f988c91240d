package core

import (
	"os"
	"testing"

	"github.com/mcsd-io/mcsd/test/framework"
)

var env *framework.Env

func TestMain(m *testing.M) {
	os.Exit(framework.Main(m, framework.Options{Name: "e2e-core", Clusters: 3, NoDataPlane: true}, framework.Keep(&env)))
}
