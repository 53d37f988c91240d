// Package dns proves mcsd's ServiceImports and EndpointSlices are enough for
// stock CoreDNS to answer clusterset.local as KEP-1645 specifies: three real
// clusters, one mcsd and one CoreDNS (kubernetes plugin with the multicluster
// option, see config/coredns) per cluster, and real DNS queries.
package dns

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/mcsd-io/mcsd/test/e2e/framework"
	"github.com/mcsd-io/mcsd/test/testbed"
)

var (
	env *framework.Env
	// servers are the clusters' CoreDNS, by cluster id.
	servers = map[string]*testbed.CoreDNS{}
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx := context.Background()
	var err error
	env, err = framework.Start(ctx, framework.Options{Name: "e2e-dns", Clusters: 3})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start e2e environment:", err)
		return 1
	}
	defer func() {
		for _, d := range servers {
			_ = d.Close()
		}
		if err := env.Close(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, "close e2e environment:", err)
		}
	}()
	if err := env.StartControllers(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "start controllers:", err)
		return 1
	}
	for _, c := range env.TB.Clusters {
		d, err := c.StartCoreDNS(ctx)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		servers[c.ID] = d
	}
	return m.Run()
}
