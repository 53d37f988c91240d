package status

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/etcd"
	"github.com/mcsd-io/mcsd/pkg/registry/etcd/embedded"
	"github.com/mcsd-io/mcsd/pkg/registry/etcd/embedded/embeddedtest"
)

// TestCollectFromEtcd reads a real registry: two clusters on leases export
// one Service with conflicting ports.
func TestCollectFromEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd")
	}
	srv := embeddedtest.Start(t, embedded.Config{})
	opts := func(cluster string) etcd.Options {
		return etcd.Options{Identity: registry.Identity{ClusterSet: "prod", Cluster: cluster}, Endpoints: []string{srv.ClientURL()}, TTL: 5 * time.Second}
	}
	for _, c := range []struct {
		id   string
		port int32
	}{{"c1", 80}, {"c2", 81}} {
		b, err := etcd.New(t.Context(), opts(c.id))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		if err := b.PutExport(t.Context(), web, spec(registry.ClusterSetIP, port("http", c.port))); err != nil {
			t.Fatal(err)
		}
		if err := b.PutEndpoints(t.Context(), web, eps(c.id, web, time.Time{}, 1, 0).Groups); err != nil {
			t.Fatal(err)
		}
	}

	// Any client may grant leases: three that hold nothing.
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.ClientURL()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	for range 3 {
		if _, err := cli.Grant(t.Context(), 600); err != nil {
			t.Fatal(err)
		}
	}

	openWatcher := func(ctx context.Context, cs string) (registry.ReadOnlyWatcher, error) {
		o := opts("")
		o.Identity.ClusterSet = cs
		return etcd.NewWatcher(ctx, o)
	}
	start := time.Now()
	r, err := Collect(t.Context(), Options{ClusterSet: "prod", OpenWatcher: openWatcher, LeaseGrace: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if want := (LeaseAudit{Total: 5, Idle: 3, GraceSeconds: 0.1}); r.Leases == nil || *r.Leases != want {
		t.Errorf("leases %+v, want %+v", r.Leases, want)
	}
	// A clusterset without clusters names those that exist.
	other, err := Collect(t.Context(), Options{ClusterSet: "prd", OpenWatcher: openWatcher, LeaseGrace: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var otherTable strings.Builder
	if err := WriteTable(&otherTable, other); err != nil {
		t.Fatal(err)
	}
	if want := "Clustersets with live clusters in this registry: prod (--clusterset picks one)."; !strings.Contains(otherTable.String(), want) {
		t.Errorf("report on an empty clusterset lacks %q:\n%s", want, otherTable.String())
	}
	var table strings.Builder
	if err := WriteTable(&table, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Leases: 5 in the registry, 3 holding nothing.", "warning: 3 leases held nothing for 100ms or more"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	if len(r.Clusters) != 2 {
		t.Fatalf("clusters %+v, want c1 and c2", r.Clusters)
	}
	for _, c := range r.Clusters {
		if c.Liveness != LivenessLease || c.Lease == "" || c.TTLSeconds != 5 || c.Since.After(start) ||
			start.Sub(c.LastSeen) > 5*time.Second || !c.Expires.After(start) || c.Exports != 1 {
			t.Errorf("cluster %+v, want on a live 5s lease, with one export", c)
		}
	}
	if len(r.Services) != 1 || r.Services[0].Conflict == nil || r.Services[0].Conflict.Winner != "c1" {
		t.Fatalf("services %+v, want shop/web with a conflict won by c1", r.Services)
	}
	for _, x := range r.Services[0].Exports {
		if x.Endpoints == nil || x.Endpoints.Updated.IsZero() || x.Endpoints.Updated.After(start) {
			t.Errorf("export of %s: endpoints %+v, want them stamped before the report", x.Cluster, x.Endpoints)
		}
	}
}
