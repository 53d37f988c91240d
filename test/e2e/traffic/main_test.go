package traffic

import (
	"os"
	"testing"

	"github.com/mcsd-io/mcsd/test/framework"
)

var env *framework.Env

func TestMain(m *testing.M) {
	os.Exit(framework.Main(m, framework.Options{Name: "e2e-traffic", Clusters: 3, SharedZones: true}, framework.Keep(&env)))
}
