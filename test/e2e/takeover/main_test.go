package takeover

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/cloudmap"
	"github.com/mcsd-io/mcsd/pkg/registry/cloudmap/mototest"
	"github.com/mcsd-io/mcsd/test/e2e/framework"
)

// grace is how long the derived Services mcsd does not adopt keep carrying
// traffic: long enough to be seen working, short for the test.
const grace = 25 * time.Second

var (
	env  *framework.Env
	moto *mototest.Server
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	moto, err = mototest.Run(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, "start moto (needs python3; see hack/moto):", err)
		return 1
	}
	defer moto.Stop()
	open := func(ctx context.Context, id registry.Identity) (registry.Registry, error) {
		return cloudmap.New(ctx, cloudOptions(id))
	}
	// The controllers start in the test, once the AWS controller's state is
	// in place.
	return framework.Main(m, framework.Options{Name: "e2e-takeover", Clusters: 2, OpenRegistry: open,
		WithoutControllers: true, TakeoverGrace: grace}, func(_ context.Context, e *framework.Env) error {
		env = e
		return nil
	})
}

func cloudOptions(id registry.Identity) cloudmap.Options {
	return cloudmap.Options{
		Identity:      id,
		Region:        mototest.Region,
		Endpoint:      moto.URL,
		Credentials:   mototest.Credentials,
		TTL:           10 * time.Second,
		PollInterval:  300 * time.Millisecond,
		SweepInterval: 30 * time.Second,
	}
}
