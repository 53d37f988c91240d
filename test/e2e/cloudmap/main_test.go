package cloudmap

import (
	"os"
	"testing"

	"github.com/mcsd-io/mcsd/test/framework"
)

var env *framework.Env

func TestMain(m *testing.M) {
	os.Exit(framework.MainOnMoto(m, framework.Options{Name: "e2e-cloudmap", Clusters: 2, NoDataPlane: true}, framework.Keep(&env), nil))
}
