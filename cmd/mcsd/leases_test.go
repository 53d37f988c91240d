package main

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/etcd"
)

// TestRegistryCountsIdleLeases runs the try-out registry with its metrics
// on and a short audit: a cluster's lease (holding its records) is not
// counted; leases some client grants and leaves empty are, once the grace
// has passed, in the metric and in a line of the registry's output.
func TestRegistryCountsIdleLeases(t *testing.T) {
	out := startRegistry(t, "registry metrics at",
		"--metrics-bind-address", "127.0.0.1:0", "--lease-audit-interval", "100ms", "--lease-audit-grace", "300ms")
	urls := regexp.MustCompile(`--registry etcd://(127\.0\.0\.1:\d+)\n(?s:.*)registry metrics at (http://\S+)\n`)
	var m []string
	poll.Until(t, 30*time.Second, "the registry's URLs", func() (bool, string) {
		m = urls.FindStringSubmatch(out.String())
		return m != nil, out.String()
	})
	endpoint, metricsURL := "http://"+m[1], m[2]

	east, err := etcd.New(t.Context(), etcd.Options{Identity: registry.Identity{ClusterSet: "prod", Cluster: "east"}, Endpoints: []string{endpoint}})
	if err != nil {
		t.Fatal(err)
	}
	defer east.Close()
	if err := east.PutExport(t.Context(), web, spec); err != nil {
		t.Fatal(err)
	}
	scrape := func() string {
		resp, err := http.Get(metricsURL) //nolint:noctx // a test's bounded scrape of loopback
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	poll.Until(t, 10*time.Second, "one lease, none idle", func() (bool, string) {
		s := scrape()
		return strings.Contains(s, "mcsd_registry_leases 1\n") && strings.Contains(s, "mcsd_registry_idle_leases 0\n"), s
	})

	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	for range 3 {
		if _, err := cli.Grant(t.Context(), 600); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, 10*time.Second, "three idle leases of four", func() (bool, string) {
		s := scrape()
		return strings.Contains(s, "mcsd_registry_leases 4\n") && strings.Contains(s, "mcsd_registry_idle_leases 3\n"), s
	})
	if want := "registry: 3 of 4 leases have held nothing for 300ms or more"; !strings.Contains(out.String(), want) {
		t.Errorf("output lacks %q:\n%s", want, out)
	}
}
