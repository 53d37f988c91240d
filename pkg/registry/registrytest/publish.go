package registrytest

import (
	"testing"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

// testPublish: Publish stores the export and the endpoints; records equal
// to the stored ones are not written again, and a change of one leaves the
// other as it is.
func testPublish(t *testing.T, f Factory) {
	cs, a, _, rec := openPair(t, f, longTTL)

	must(t, a.Publish(t.Context(), web, spec(80), endpoints("10.0.0.1")))
	waitRecords(t, rec, "a's export and endpoints", rid("a", web), spec(80), endpoints("10.0.0.1"))
	stamp := rec.View().Endpoints[rid("a", web)].Updated

	must(t, a.Publish(t.Context(), web, spec(80), endpoints("10.0.0.1")))
	for _, e := range cs.barrier(a, "a", rec) {
		if mentions(e, web) {
			t.Errorf("identical Publish delivered: %s", e)
		}
	}

	must(t, a.Publish(t.Context(), web, spec(81), endpoints("10.0.0.1")))
	for _, e := range waitExport(t, rec, "a's changed export", rid("a", web), spec(81)) {
		if e.Update != nil && containsEndpoints(e.Update.Endpoints, web) {
			t.Errorf("Publish of a changed export delivered unchanged endpoints: %s", e)
		}
	}
	if got := rec.View().Endpoints[rid("a", web)].Updated; !got.Equal(stamp) {
		t.Errorf("unchanged endpoints restamped: %v, was %v", got, stamp)
	}

	must(t, a.Publish(t.Context(), web, spec(81), endpoints("10.0.0.1", "10.0.0.2")))
	for _, e := range rec.WaitFor(t, timeout, "a's changed endpoints", func(_ Event, v *View) bool {
		return hasEndpoints(v, rid("a", web), endpoints("10.0.0.1", "10.0.0.2"))
	}) {
		if e.Update != nil && containsExport(e.Update.Exports, web) {
			t.Errorf("Publish of changed endpoints delivered the unchanged export: %s", e)
		}
	}
}

// RunPublishTogether checks what backends that write in one transaction
// promise of Publish (etcd, memory): a watcher gets a new export and its
// endpoints in one update, never the export alone.
func RunPublishTogether(t *testing.T, f Factory) {
	_, a, _, rec := openPair(t, f, longTTL)

	must(t, a.Publish(t.Context(), web, spec(80), endpoints("10.0.0.1")))
	events := rec.WaitFor(t, timeout, "a's export", func(e Event, _ *View) bool {
		return e.Update != nil && containsExport(e.Update.Exports, web)
	})
	if u := events[len(events)-1].Update; !containsEndpoints(u.Endpoints, web) {
		t.Errorf("the export came without its endpoints: %+v", *u)
	}
}

func containsExport(xs []registry.Export, svc registry.ServiceKey) bool {
	for _, x := range xs {
		if x.Service == svc {
			return true
		}
	}
	return false
}

func containsEndpoints(xs []registry.Endpoints, svc registry.ServiceKey) bool {
	for _, x := range xs {
		if x.Service == svc {
			return true
		}
	}
	return false
}
