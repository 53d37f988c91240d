package registrytest

import (
	"testing"
	"time"
)

// stampPrecision is the precision backends keep of Endpoints.Updated and
// Cluster.Since.
const stampPrecision = time.Millisecond

// within reports whether ts is between before and after, at stampPrecision.
func within(ts, before, after time.Time) bool {
	return !ts.Before(before.Truncate(stampPrecision)) && !ts.After(after)
}

func testEndpointsUpdated(t *testing.T, f Factory) {
	cs, a, b, rec := openPair(t, f, longTTL)
	id := rid("a", web)

	must(t, a.PutExport(t.Context(), web, spec(80)))
	before := time.Now()
	must(t, a.PutEndpoints(t.Context(), web, endpoints("10.0.0.1")))
	after := time.Now()
	rec.WaitFor(t, timeout, "a's endpoints", func(_ Event, v *View) bool {
		return hasEndpoints(v, id, endpoints("10.0.0.1"))
	})
	first := rec.View().Endpoints[id].Updated
	if !within(first, before, after) {
		t.Fatalf("Updated of new endpoints = %s, want between %s and %s", first, before, after)
	}

	// The same groups, and a change of the export only, keep the stamp.
	time.Sleep(5 * stampPrecision)
	must(t, a.PutEndpoints(t.Context(), web, endpoints("10.0.0.1")))
	must(t, a.PutExport(t.Context(), web, spec(81)))
	waitExport(t, rec, "a's changed export", id, spec(81))
	for _, e := range cs.barrier(a, "a", rec) {
		if e.Update != nil && containsEndpoints(e.Update.Endpoints, web) {
			t.Errorf("endpoints delivered without a change: %s", e)
		}
	}
	if got := rec.View().Endpoints[id].Updated; !got.Equal(first) {
		t.Errorf("Updated moved from %s to %s without a change of the endpoints", first, got)
	}

	// A change moves it.
	time.Sleep(5 * stampPrecision)
	before = time.Now()
	must(t, a.PutEndpoints(t.Context(), web, endpoints("10.0.0.1", "10.0.0.2")))
	after = time.Now()
	rec.WaitFor(t, timeout, "a's changed endpoints with a new stamp", func(_ Event, v *View) bool {
		return hasEndpoints(v, id, endpoints("10.0.0.1", "10.0.0.2")) && !v.Endpoints[id].Updated.Equal(first)
	})
	second := rec.View().Endpoints[id].Updated
	if !within(second, before, after) || !second.After(first) {
		t.Errorf("Updated after a change = %s, want between %s and %s, after %s", second, before, after, first)
	}

	// A full update delivers the stamp as it is.
	if got := startSynced(t, b).View().Endpoints[id].Updated; !got.Equal(second) {
		t.Errorf("full update has Updated %s, want %s", got, second)
	}
}

func testClusterLiveness(t *testing.T, f Factory) {
	cs := newClusterSet(t, f)
	b := cs.open("b", longTTL)
	rec := startSynced(t, b)

	before := time.Now()
	a := cs.open("a", shortTTL)
	after := time.Now()
	rec.WaitFor(t, livenessRead, "cluster a", func(_ Event, v *View) bool {
		_, ok := v.Clusters["a"]
		return ok
	})
	c := rec.View().Clusters["a"]
	if c.ID != "a" || !within(c.Since, before, after) || c.TTL != shortTTL {
		t.Fatalf("cluster a = %+v, want Since between %s and %s and TTL %s", c, before, after, shortTTL)
	}
	if !c.LastSeen.IsZero() && c.LastSeen.Before(c.Since) {
		t.Errorf("cluster a last seen %s, before it became live at %s", c.LastSeen, c.Since)
	}

	// Reopened within the TTL, its records never expired: Since stays.
	must(t, a.Close())
	cs.open("a", shortTTL)
	if got := startSynced(t, b).View().Clusters["a"]; !got.Since.Equal(c.Since) {
		t.Errorf("cluster a reopened within its TTL has Since %s, want %s", got.Since, c.Since)
	}
}
