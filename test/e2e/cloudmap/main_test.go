package cloudmap

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

var env *framework.Env

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	moto, err := mototest.Run(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, "start moto (needs python3; see hack/moto):", err)
		return 1
	}
	defer moto.Stop()
	open := func(ctx context.Context, id registry.Identity) (registry.Registry, error) {
		return cloudmap.New(ctx, cloudmap.Options{
			Identity:      id,
			Region:        mototest.Region,
			Endpoint:      moto.URL,
			Credentials:   mototest.Credentials,
			TTL:           10 * time.Second,
			PollInterval:  300 * time.Millisecond,
			SweepInterval: 30 * time.Second,
		})
	}
	return framework.Main(m, framework.Options{Name: "e2e-cloudmap", Clusters: 2, OpenRegistry: open, NoDataPlane: true}, func(_ context.Context, e *framework.Env) error {
		env = e
		return nil
	})
}
