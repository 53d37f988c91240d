package cloudmap

import (
	"fmt"
	"testing"
	"time"

	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/cloudmap/mototest"
	"github.com/mcsd-io/mcsd/pkg/registry/registrytest"
)

// TestRecordsOverflow: Cloud Map holds at most 1,000 instances a service (3
// on this test's moto server). The service records of a clusterset with
// more exports than that fill "records", then "records-1": every export
// reaches the other clusters, a watcher started later reads them all, a
// restarted backend finds its records in either and withdraws them there,
// and another cluster's new record goes where there is room.
func TestRecordsOverflow(t *testing.T) {
	moto(t) // the venv
	srv := mototest.Start(t, "MCSD_MOTO_INSTANCES_PER_SERVICE=3")
	cs := randName("overflow")
	opts := func(cluster string) Options {
		return motoOptions(srv, registry.Identity{ClusterSet: cs, Cluster: cluster}, 30*time.Second)
	}
	a := openBackend(t, opts("a"))
	rec := registrytest.StartWatch(t, openBackend(t, opts("w")))
	keys := make([]registry.ServiceKey, 5)
	for i := range keys {
		keys[i] = randWebKey()
	}
	exported := func(cluster string, ks ...registry.ServiceKey) func(registrytest.Event, *registrytest.View) bool {
		return func(_ registrytest.Event, v *registrytest.View) bool {
			for _, k := range ks {
				if _, ok := v.Exports[registry.RecordID{Cluster: cluster, Service: k}]; !ok {
					return false
				}
			}
			return true
		}
	}
	for _, k := range keys[:4] {
		putWeb(t, a, k, "10.0.0.1")
	}
	rec.WaitFor(t, 20*time.Second, "a's 4 exports", exported("a", keys[:4]...))
	if a.own[keys[3]].recordIn != recordsName(1) {
		t.Errorf("the fourth record in %q, want %q", a.own[keys[3]].recordIn, recordsName(1))
	}

	late := registrytest.StartWatch(t, openBackend(t, opts("late")))
	late.WaitFor(t, 20*time.Second, "a's 4 exports, read by a watcher started after", exported("a", keys[:4]...))

	// Restarted within the TTL: its records found in both services.
	mustDo(t, a.Close())
	a = openBackend(t, opts("a"))
	if got := a.own[keys[3]].recordIn; got != recordsName(1) {
		t.Errorf("after a restart, the fourth record found in %q, want %q", got, recordsName(1))
	}
	mustDo(t, a.DeleteExport(t.Context(), keys[3]))
	rec.WaitFor(t, 20*time.Second, "a's fourth export withdrawn", func(_ registrytest.Event, v *registrytest.View) bool {
		_, ok := v.Exports[registry.RecordID{Cluster: "a", Service: keys[3]}]
		return !ok
	})

	// Another cluster's new record: "records" is full, "records-1" has room.
	b := openBackend(t, opts("b"))
	putWeb(t, b, keys[4], "10.0.0.2")
	rec.WaitFor(t, 20*time.Second, "b's export", exported("b", keys[4]))
	if got := b.own[keys[4]].recordIn; got != recordsName(1) {
		t.Errorf("b's record in %q, want %q", got, recordsName(1))
	}
	for i := range 3 {
		if got := fmt.Sprint(a.own[keys[i]].recordIn); got != recordsName(0) {
			t.Errorf("record %d in %q, want %q", i, got, recordsName(0))
		}
	}
}
