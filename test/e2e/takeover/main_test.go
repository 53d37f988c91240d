package takeover

import (
	"context"
	"fmt"
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
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	if moto, err = framework.StartMoto(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer moto.Stop()
	// The controllers start in the test, once the AWS controller's state is
	// in place.
	return framework.Main(m, framework.Options{Name: "e2e-takeover", Clusters: 2, OpenRegistry: moto.Open,
		WithoutControllers: true, TakeoverGrace: grace}, func(_ context.Context, e *framework.Env) error {
		env = e
		return nil
	})
}
