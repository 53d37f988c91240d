package takeover

import (
	"os"
	"testing"
	"time"

	"github.com/mcsd-io/mcsd/test/framework"
)

// grace is how long the derived Services mcsd does not adopt keep carrying
// traffic: long enough to be seen working, short for the test.
const grace = 25 * time.Second

var (
	env  *framework.Env
	moto *framework.Moto
)

func TestMain(m *testing.M) {
	// The controllers start in the test, once the AWS controller's state is
	// in place.
	os.Exit(framework.MainOnMoto(m, framework.Options{Name: "e2e-takeover", Clusters: 2,
		WithoutControllers: true, TakeoverGrace: grace}, framework.Keep(&env), &moto))
}
