package traffic

import (
	"context"
	"os"
	"testing"

	"github.com/mcsd-io/mcsd/test/framework"
)

var env *framework.Env

func TestMain(m *testing.M) {
	os.Exit(framework.Main(m, framework.Options{Name: "e2e-traffic", Clusters: 3, SharedZones: true}, func(_ context.Context, e *framework.Env) error {
		env = e
		return nil
	}))
}
