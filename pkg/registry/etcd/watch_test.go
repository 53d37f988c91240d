package etcd

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

func newTestWatch() *watch {
	return &watch{
		c:       &conn{keys: newKeys("/p", "set"), opts: Options{Identity: registry.Identity{ClusterSet: "set"}}},
		log:     logr.Discard(),
		members: map[string]member{}, records: map[string]*record{}, byCluster: map[string]map[string]bool{}, revs: map[string]int64{},
	}
}

// summary lists what u delivers: "+export/c" for a put, "-export/c" for a
// deletion, "!export/c:reason" for a refusal, in order.
func summary(u registry.Update) string {
	var out []string
	for _, e := range u.Exports {
		out = append(out, "+export/"+e.Cluster+":"+string(e.Spec.Type))
	}
	for _, e := range u.Endpoints {
		out = append(out, "+endpoints/"+e.Cluster)
	}
	for _, id := range u.DeletedExports {
		out = append(out, "-export/"+id.Cluster)
	}
	for _, id := range u.DeletedEndpoints {
		out = append(out, "-endpoints/"+id.Cluster)
	}
	for _, r := range u.Rejected {
		out = append(out, "!"+string(r.Kind)+"/"+r.Record.Cluster+":"+string(r.Reason))
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

// TestWatchMembership: the membership rules of the watch, event by event.
func TestWatchMembership(t *testing.T) {
	headless, _ := json.Marshal(exportValue{Spec: registry.ServiceSpec{Type: registry.Headless}})
	setIP, _ := json.Marshal(exportValue{Spec: registry.ServiceSpec{Type: registry.ClusterSetIP}})
	root := "/p/set/clusters/"
	ev := func(key string, value []byte, lease int64) *clientv3.Event {
		return &clientv3.Event{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte(root + key), Value: value, Lease: lease, CreateRevision: 1}}
	}
	del := func(key string) *clientv3.Event {
		return &clientv3.Event{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: []byte(root + key)}}
	}
	steps := []struct {
		name   string
		events []*clientv3.Event
		want   string
	}{
		{"records before their cluster is alive", []*clientv3.Event{ev("a/exports/ns/web", setIP, 1)}, "!export/a:notMember"},
		{"alive on the records' lease delivers them", []*clientv3.Event{ev("a/alive", []byte(`{}`), 1)}, "+export/a:ClusterSetIP"},
		{"alive again on the same lease changes nothing", []*clientv3.Event{ev("a/alive", []byte(`{"ttlSeconds":5}`), 1)}, ""},
		{"alive moves lease while a record changes: the change is delivered", []*clientv3.Event{
			ev("a/alive", []byte(`{}`), 2), ev("a/exports/ns/web", headless, 2),
		}, "+export/a:Headless"},
		{"a record still on the previous lease counts", []*clientv3.Event{ev("a/endpoints/ns/web", []byte(`{}`), 1)}, "+endpoints/a"},
		{"a record on another lease does not", []*clientv3.Event{ev("a/endpoints/ns/web", []byte(`{}`), 9)}, "!endpoints/a:notMember"},
		{"a record on no lease does not", []*clientv3.Event{ev("a/endpoints/ns/web", []byte(`{}`), 0)}, "!endpoints/a:notMember"},
		{"back on the lease", []*clientv3.Event{ev("a/endpoints/ns/web", []byte(`{}`), 2)}, "+endpoints/a"},
		{"unreadable", []*clientv3.Event{ev("a/endpoints/ns/web", []byte(`{`), 2)}, "!endpoints/a:unreadable"},
		{"mended", []*clientv3.Event{ev("a/endpoints/ns/web", []byte(`{}`), 2)}, "+endpoints/a"},
		{"alive deleted: the records stop counting", []*clientv3.Event{del("a/alive")}, "!endpoints/a:notMember !export/a:notMember"},
		{"alive back without a lease: still not a member", []*clientv3.Event{ev("a/alive", []byte(`{}`), 0)}, ""},
		{"alive back on the lease", []*clientv3.Event{ev("a/alive", []byte(`{}`), 2)}, "+endpoints/a +export/a:Headless"},
		{"records deleted", []*clientv3.Event{del("a/exports/ns/web"), del("a/endpoints/ns/web")}, "-endpoints/a -export/a"},
	}
	w := newTestWatch()
	for _, s := range steps {
		if got := summary(w.changes(s.events)); got != s.want {
			t.Errorf("%s: delivered %q, want %q", s.name, got, s.want)
		}
	}
}

// The resyncs that a compaction or a leader change starts in every
// controller at once are spread over as long as their reads take one after
// the other, at least the configured jitter and at most maxResyncSpread.
func TestResyncSpreadGrowsWithTheClusterset(t *testing.T) {
	for _, tc := range []struct {
		members, keys int
		want          time.Duration
	}{
		{0, 0, time.Second},
		{10, 30000, time.Second},
		{100, 30000, 6 * time.Second},
		{250, 100000, maxResyncSpread},
	} {
		if got := resyncSpread(time.Second, tc.members, tc.keys); got != tc.want {
			t.Errorf("%d members, %d keys: spread over %v, want %v", tc.members, tc.keys, got, tc.want)
		}
	}
}

// TestSameHistory: a response from another etcd cluster, or at a revision
// below the one the watch holds, says nothing of the changes after it.
func TestSameHistory(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cluster uint64 // the watch's, from its last full read (0: none yet)
		header  etcdserverpb.ResponseHeader
		same    bool
	}{
		{"same cluster, later revision", 7, etcdserverpb.ResponseHeader{ClusterId: 7, Revision: 120}, true},
		{"same cluster, same revision", 7, etcdserverpb.ResponseHeader{ClusterId: 7, Revision: 100}, true},
		{"revision went back", 7, etcdserverpb.ResponseHeader{ClusterId: 7, Revision: 3}, false},
		{"another cluster, later revision", 7, etcdserverpb.ResponseHeader{ClusterId: 8, Revision: 500}, false},
		{"no cluster known yet", 0, etcdserverpb.ResponseHeader{ClusterId: 8, Revision: 500}, true},
	} {
		w := newTestWatch()
		w.rev, w.etcdCluster = 100, tc.cluster
		if got := w.sameHistory(&tc.header); got != tc.same {
			t.Errorf("%s: sameHistory = %t, want %t", tc.name, got, tc.same)
		}
	}
}

// The read of what changed goes over the clusterset in ranges of a page of
// held keys at most: clusters stay whole unless one holds more than a page,
// and the ranges begin in key order (a cluster "a-b" sorts before "a", as
// its keys do: "-" before "/").
func TestChangeBounds(t *testing.T) {
	held := func(cluster string, n int) map[string]bool {
		keys := map[string]bool{}
		for i := range n {
			keys[fmt.Sprintf("/r/%s/k%02d", cluster, i)] = true
		}
		return keys
	}
	prefix := func(cluster string) string { return "/r/" + cluster + "/" }
	for _, tc := range []struct {
		name      string
		byCluster map[string]map[string]bool
		page      int
		want      []string
	}{
		{"nothing held", nil, 4, nil},
		{"all in a page", map[string]map[string]bool{"a": held("a", 3), "b": held("b", 3)}, 10, nil},
		{"a page filled exactly", map[string]map[string]bool{"a": held("a", 2), "b": held("b", 2), "c": held("c", 1)}, 4,
			[]string{"/r/c/"}},
		{"a range a cluster", map[string]map[string]bool{"a": held("a", 3), "b": held("b", 3), "c": held("c", 3)}, 4,
			[]string{"/r/b/", "/r/c/"}},
		{"a cluster larger than a page", map[string]map[string]bool{"a": held("a", 2), "b": held("b", 7), "c": held("c", 1)}, 3,
			[]string{"/r/b/", "/r/b/k03", "/r/b/k06"}},
		{"a cluster of pages exactly", map[string]map[string]bool{"b": held("b", 6), "c": held("c", 1)}, 3,
			[]string{"/r/b/k03", "/r/c/"}},
		{"key order, not name order", map[string]map[string]bool{"a": held("a", 1), "a-b": held("a-b", 1)}, 1,
			[]string{"/r/a/"}},
	} {
		got := changeBounds(tc.byCluster, prefix, tc.page)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: bounds %q, want %q", tc.name, got, tc.want)
		}
		// Whatever the bounds, each range holds a page at most.
		var all []string
		for _, keys := range tc.byCluster {
			all = slices.AppendSeq(all, maps.Keys(keys))
		}
		slices.Sort(all)
		bounds := append(slices.Clone(got), "/r0") // the prefix's end
		i := 0
		for _, b := range bounds {
			n := 0
			for ; i < len(all) && all[i] < b; i++ {
				n++
			}
			if n > tc.page {
				t.Errorf("%s: a range before %q holds %d keys, more than a page (%d)", tc.name, b, n, tc.page)
			}
		}
	}
}
