package image

import (
	"context"
	"os"
	"testing"

	"github.com/mcsd-io/mcsd/test/framework"
)

// env is the testbed (two clusters with a data plane), nil with -short.
var env *framework.Env

// mcsd runs from its image, installed by the test.
func TestMain(m *testing.M) {
	opts := framework.Options{Name: "e2e-image", Clusters: 2, WithoutControllers: true, ShortWithout: true}
	os.Exit(framework.Main(m, opts, func(_ context.Context, e *framework.Env) error { env = e; return nil }))
}
