package dns

import (
	"context"
	"os"
	"testing"

	"github.com/mcsd-io/mcsd/test/framework"
	"github.com/mcsd-io/mcsd/test/testbed"
)

var (
	env *framework.Env
	// servers are the clusters' CoreDNS, by cluster id.
	servers = map[string]*testbed.CoreDNS{}
)

func TestMain(m *testing.M) {
	os.Exit(framework.Main(m, framework.Options{Name: "e2e-dns", Clusters: 3, NoDataPlane: true}, func(ctx context.Context, e *framework.Env) error {
		env = e
		for _, c := range env.TB.Clusters {
			d, err := c.StartCoreDNS(ctx)
			if err != nil {
				return err
			}
			servers[c.ID] = d
		}
		return nil
	}))
}
