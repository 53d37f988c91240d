package cloudmap

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	sd "github.com/aws/aws-sdk-go-v2/service/servicediscovery"
	"github.com/aws/aws-sdk-go-v2/service/servicediscovery/types"

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

// TestRecordsNamespaceQuota: when the system namespace is at its quota of
// instances (2,000 unless raised; 6 on this test's moto server, 3 a
// service), a new record is refused by an empty records service: the put
// fails with the quota named, and no further records service is created
// at each try. A withdrawal of the backend's own makes room where it was,
// and the next new record goes there.
func TestRecordsNamespaceQuota(t *testing.T) {
	moto(t) // the venv
	srv := mototest.Start(t, "MCSD_MOTO_INSTANCES_PER_SERVICE=3", "MCSD_MOTO_INSTANCES_PER_NAMESPACE=6")
	a := openBackend(t, motoOptions(srv, registry.Identity{ClusterSet: randName("nsquota"), Cluster: "a"}, 30*time.Second))
	keys := make([]registry.ServiceKey, 7)
	for i := range keys {
		keys[i] = randWebKey()
	}
	for _, k := range keys[:6] {
		putWeb(t, a, k, "10.0.0.1")
	}
	for range 3 {
		err := a.PutExport(t.Context(), keys[6], webSpec)
		if err == nil || !strings.Contains(err.Error(), "quota") {
			t.Fatalf("a seventh record in a namespace at its quota: %v, want an error naming the quota", err)
		}
	}
	if got := rawSystemServices(t, rawClient(t, srv)); !slices.Equal(got, []string{recordsName(0), recordsName(1), recordsName(2)}) {
		t.Errorf("records services after 3 refused puts: %v, want the two full ones and one more", got)
	}

	mustDo(t, a.DeleteExport(t.Context(), keys[5]))
	mustDo(t, a.PutExport(t.Context(), keys[6], webSpec))
	if got := a.own[keys[6]].recordIn; got != recordsName(1) {
		t.Errorf("the record after a withdrawal from %q went to %q", recordsName(1), got)
	}
}

// TestRecordsFullForAWhile: a records service that refused a record is
// skipped for new ones for recordsFullFor, then tried again (others'
// withdrawals make room unseen).
func TestRecordsFullForAWhile(t *testing.T) {
	now := time.Now()
	b := &Backend{reader: &reader{now: func() time.Time { return now }}, recordsFull: map[string]time.Time{}}
	b.recordsFull[recordsName(0)] = now.Add(-time.Minute)
	b.recordsFull[recordsName(1)] = now.Add(-recordsFullFor)
	if got := b.recordsWithRoom(); got != recordsName(1) {
		t.Errorf("with %q refused a minute ago and %q %s ago: %q, want %q", recordsName(0), recordsName(1), recordsFullFor, got, recordsName(1))
	}
	b.recordsFull[recordsName(1)] = now
	if got := b.recordsWithRoom(); got != recordsName(2) {
		t.Errorf("with both refused lately: %q, want %q", got, recordsName(2))
	}
}

// rawSystemServices lists the names of the default system namespace's
// records services, sorted.
func rawSystemServices(t *testing.T, c *sd.Client) []string {
	t.Helper()
	nss := namespacesNamed(t, c, DefaultSystemNamespace)
	if len(nss) != 1 {
		t.Fatalf("%d system namespaces", len(nss))
	}
	out, err := c.ListServices(t.Context(), &sd.ListServicesInput{Filters: []types.ServiceFilter{{
		Name: types.ServiceFilterNameNamespaceId, Values: []string{aws.ToString(nss[0].Id)}, Condition: types.FilterConditionEq,
	}}})
	mustDo(t, err)
	var names []string
	for _, s := range out.Services {
		if n := aws.ToString(s.Name); isRecordsName(n) {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}
