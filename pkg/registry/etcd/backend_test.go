package etcd_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"

	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/etcd"
	"github.com/mcsd-io/mcsd/pkg/registry/etcd/embedded"
	"github.com/mcsd-io/mcsd/pkg/registry/etcd/embedded/embeddedtest"
	"github.com/mcsd-io/mcsd/pkg/registry/registrytest"
)

const prefix = "/test"

var (
	web  = registry.ServiceKey{Namespace: "shop", Name: "web"}
	spec = registry.ServiceSpec{
		Type:  registry.ClusterSetIP,
		Ports: []registry.Port{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}},
	}
	spec2 = registry.ServiceSpec{
		Type:  registry.ClusterSetIP,
		Ports: []registry.Port{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 81}},
	}
	groups = []registry.EndpointGroup{{
		AddressType: "IPv4",
		Endpoints:   []registry.Endpoint{{Addresses: []string{"10.0.0.1"}, Ready: true, Serving: true}},
	}}
)

func TestConformance(t *testing.T) {
	t.Parallel()
	srv := startServer(t, filepath.Join(t.TempDir(), "etcd"), "")
	factory := func(t *testing.T, id registry.Identity, ttl time.Duration) registry.Registry {
		return open(t, srv.ClientURL(), id, func(o *etcd.Options) { o.TTL = ttl })
	}
	registrytest.Run(t, factory)
	registrytest.RunReadOnly(t, factory, func(t *testing.T, id registry.Identity) registry.Watcher {
		return openWatcher(t, srv.ClientURL(), id)
	})
	t.Run("PublishTogether", func(t *testing.T) { registrytest.RunPublishTogether(t, factory) })
	registrytest.RunInstances(t, func(t *testing.T, id registry.Identity, ttl time.Duration) (registry.Registry, error) {
		b, err := etcd.New(t.Context(), etcd.Options{Identity: id, Endpoints: []string{srv.ClientURL()}, Prefix: prefix, TTL: ttl})
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() { _ = b.Close() })
		return b, nil
	})
	// The switch stops the registry itself, on a server of its own.
	registrytest.RunLapse(t, func(t *testing.T, id registry.Identity, ttl time.Duration) (registry.Registry, registrytest.Switch, registrytest.Factory) {
		srv, restart := startRestartable(t)
		url := srv.ClientURL()
		a := open(t, url, id, func(o *etcd.Options) { o.TTL, o.RequestTimeout = ttl, time.Second })
		return a, registrytest.Switch{Cut: srv.Close, Heal: restart}, func(t *testing.T, id registry.Identity, ttl time.Duration) registry.Registry {
			return open(t, url, id, func(o *etcd.Options) { o.TTL = ttl })
		}
	})
}

// TestWatcherWritesNothing opens a read-only watcher: it grants no lease and
// writes no key, and reports the members' leases.
func TestWatcherWritesNothing(t *testing.T) {
	t.Parallel()
	srv, cli := startWithClient(t)
	a := open(t, srv.ClientURL(), registry.Identity{ClusterSet: "set1", Cluster: "a"}, func(o *etcd.Options) { o.TTL = 7 * time.Second })
	must(t, a.PutExport(t.Context(), web, spec))
	rev := revision(t, cli)
	leases, err := cli.Leases(t.Context())
	must(t, err)

	w := openWatcher(t, srv.ClientURL(), registry.Identity{ClusterSet: "set1", Cluster: "reader"})
	rec := registrytest.StartWatch(t, w)
	rec.WaitFor(t, 10*time.Second, "a's export", func(_ registrytest.Event, v *registrytest.View) bool {
		_, ok := v.Exports[registry.RecordID{Cluster: "a", Service: web}]
		return ok
	})
	got, err := w.Leases(t.Context())
	must(t, err)
	if len(got) != 1 || got[0].Cluster != "a" || got[0].ID != fmt.Sprintf("%x", int64(leaseOf(t, cli, prefix+"/set1/clusters/a/alive"))) ||
		got[0].Granted != 7*time.Second || got[0].Remaining <= 0 || got[0].Remaining > 7*time.Second ||
		time.Since(got[0].Renewed) > 8*time.Second || time.Until(got[0].Renewed) > time.Second {
		t.Errorf("Leases() = %+v, want a's lease of 7s, renewed lately", got)
	}

	if after := revision(t, cli); after != rev {
		t.Errorf("the watcher moved the revision from %d to %d", rev, after)
	}
	after, err := cli.Leases(t.Context())
	must(t, err)
	if len(after.Leases) != len(leases.Leases) {
		t.Errorf("the watcher changed the number of leases from %d to %d", len(leases.Leases), len(after.Leases))
	}
	must(t, w.Close())
	if _, err := w.Leases(t.Context()); !errors.Is(err, registry.ErrClosed) {
		t.Errorf("Leases() after Close = %v, want registry.ErrClosed", err)
	}
	if err := w.Watch(t.Context(), registrytest.NewRecorder()); !errors.Is(err, registry.ErrClosed) {
		t.Errorf("Watch() after Close = %v, want registry.ErrClosed", err)
	}
}

func TestKeyLayout(t *testing.T) {
	t.Parallel()
	srv, cli := startWithClient(t)
	b := open(t, srv.ClientURL(), registry.Identity{ClusterSet: "set1", Cluster: "a"}, func(o *etcd.Options) { o.TTL = 7 * time.Second })
	putWeb(t, b)

	resp, err := cli.Get(t.Context(), prefix+"/", clientv3.WithPrefix())
	must(t, err)
	got := map[string]string{}
	var lease int64
	for _, kv := range resp.Kvs {
		got[string(kv.Key)] = string(kv.Value)
		if lease == 0 {
			lease = kv.Lease
		}
		if kv.Lease == 0 || kv.Lease != lease {
			t.Errorf("key %s on lease %x, want all on one lease", kv.Key, kv.Lease)
		}
	}
	// The stamps are checked, then left out of the comparison.
	stamps := map[string]string{"/test/set1/clusters/a/alive": "since", "/test/set1/clusters/a/endpoints/shop/web": "updated"}
	for key, field := range stamps {
		var v map[string]any
		must(t, json.Unmarshal([]byte(got[key]), &v))
		ts, err := time.Parse(time.RFC3339Nano, fmt.Sprint(v[field]))
		if err != nil || time.Since(ts) > time.Minute || time.Until(ts) > 0 {
			t.Errorf("%s: %s is %v, want the time it was written", key, field, v[field])
		}
		delete(v, field)
		got[key] = mustJSON(t, v)
	}
	want := map[string]string{
		"/test/set1/clusters/a/alive":              `{"cluster":"a","ttlSeconds":7}`,
		"/test/set1/clusters/a/exports/shop/web":   mustJSON(t, map[string]any{"spec": spec}),
		"/test/set1/clusters/a/endpoints/shop/web": mustJSON(t, map[string]any{"groups": groups}),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("keys (-want +got):\n%s", diff)
	}
	ttl, err := cli.TimeToLive(t.Context(), clientv3.LeaseID(lease))
	must(t, err)
	if ttl.GrantedTTL != 7 {
		t.Errorf("lease granted for %ds, want 7", ttl.GrantedTTL)
	}

	// PutEndpoints writes the endpoints key only.
	exportRev := modRevision(t, cli, "/test/set1/clusters/a/exports/shop/web")
	must(t, b.PutEndpoints(t.Context(), web, nil))
	if got := modRevision(t, cli, "/test/set1/clusters/a/exports/shop/web"); got != exportRev {
		t.Errorf("PutEndpoints rewrote the export (revision %d, was %d)", got, exportRev)
	}

	if err := b.PutExport(t.Context(), registry.ServiceKey{Namespace: "a/b", Name: "web"}, spec); !errors.Is(err, registry.ErrInvalid) {
		t.Errorf("PutExport with a slash in the namespace = %v, want registry.ErrInvalid", err)
	}
	if err := b.PutExport(t.Context(), web, registry.ServiceSpec{}); !errors.Is(err, registry.ErrInvalid) {
		t.Errorf("PutExport without a type = %v, want registry.ErrInvalid", err)
	}
}

// TestRestartWritesNothing reopens a cluster within its TTL: the lease and
// records are taken over as they are.
func TestRestartWritesNothing(t *testing.T) {
	t.Parallel()
	srv, cli := startWithClient(t)
	id := registry.Identity{ClusterSet: "set1", Cluster: "a"}
	b := open(t, srv.ClientURL(), id)
	putWeb(t, b)
	must(t, b.Close())
	before := revision(t, cli)

	b = open(t, srv.ClientURL(), id)
	putWeb(t, b)
	if after := revision(t, cli); after != before {
		t.Errorf("reopening and putting the same records moved the revision from %d to %d", before, after)
	}
	got, err := b.Exported(t.Context())
	must(t, err)
	if diff := cmp.Diff([]registry.ServiceKey{web}, got); diff != "" {
		t.Errorf("Exported() after reopening (-want +got):\n%s", diff)
	}
}

// TestRestartInTheTTLsLastSecond reopens a cluster when its lease has less
// than a second left, which etcd reports as a TTL of 0: the lease still
// lives, so the backend takes it and its records over and renews it. Taken
// for expired, the records were left on it, and etcd deleted them a moment
// later.
func TestRestartInTheTTLsLastSecond(t *testing.T) {
	t.Parallel()
	srv, cli := startWithClient(t)
	id := registry.Identity{ClusterSet: "set1", Cluster: "a"}
	ttl := func(o *etcd.Options) { o.TTL = 3 * time.Second }
	b := open(t, srv.ClientURL(), id, ttl)
	putWeb(t, b)
	exportKey := prefix + "/set1/clusters/a/exports/shop/web"
	lease := leaseOf(t, cli, exportKey)
	must(t, b.Close()) // the records wait out the TTL
	poll.Until(t, 10*time.Second, "the lease to have less than a second left", func() (bool, string) {
		r, err := cli.TimeToLive(t.Context(), lease)
		if err != nil {
			return false, err.Error()
		}
		return r.TTL == 0, fmt.Sprintf("TTL %d", r.TTL)
	})

	b = open(t, srv.ClientURL(), id, ttl)
	got, err := b.Exported(t.Context())
	must(t, err)
	if diff := cmp.Diff([]registry.ServiceKey{web}, got); diff != "" {
		t.Errorf("Exported() after reopening (-want +got):\n%s", diff)
	}
	// The export's lease was renewed: it outlives the old deadline.
	r, err := cli.TimeToLive(t.Context(), leaseOf(t, cli, exportKey))
	must(t, err)
	if r.TTL < 2 {
		t.Errorf("the export's lease has %d s left after the restart, want it renewed (3 s)", r.TTL)
	}
}

// TestLeaseLossHeals revokes the cluster's lease behind its back: the
// backend writes its records again on a new lease, whether its renewals or a
// write notice first.
func TestLeaseLossHeals(t *testing.T) {
	t.Parallel()
	srv, cli := startWithClient(t)
	for _, tc := range []struct {
		name string
		// writeAtOnce puts a change right after the revocation.
		writeAtOnce bool
	}{
		{"renewal", false},
		{"write", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			set := "set-" + tc.name
			a := open(t, srv.ClientURL(), registry.Identity{ClusterSet: set, Cluster: "a"}, func(o *etcd.Options) { o.TTL = 3 * time.Second })
			b := open(t, srv.ClientURL(), registry.Identity{ClusterSet: set, Cluster: "b"})
			rec := registrytest.StartWatch(t, b)
			putWeb(t, a)
			id := registry.RecordID{Cluster: "a", Service: web}
			waitRecords(t, rec, "a's records", id)

			order := rec.View().Exports[id].Order
			aliveKey := prefix + "/" + set + "/clusters/a/alive"
			lease := leaseOf(t, cli, aliveKey)
			revoked := time.Now()
			_, err := cli.Revoke(t.Context(), lease)
			must(t, err)
			want := spec
			if tc.writeAtOnce {
				want = spec2
				must(t, a.PutExport(t.Context(), web, spec2))
			}
			// Written again, the export is a new key with a new Order.
			rec.WaitFor(t, 10*time.Second, "a's records and cluster back", func(_ registrytest.Event, v *registrytest.View) bool {
				x, ok := v.Exports[id]
				_, p := v.Endpoints[id]
				_, live := v.Clusters["a"]
				return ok && x.Order != order && cmp.Equal(x.Spec, want) && p && live
			})
			// The records expired: they are live again since the repair.
			if since := rec.View().Clusters["a"].Since; since.Before(revoked.Truncate(time.Millisecond)) {
				t.Errorf("a live since %s after the repair, before its lease was revoked at %s", since, revoked)
			}
			newLease := leaseOf(t, cli, aliveKey)
			for _, key := range []string{prefix + "/" + set + "/clusters/a/exports/shop/web", prefix + "/" + set + "/clusters/a/endpoints/shop/web"} {
				if got := leaseOf(t, cli, key); got == lease || got != newLease {
					t.Errorf("%s on lease %x after the repair, want %x (old lease %x)", key, got, newLease, lease)
				}
			}

			// The repaired backend goes on writing, and renewing its lease.
			must(t, a.PutExport(t.Context(), web, registry.ServiceSpec{Type: registry.Headless}))
			rec.WaitFor(t, 10*time.Second, "a's change", func(_ registrytest.Event, v *registrytest.View) bool {
				return v.Exports[id].Spec.Type == registry.Headless
			})
			rec.Quiet(t, 4*time.Second, "a's records deleted", func(e registrytest.Event) bool {
				return e.Update != nil && len(e.Update.DeletedExports) > 0
			})
		})
	}
}

// TestReopenWithOtherTTL moves the records to a lease with the new TTL
// without changing their Order.
func TestReopenWithOtherTTL(t *testing.T) {
	t.Parallel()
	cli, a, reopen := startExporting(t, 5*time.Second)
	exportKey := "/test/set1/clusters/a/exports/shop/web"
	created := createRevision(t, cli, exportKey)
	must(t, a.Close())

	reopen(7 * time.Second)
	ttl, err := cli.TimeToLive(t.Context(), leaseOf(t, cli, exportKey))
	must(t, err)
	if ttl.GrantedTTL != 7 {
		t.Errorf("export on a lease of %ds, want 7", ttl.GrantedTTL)
	}
	if got := leaseOf(t, cli, "/test/set1/clusters/a/alive"); got != leaseOf(t, cli, exportKey) {
		t.Errorf("alive key and export on different leases")
	}
	if got := createRevision(t, cli, exportKey); got != created {
		t.Errorf("export's create revision moved from %d to %d", created, got)
	}
}

// TestReopenAfterExpiry opens a cluster whose records expired: it starts
// empty.
func TestReopenAfterExpiry(t *testing.T) {
	t.Parallel()
	cli, a, reopen := startExporting(t, 2*time.Second)
	aliveKey := "/test/set1/clusters/a/alive"
	gone := cli.Watch(t.Context(), aliveKey, clientv3.WithRev(revision(t, cli)+1), clientv3.WithFilterPut())
	must(t, a.Close())
	select {
	case <-gone:
	case <-time.After(10 * time.Second):
		t.Fatal("alive key not deleted 10s after Close")
	}

	a = reopen(2 * time.Second)
	got, err := a.Exported(t.Context())
	must(t, err)
	if len(got) != 0 {
		t.Errorf("Exported() after the records expired = %v, want none", got)
	}
	leaseOf(t, cli, aliveKey)
}

// TestServerRestart stops etcd under a running watch: the watch reports the
// disconnection, delivers no deletion, and after the restart reads everything
// again.
func TestServerRestart(t *testing.T) {
	t.Parallel()
	fast := func(o *etcd.Options) {
		o.HealthInterval = 200 * time.Millisecond
		o.RequestTimeout = time.Second
	}
	srv, restart, a, b := startRestartablePair(t, fast)
	putWeb(t, a)
	rec := registrytest.StartWatch(t, b)
	id := registry.RecordID{Cluster: "a", Service: web}
	waitRecords(t, rec, "a's records", id)
	order := rec.View().Exports[id].Order

	stopped := time.Now()
	srv.Close()
	t.Logf("etcd stopped in %s", time.Since(stopped).Round(time.Millisecond))
	events := rec.WaitFor(t, 10*time.Second, "disconnection", func(e registrytest.Event, _ *registrytest.View) bool {
		return e.Update == nil && !e.Connected
	})
	if err := events[len(events)-1].Err; err == nil {
		t.Errorf("disconnection reported without an error")
	}

	restart()
	// Nothing changed: the read after the restart delivers nothing but
	// the reconnection.
	events = append(events, rec.WaitFor(t, 20*time.Second, "reconnection", func(e registrytest.Event, _ *registrytest.View) bool {
		return e.Update == nil && e.Connected
	})...)
	for _, e := range events {
		if u := e.Update; u != nil && (len(u.DeletedExports) > 0 || len(u.DeletedEndpoints) > 0 || len(u.DeletedClusters) > 0) {
			t.Errorf("deletion delivered over the restart: %s", e)
		}
	}
	v := rec.View()
	if x, ok := v.Exports[id]; !ok || x.Order != order {
		t.Errorf("after the restart a's export is %+v (present %t), want Order %d", x, ok, order)
	}
	if _, ok := v.Endpoints[id]; !ok {
		t.Errorf("after the restart a's endpoints are missing")
	}

	// Both backends work on: a's lease is renewed, b's watch follows. (A
	// write fails within the request timeout while a's client reconnects,
	// and is tried again.)
	mustEventually(t, "a's put after the restart", func() error { return a.PutExport(t.Context(), web, spec2) })
	rec.WaitFor(t, 10*time.Second, "a's change after the restart", func(_ registrytest.Event, v *registrytest.View) bool {
		return cmp.Equal(v.Exports[id].Spec, spec2)
	})

	// Disconnect before the second server's cleanup, which would otherwise
	// wait for the watch stream to end.
	must(t, a.Close())
	must(t, b.Close())
}

func startServer(t *testing.T, dir, url string) *embedded.Server {
	t.Helper()
	return embeddedtest.Start(t, embedded.Config{DataDir: dir, ListenClientURL: url})
}

// startWithClient starts etcd in a data directory of the test's own, and
// returns it with a client of it.
func startWithClient(t *testing.T) (*embedded.Server, *clientv3.Client) {
	t.Helper()
	srv := startServer(t, filepath.Join(t.TempDir(), "etcd"), "")
	return srv, client(t, srv.ClientURL())
}

// startRestartable starts etcd in a data directory of the test's own;
// restart starts it again, with the same data and client url, after
// srv.Close.
func startRestartable(t *testing.T) (srv *embedded.Server, restart func()) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "etcd")
	srv = startServer(t, dir, "")
	url := srv.ClientURL()
	return srv, func() {
		t.Helper()
		startServer(t, dir, url)
	}
}

// startExporting starts etcd as startWithClient does, opens on it the
// backend of cluster a of set1 with a lease TTL of ttl, and exports web from
// it with spec. reopen opens that backend again, with a lease TTL of its
// own; each backend is closed at the end of the test.
func startExporting(t *testing.T, ttl time.Duration) (cli *clientv3.Client, a *etcd.Backend, reopen func(ttl time.Duration) *etcd.Backend) {
	t.Helper()
	srv, cli := startWithClient(t)
	reopen = func(ttl time.Duration) *etcd.Backend {
		t.Helper()
		return open(t, srv.ClientURL(), registry.Identity{ClusterSet: "set1", Cluster: "a"}, func(o *etcd.Options) { o.TTL = ttl })
	}
	a = reopen(ttl)
	must(t, a.PutExport(t.Context(), web, spec))
	return cli, a, reopen
}

// startRestartablePair starts etcd as startRestartable does, and opens on it
// the backends of clusters a and b of set1, with modify.
func startRestartablePair(t *testing.T, modify func(*etcd.Options)) (srv *embedded.Server, restart func(), a, b *etcd.Backend) {
	t.Helper()
	srv, restart = startRestartable(t)
	url := srv.ClientURL()
	a = open(t, url, registry.Identity{ClusterSet: "set1", Cluster: "a"}, modify)
	b = open(t, url, registry.Identity{ClusterSet: "set1", Cluster: "b"}, modify)
	return srv, restart, a, b
}

// open opens a backend of etcd at url (or, with url "", at the Endpoints
// that a modifier sets).
func open(t *testing.T, url string, id registry.Identity, modify ...func(*etcd.Options)) *etcd.Backend {
	t.Helper()
	opts := etcd.Options{Identity: id, Endpoints: []string{url}, Prefix: prefix}
	for _, m := range modify {
		m(&opts)
	}
	return openWith(t, opts)
}

// openWith opens a backend with opts, closed at the end of the test.
func openWith(t *testing.T, opts etcd.Options) *etcd.Backend {
	t.Helper()
	return openClosed(t, etcd.New, opts)
}

func openWatcher(t *testing.T, url string, id registry.Identity) *etcd.Watcher {
	t.Helper()
	return openClosed(t, etcd.NewWatcher, etcd.Options{Identity: id, Endpoints: []string{url}, Prefix: prefix})
}

// openClosed opens a backend or watcher of opts with newFn, logging to t,
// and checks at the end of the test that it closes.
func openClosed[T io.Closer](t *testing.T, newFn func(context.Context, etcd.Options) (T, error), opts etcd.Options) T {
	t.Helper()
	ctx := logr.NewContext(t.Context(), testr.NewWithOptions(t, testr.Options{Verbosity: 1}))
	c, err := newFn(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close() = %v", err)
		}
	})
	return c
}

func client(t *testing.T, urls ...string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: urls, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func revision(t *testing.T, cli *clientv3.Client) int64 {
	t.Helper()
	resp, err := cli.Get(t.Context(), "any")
	must(t, err)
	return resp.Header.Revision
}

// getKey reads key, which must exist.
func getKey(t *testing.T, cli *clientv3.Client, key string) *mvccpb.KeyValue {
	t.Helper()
	resp, err := cli.Get(t.Context(), key)
	must(t, err)
	if len(resp.Kvs) != 1 {
		t.Fatalf("key %s missing", key)
	}
	return resp.Kvs[0]
}

func modRevision(t *testing.T, cli *clientv3.Client, key string) int64 {
	t.Helper()
	return getKey(t, cli, key).ModRevision
}

func createRevision(t *testing.T, cli *clientv3.Client, key string) int64 {
	t.Helper()
	return getKey(t, cli, key).CreateRevision
}

func leaseOf(t *testing.T, cli *clientv3.Client, key string) clientv3.LeaseID {
	t.Helper()
	return clientv3.LeaseID(getKey(t, cli, key).Lease)
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	must(t, err)
	return string(b)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// waitRecords waits until rec has an export and endpoints of id.
func waitRecords(t *testing.T, rec *registrytest.Recorder, what string, id registry.RecordID) {
	t.Helper()
	rec.WaitFor(t, 10*time.Second, what, func(_ registrytest.Event, v *registrytest.View) bool {
		_, x := v.Exports[id]
		_, p := v.Endpoints[id]
		return x && p
	})
}

// mustEventually makes the write f until it succeeds, for at most 30 s: a
// write fails within the backend's request timeout while etcd is out of
// reach (a restart just made), and is tried again, as the controllers do.
func mustEventually(t *testing.T, what string, f func() error) {
	t.Helper()
	var last error
	poll.Until(t, 30*time.Second, what, func() (bool, string) {
		last = f()
		return last == nil, fmt.Sprint(last)
	})
}

// putWeb exports web from reg, with spec and groups.
func putWeb(t *testing.T, reg registry.Registry) {
	t.Helper()
	must(t, reg.PutExport(t.Context(), web, spec))
	must(t, reg.PutEndpoints(t.Context(), web, groups))
}

// TestPublishOneTransaction: Publish writes a new export and its endpoints
// at one revision; two records too large for one request together are
// written endpoints first, then the export.
func TestPublishOneTransaction(t *testing.T) {
	t.Parallel()
	srv, cli := startWithClient(t)
	b := open(t, srv.ClientURL(), registry.Identity{ClusterSet: "set1", Cluster: "a"})
	exportKey, endpointsKey := "/test/set1/clusters/a/exports/shop/web", "/test/set1/clusters/a/endpoints/shop/web"

	must(t, b.Publish(t.Context(), web, spec, groups))
	if e, p := modRevision(t, cli, exportKey), modRevision(t, cli, endpointsKey); e != p || e == 0 {
		t.Errorf("export at revision %d, endpoints at %d: want one transaction", e, p)
	}

	// Together over etcd's 1.5 MiB request limit, each under MaxRecordBytes.
	big := spec
	big.ExportedAnnotations = map[string]string{"example.com/big": strings.Repeat("x", 700<<10)}
	var many []registry.EndpointGroup
	for i := range 3000 {
		many = append(many, registry.EndpointGroup{AddressType: "IPv4", Endpoints: []registry.Endpoint{{
			Addresses: []string{fmt.Sprintf("10.%d.%d.%d", i>>16, (i>>8)&255, i&255)},
			Hostname:  strings.Repeat("h", 200),
		}}})
	}
	must(t, b.Publish(t.Context(), web, big, many))
	e, p := modRevision(t, cli, exportKey), modRevision(t, cli, endpointsKey)
	if p == 0 || e != p+1 {
		t.Errorf("large records: export at revision %d, endpoints at %d; want the endpoints first, then the export", e, p)
	}
}
