package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/mcsd-io/mcsd/internal/clusterset"
	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/etcd"
)

const waitFor = 10 * time.Second

// watchView feeds a new View from w until the test ends.
func watchView(t *testing.T, w registry.Watcher) *clusterset.View {
	t.Helper()
	v := clusterset.NewView()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = w.Watch(ctx, v)
	}()
	t.Cleanup(func() { cancel(); <-done })
	poll.Until(t, waitFor, "the View to sync", func() (bool, string) { return v.HasSynced(), "" })
	return v
}

// counted lists the clusters whose export and endpoints of key count.
func counted(v *clusterset.View, key registry.ServiceKey) string {
	var out []string
	for _, e := range v.Exports(key) {
		out = append(out, e.Cluster)
	}
	for c := range v.Endpoints(key) {
		out = append(out, "eps:"+c)
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

// refused lists the refused records of key as cluster/kind/reason.
func refused(v *clusterset.View, key registry.ServiceKey) string {
	var out []string
	for _, r := range v.Rejected(key) {
		out = append(out, fmt.Sprintf("%s/%s/%s", r.Record.Cluster, r.Kind, r.Reason))
	}
	return strings.Join(out, ",")
}

func waitView(t *testing.T, v *clusterset.View, key registry.ServiceKey, wantCounted, wantRefused string) {
	t.Helper()
	poll.Until(t, waitFor, "counted "+wantCounted+", refused "+wantRefused, func() (bool, string) {
		c, r := counted(v, key), refused(v, key)
		return c == wantCounted && r == wantRefused, "counted " + c + ", refused " + r
	})
}

// TestOnlyLiveMembersCount: records count only under a cluster with an
// alive record on a lease, and on that lease; unreadable and oversized
// records are refused; the good cluster's records of the same Service keep
// counting throughout. A cluster that joins properly counts, and stops
// counting when its alive record goes.
func TestOnlyLiveMembersCount(t *testing.T) {
	t.Parallel()
	srv, cli := startWithClient(t)
	ctx := t.Context()
	a := open(t, srv.ClientURL(), registry.Identity{ClusterSet: "set1", Cluster: "a"})
	putWeb(t, a)
	v := watchView(t, openWatcher(t, srv.ClientURL(), registry.Identity{ClusterSet: "set1"}))
	waitView(t, v, web, "a,eps:a", "")

	root := "/test/set1/clusters/"
	exportValue := mustJSON(t, map[string]any{"spec": spec})
	endpointsValue := mustJSON(t, map[string]any{"groups": groups})

	// evil: records without any alive record.
	_, err := cli.Put(ctx, root+"evil/exports/shop/web", exportValue)
	must(t, err)
	_, err = cli.Put(ctx, root+"evil/endpoints/shop/web", endpointsValue)
	must(t, err)
	waitView(t, v, web, "a,eps:a", "evil/endpoints/notMember,evil/export/notMember")

	// b: a member whose export is on no lease and whose endpoints cannot
	// be read; c: a member whose endpoints are larger than any real export.
	lb, err := cli.Grant(ctx, 60)
	must(t, err)
	lc, err := cli.Grant(ctx, 60)
	must(t, err)
	_, err = cli.Put(ctx, root+"b/alive", `{"cluster":"b"}`, clientv3.WithLease(lb.ID))
	must(t, err)
	_, err = cli.Put(ctx, root+"b/exports/shop/web", exportValue)
	must(t, err)
	_, err = cli.Put(ctx, root+"b/endpoints/shop/web", `{"groups": [`, clientv3.WithLease(lb.ID))
	must(t, err)
	_, err = cli.Put(ctx, root+"c/alive", `{"cluster":"c"}`, clientv3.WithLease(lc.ID))
	must(t, err)
	_, err = cli.Put(ctx, root+"c/exports/shop/web", exportValue, clientv3.WithLease(lc.ID))
	must(t, err)
	_, err = cli.Put(ctx, root+"c/endpoints/shop/web", `{"groups":[],"pad":"`+strings.Repeat("x", registry.MaxRecordBytes)+`"}`, clientv3.WithLease(lc.ID))
	must(t, err)
	waitView(t, v, web, "a,eps:a",
		"b/endpoints/unreadable,b/export/notMember,c/endpoints/tooLarge,evil/endpoints/notMember,evil/export/notMember")

	// evil joins with a lease and puts its records on it: it counts.
	le, err := cli.Grant(ctx, 60)
	must(t, err)
	_, err = cli.Put(ctx, root+"evil/alive", `{"cluster":"evil"}`, clientv3.WithLease(le.ID))
	must(t, err)
	waitView(t, v, web, "a,eps:a", "b/endpoints/unreadable,b/export/notMember,c/endpoints/tooLarge,evil/endpoints/notMember,evil/export/notMember")
	_, err = cli.Put(ctx, root+"evil/exports/shop/web", exportValue, clientv3.WithLease(le.ID))
	must(t, err)
	_, err = cli.Put(ctx, root+"evil/endpoints/shop/web", endpointsValue, clientv3.WithLease(le.ID))
	must(t, err)
	waitView(t, v, web, "a,eps:a,eps:evil,evil", "b/endpoints/unreadable,b/export/notMember,c/endpoints/tooLarge")

	// Its alive record deleted by hand: its records stop counting at once.
	_, err = cli.Delete(ctx, root+"evil/alive")
	must(t, err)
	waitView(t, v, web, "a,eps:a", "b/endpoints/unreadable,b/export/notMember,c/endpoints/tooLarge,evil/endpoints/notMember,evil/export/notMember")

	// Deleting the refused records ends their refusal; a's records counted
	// throughout.
	for _, c := range []string{"b", "c", "evil"} {
		_, err = cli.Delete(ctx, root+c+"/", clientv3.WithPrefix())
		must(t, err)
	}
	waitView(t, v, web, "a,eps:a", "")
}

// TestLeaseChangeKeepsRecords: a controller restarted with another TTL
// moves its records to a new lease; a watcher never stops counting them.
func TestLeaseChangeKeepsRecords(t *testing.T) {
	t.Parallel()
	srv := startServer(t, filepath.Join(t.TempDir(), "etcd"), "")
	id := registry.Identity{ClusterSet: "set1", Cluster: "a"}
	a := open(t, srv.ClientURL(), id, func(o *etcd.Options) { o.TTL = 5 * time.Second })
	// More records than one transaction holds, so that the move takes
	// several.
	for i := range 80 {
		key := registry.ServiceKey{Namespace: "shop", Name: fmt.Sprintf("web%d", i)}
		must(t, a.PutExport(t.Context(), key, spec))
		must(t, a.PutEndpoints(t.Context(), key, groups))
	}
	v := watchView(t, openWatcher(t, srv.ClientURL(), registry.Identity{ClusterSet: "set1"}))
	poll.Until(t, waitFor, "80 exports", func() (bool, string) { return len(v.Keys("")) == 80, "" })

	var mu sync.Mutex
	var gaps []string
	v.Subscribe(func(c clusterset.Change) {
		if c.Reachability || c.Service == web {
			return
		}
		if got := counted(v, c.Service); got != "a,eps:a" {
			mu.Lock()
			gaps = append(gaps, c.Service.String()+": "+got+" refused "+refused(v, c.Service))
			mu.Unlock()
		}
	})
	must(t, a.Close())
	b := open(t, srv.ClientURL(), id, func(o *etcd.Options) { o.TTL = 7 * time.Second })
	must(t, b.PutExport(t.Context(), web, spec)) // a write after the move
	poll.Until(t, waitFor, "81 exports", func() (bool, string) { return len(v.Keys("")) == 81, "" })
	mu.Lock()
	defer mu.Unlock()
	if len(gaps) > 0 {
		t.Errorf("records stopped counting during the move: %v", gaps)
	}
}

// TestReadDuringALeaseMove: a cluster restarted with another TTL has moved
// its alive record to its new lease, not yet its records. A watch that
// reads the clusterset then counts them, as one that followed the move
// does: they are on the cluster's previous lease, which lives. Records of a
// cluster on two other leases count only on its alive record's.
func TestReadDuringALeaseMove(t *testing.T) {
	t.Parallel()
	srv, cli := startWithClient(t)
	ctx := t.Context()
	root := "/test/set1/clusters/"
	exportValue := mustJSON(t, map[string]any{"spec": spec})
	endpointsValue := mustJSON(t, map[string]any{"groups": groups})
	grant := func() clientv3.LeaseID {
		l, err := cli.Grant(ctx, 60)
		must(t, err)
		return l.ID
	}
	put := func(key, value string, lease clientv3.LeaseID) {
		_, err := cli.Put(ctx, root+key, value, clientv3.WithLease(lease))
		must(t, err)
	}
	// c: alive on its new lease, both records on the old one.
	oldC, newC := grant(), grant()
	put("c/alive", `{"cluster":"c"}`, newC)
	put("c/exports/shop/web", exportValue, oldC)
	put("c/endpoints/shop/web", endpointsValue, oldC)
	// d: alive on a third lease, its records on two others.
	d1, d2, d3 := grant(), grant(), grant()
	put("d/alive", `{"cluster":"d"}`, d3)
	put("d/exports/shop/web", exportValue, d1)
	put("d/endpoints/shop/web", endpointsValue, d2)

	v := watchView(t, openWatcher(t, srv.ClientURL(), registry.Identity{ClusterSet: "set1"}))
	waitView(t, v, web, "c,eps:c", "d/endpoints/notMember,d/export/notMember")
	// The move ends: they still count, and so does d once its records move.
	put("c/exports/shop/web", exportValue, newC)
	put("c/endpoints/shop/web", endpointsValue, newC)
	put("d/exports/shop/web", exportValue, d3)
	put("d/endpoints/shop/web", endpointsValue, d3)
	waitView(t, v, web, "c,d,eps:c,eps:d", "")
}

// TestOwnRecordsRepaired: records of a cluster deleted or changed by someone
// else are written again: the alive record by the backend at once, export
// and endpoints by the next put (which the export controller makes when its
// View shows them gone), even of the same value.
func TestOwnRecordsRepaired(t *testing.T) {
	t.Parallel()
	srv, cli := startWithClient(t)
	ctx := t.Context()
	a := open(t, srv.ClientURL(), registry.Identity{ClusterSet: "set1", Cluster: "a"})
	v := watchView(t, a)
	putWeb(t, a)
	waitView(t, v, web, "a,eps:a", "")
	root := "/test/set1/clusters/a/"
	lease := leaseOf(t, cli, root+"alive")

	// Deleted by hand.
	_, err := cli.Delete(ctx, root+"exports/shop/web")
	must(t, err)
	_, err = cli.Delete(ctx, root+"endpoints/shop/web")
	must(t, err)
	waitView(t, v, web, "", "")
	putWeb(t, a)
	waitView(t, v, web, "a,eps:a", "")
	if got := leaseOf(t, cli, root+"exports/shop/web"); got != lease {
		t.Errorf("export written again on lease %x, want %x", got, lease)
	}

	// Overwritten by another writer: unreadable, then off the lease.
	_, err = cli.Put(ctx, root+"endpoints/shop/web", "garbage", clientv3.WithLease(lease))
	must(t, err)
	waitView(t, v, web, "", "a/endpoints/unreadable")
	must(t, a.PutEndpoints(ctx, web, groups))
	waitView(t, v, web, "a,eps:a", "")
	_, err = cli.Put(ctx, root+"endpoints/shop/web", mustJSON(t, map[string]any{"groups": groups}))
	must(t, err)
	waitView(t, v, web, "", "a/endpoints/notMember")
	must(t, a.PutEndpoints(ctx, web, groups))
	waitView(t, v, web, "a,eps:a", "")

	// The alive record deleted: the records stop counting until the
	// backend writes it again, on its lease, by itself.
	_, err = cli.Delete(ctx, root+"alive")
	must(t, err)
	poll.Until(t, waitFor, "the alive record written again", func() (bool, string) {
		resp, err := cli.Get(ctx, root+"alive")
		if err != nil || len(resp.Kvs) != 1 {
			return false, fmt.Sprint(err)
		}
		return clientv3.LeaseID(resp.Kvs[0].Lease) == lease, "on another lease"
	})
	waitView(t, v, web, "a,eps:a", "")

	// A restore from an older backup, as a watch sees it: all at once.
	_, err = cli.Delete(ctx, root, clientv3.WithPrefix())
	must(t, err)
	poll.Until(t, waitFor, "the alive record written again", func() (bool, string) {
		resp, err := cli.Get(ctx, root+"alive")
		return err == nil && len(resp.Kvs) == 1, ""
	})
	waitView(t, v, web, "", "")
	putWeb(t, a)
	waitView(t, v, web, "a,eps:a", "")
}

// TestPutRefusesOversizedRecords: a record readers would refuse as too
// large is not written.
func TestPutRefusesOversizedRecords(t *testing.T) {
	t.Parallel()
	srv := startServer(t, filepath.Join(t.TempDir(), "etcd"), "")
	a := open(t, srv.ClientURL(), registry.Identity{ClusterSet: "set1", Cluster: "a"})
	huge := []registry.EndpointGroup{{AddressType: "IPv4", Endpoints: make([]registry.Endpoint, 1)}}
	huge[0].Endpoints[0] = registry.Endpoint{Addresses: []string{"10.0.0.1"}, Hostname: strings.Repeat("h", registry.MaxRecordBytes)}
	err := a.PutEndpoints(t.Context(), web, huge)
	var re *registry.RejectedError
	if !errors.As(err, &re) || re.Reason != registry.RejectTooLarge || !errors.Is(err, registry.ErrInvalid) {
		t.Fatalf("PutEndpoints of %d bytes = %v, want a tooLarge rejection", registry.MaxRecordBytes, err)
	}
	if keys, _ := a.Exported(t.Context()); len(keys) != 0 {
		t.Errorf("exported %v", keys)
	}
}
