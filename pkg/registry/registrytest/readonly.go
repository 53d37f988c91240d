package registrytest

import (
	"slices"
	"testing"
	"time"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

// WatcherFactory opens a backend's read-only watcher of id.ClusterSet;
// id.Cluster may be empty. It registers the watcher's cleanup itself.
type WatcherFactory func(t *testing.T, id registry.Identity) registry.Watcher

// RunReadOnly checks a backend's read-only watcher, which wf opens, against
// the backends f opens: it sees every record and every cluster, as a
// member's watch does, and is no member itself.
func RunReadOnly(t *testing.T, f Factory, wf WatcherFactory) {
	tests := []struct {
		name string
		run  func(*testing.T, Factory, WatcherFactory)
	}{
		{"SeesEverything", testReaderSeesEverything},
		{"IsNoMember", testReaderIsNoMember},
	}
	t.Run("ReadOnly", func(t *testing.T) {
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				tc.run(t, f, wf)
			})
		}
	})
}

func testReaderSeesEverything(t *testing.T, f Factory, wf WatcherFactory) {
	cs := newClusterSet(t, f)
	a, b := cs.open("a", longTTL), cs.open("b", longTTL)
	put(t, a, web, spec(80), endpoints("10.0.0.1"))
	put(t, b, web, spec(81), endpoints("10.1.0.1"))

	// The first full update of a reader opened late holds everything.
	r := StartWatch(t, wf(t, registry.Identity{ClusterSet: cs.id}))
	r.WaitFor(t, timeout, "a's and b's records and clusters", func(_ Event, v *View) bool {
		return hasRecords(v, rid("a", web), spec(80), endpoints("10.0.0.1")) &&
			hasRecords(v, rid("b", web), spec(81), endpoints("10.1.0.1")) &&
			sameClusters(v, "a", "b")
	})
	for _, id := range []registry.RecordID{rid("a", web), rid("b", web)} {
		if r.View().Endpoints[id].Updated.IsZero() {
			t.Errorf("reader got %v without its Updated stamp", id)
		}
	}

	// And it follows changes.
	must(t, a.PutExport(t.Context(), api, spec(80)))
	must(t, b.DeleteExport(t.Context(), web))
	r.WaitFor(t, timeout, "a's new export and b's withdrawal", func(_ Event, v *View) bool {
		return hasExport(v, rid("a", api), spec(80)) && lacksRecords(v, rid("b", web))
	})
	if v := r.View(); !sameClusters(v, "a", "b") {
		t.Errorf("reader sees clusters %v, want a and b", clusterIDs(v))
	}
}

func testReaderIsNoMember(t *testing.T, f Factory, wf WatcherFactory) {
	cs := newClusterSet(t, f)
	// A reader of an empty clusterset, even one named like a cluster, finds
	// nothing and adds nothing.
	r := startSynced(t, wf(t, registry.Identity{ClusterSet: cs.id, Cluster: "reader"}))
	if v := r.View(); len(v.Clusters) != 0 || len(v.Exports) != 0 || len(v.Endpoints) != 0 {
		t.Fatalf("reader of an empty clusterset sees clusters %v, exports %v, endpoints %v", clusterIDs(v), v.Exports, v.Endpoints)
	}

	a := cs.open("a", longTTL)
	rec := startSynced(t, a)
	cs.barrier(a, "a", rec)
	r.WaitFor(t, timeout, "cluster a", func(_ Event, v *View) bool { return sameClusters(v, "a") })
	if v := rec.View(); !sameClusters(v, "a") {
		t.Errorf("a member sees clusters %v, want a only", clusterIDs(v))
	}
	// A second reader opened meanwhile changes nothing either.
	r2 := startSynced(t, wf(t, registry.Identity{ClusterSet: cs.id}))
	rec.Quiet(t, 2*time.Second, "a cluster appeared or went", func(e Event) bool {
		return e.Update != nil && (len(e.Update.Clusters) > 0 || len(e.Update.DeletedClusters) > 0)
	})
	if v := r2.View(); !sameClusters(v, "a") {
		t.Errorf("second reader sees clusters %v, want a only", clusterIDs(v))
	}
}

// clusterIDs lists the ids of v's clusters, sorted, for messages.
func clusterIDs(v *View) []string {
	ids := make([]string, 0, len(v.Clusters))
	for id := range v.Clusters {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// sameClusters reports whether v's clusters are exactly ids.
func sameClusters(v *View, ids ...string) bool {
	return slices.Equal(clusterIDs(v), ids)
}
