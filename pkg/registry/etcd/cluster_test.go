package etcd_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/etcd"
	"github.com/mcsd-io/mcsd/pkg/registry/registrytest"
	"github.com/mcsd-io/mcsd/test/testbed/etcdcluster"
)

// TestThreeMembers runs the backend against an etcd cluster of three
// member processes: the backend suite, then a watch that follows one
// cluster's changes while each member in turn is cut off from the others,
// and while the leader is killed. Every change arrives, and no record is
// ever reported deleted.
func TestThreeMembers(t *testing.T) {
	if testing.Short() {
		t.Skip("-short (make test-unit) runs nothing that needs the testbed's binaries; make test, which CI runs, runs this")
	}
	ctx := context.Background()
	c := etcdcluster.StartT(t)
	endpoints := func(o *etcd.Options) { o.Endpoints = c.ClientURLs() }

	t.Run("conformance", func(t *testing.T) {
		registrytest.Run(t, func(t *testing.T, id registry.Identity, ttl time.Duration) registry.Registry {
			return open(t, "", id, endpoints, func(o *etcd.Options) { o.TTL = ttl })
		})
	})

	t.Run("faults", func(t *testing.T) {
		timing := func(o *etcd.Options) {
			o.TTL = 5 * time.Second
			o.HealthInterval = 300 * time.Millisecond
			o.RequestTimeout = 1500 * time.Millisecond
		}
		east := open(t, "", registry.Identity{ClusterSet: "faults", Cluster: "east"}, endpoints, timing)
		if err := east.PutExport(ctx, web, spec); err != nil {
			t.Fatal(err)
		}
		w := open(t, "", registry.Identity{ClusterSet: "faults", Cluster: "west"}, endpoints, timing)
		rec := registrytest.NewRecorder()
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() { _ = w.Watch(wctx, rec) }()
		id := registry.RecordID{Cluster: "east", Service: web}
		gen := 0
		// change writes east's endpoints anew and waits for the watch to
		// deliver them, failing on any deletion of east's records.
		change := func(during string) time.Duration {
			t.Helper()
			gen++
			addr := fmt.Sprintf("10.0.1.%d", gen)
			start := time.Now()
			// As the export controller does: retried until it succeeds
			// (a leader cut off or killed leaves none for a second or so).
			poll.Until(t, 15*time.Second, during+": put endpoints", func() (bool, string) {
				err := east.PutEndpoints(ctx, web, []registry.EndpointGroup{{
					AddressType: "IPv4",
					Endpoints:   []registry.Endpoint{{Addresses: []string{addr}, Ready: true, Serving: true}},
				}})
				return err == nil, fmt.Sprint(err)
			})
			rec.WaitFor(t, 15*time.Second, during+": endpoints "+addr, func(e registrytest.Event, v *registrytest.View) bool {
				if u := e.Update; u != nil && !u.Full {
					for _, d := range append(u.DeletedExports, u.DeletedEndpoints...) {
						if d.Cluster == "east" {
							t.Fatalf("%s: east's record %v reported deleted", during, d)
						}
					}
				}
				if _, ok := v.Exports[id]; !ok && e.Update != nil {
					t.Fatalf("%s: east's export missing from the view", during)
				}
				eps, ok := v.Endpoints[id]
				return ok && len(eps.Groups) == 1 && eps.Groups[0].Endpoints[0].Addresses[0] == addr
			})
			return time.Since(start)
		}
		t.Logf("no fault: a change arrived in %s", change("no fault").Round(time.Millisecond))
		for i := range c.Members() {
			c.Partition(i)
			took := change(fmt.Sprintf("member %d cut off", i))
			c.Heal(i)
			t.Logf("member %d cut off: a change arrived in %s", i, took.Round(time.Millisecond))
			if err := c.WaitHealthy(ctx); err != nil {
				t.Fatal(err)
			}
		}
		leader, err := c.WaitLeader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		c.Kill(leader)
		t.Logf("leader (member %d) killed: a change arrived in %s", leader, change("leader killed").Round(time.Millisecond))
		if err := c.Restart(leader); err != nil {
			t.Fatal(err)
		}
		if err := c.WaitHealthy(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("member %d back: a change arrived in %s", leader, change("leader back").Round(time.Millisecond))
	})
}
