package registrytest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

// Opener opens a backend for id as a Factory does, but returns the error
// of an open that fails instead of failing the test.
type Opener func(t *testing.T, id registry.Identity, ttl time.Duration) (registry.Registry, error)

// RunInstances checks what a backend does when two Kubernetes clusters are
// given one cluster id (registry.Identity.Instance): the second is refused
// while the first one's records live, and nothing of the first is touched;
// the first, reopened, is not; once the first's records have expired, the
// second opens.
func RunInstances(t *testing.T, open Opener) {
	t.Run("ClusterIDInUse", func(t *testing.T) {
		t.Parallel()
		testClusterIDInUse(t, open)
	})
}

func testClusterIDInUse(t *testing.T, open Opener) {
	cs := newClusterSet(t, nil)
	id := func(cluster, instance string) registry.Identity {
		return registry.Identity{ClusterSet: cs.id, Cluster: cluster, Instance: instance}
	}
	mustOpen := func(id registry.Identity, ttl time.Duration) registry.Registry {
		t.Helper()
		r, err := open(t, id, ttl)
		must(t, err)
		return r
	}
	first := mustOpen(id("east", "uid-east"), shortTTL)
	west := mustOpen(id("west", "uid-west"), longTTL)
	rec := startSynced(t, west)
	put(t, first, web, spec(80), endpoints("10.0.0.1"))
	waitRecords(t, rec, "east's records", rid("east", web), spec(80), endpoints("10.0.0.1"))

	// Another cluster given east's id is refused, and says whose it is.
	_, err := open(t, id("east", "uid-other"), longTTL)
	if !errors.Is(err, registry.ErrClusterIDInUse) {
		t.Fatalf("another cluster opened with east's live id: err = %v, want ErrClusterIDInUse", err)
	}
	if !strings.Contains(err.Error(), "uid-east") || !strings.Contains(err.Error(), "uid-other") {
		t.Errorf("the error does not name both clusters' uids: %v", err)
	}
	// Nothing of east's was touched.
	events := cs.barrier(west, "west", rec)
	for _, e := range events {
		if u := e.Update; u != nil && (len(u.DeletedExports) > 0 || len(u.DeletedEndpoints) > 0 || len(u.DeletedClusters) > 0) {
			t.Errorf("the refused open deleted records: %v", e)
		}
	}
	if v := rec.View(); !hasRecords(v, rid("east", web), spec(80), endpoints("10.0.0.1")) {
		t.Fatalf("east's records after the refused open: exports %+v endpoints %+v", v.Exports, v.Endpoints)
	}

	// east itself, started again while it lives, opens and writes.
	again := mustOpen(id("east", "uid-east"), shortTTL)
	must(t, again.PutExport(t.Context(), web, spec(81)))
	waitExport(t, rec, "east's change after its restart", rid("east", web), spec(81))

	// east stops: once its records have expired, the id is free.
	must(t, first.Close())
	must(t, again.Close())
	rec.WaitFor(t, shortTTL+expiryMargin, "east's records and cluster deleted", func(_ Event, v *View) bool {
		_, live := v.Clusters["east"]
		return lacksRecords(v, rid("east", web)) && !live
	})
	other := mustOpen(id("east", "uid-other"), longTTL)
	must(t, other.PutExport(t.Context(), web, spec(82)))
	waitExport(t, rec, "the new east's export", rid("east", web), spec(82))
}
