package image

import (
	"os"
	"testing"

	fw "github.com/mcsd-io/mcsd/test/framework"
)

// env is the testbed (two clusters with a data plane), nil with -short.
var env *fw.Env

// mcsd runs from its image, installed by the test.
func TestMain(m *testing.M) {
	opts := fw.Options{Name: "e2e-image", Clusters: 2, WithoutControllers: true, ShortWithout: true}
	os.Exit(fw.Main(m, opts, fw.Keep(&env)))
}
