package registrytest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

// Factory opens a backend for id whose records outlive a dead controller by
// about ttl. It registers the backend's cleanup itself, and Close may be
// called more than once. Closing the returned registry stands for a
// controller that died without withdrawing its records.
type Factory func(t *testing.T, id registry.Identity, ttl time.Duration) registry.Registry

const (
	// longTTL is the ttl of backends whose liveness is not under test.
	longTTL = 30 * time.Second
	// shortTTL is the ttl of backends whose liveness is under test.
	shortTTL = 3 * time.Second
	// expiryMargin is how late after ttl a dead cluster's records may be
	// delivered as deleted.
	expiryMargin = 5 * time.Second
	// timeout bounds the wait for anything else to arrive.
	timeout = 15 * time.Second
	// livenessRead bounds the wait for a new cluster that has no records
	// yet: a backend may see one only at its next read of the clusters'
	// liveness (the Cloud Map backend reads the heartbeats every TTL/3,
	// 10 s at longTTL; one such wait took 10.2 s of timeout in a run of
	// every package at once).
	livenessRead = longTTL/3 + timeout
)

// Run runs the conformance suite against the backends f opens. The subtests
// run in parallel, each in its own clusterset; Run returns when they are
// done.
func Run(t *testing.T, f Factory) {
	tests := []struct {
		name string
		run  func(*testing.T, Factory)
	}{
		{"WatchDeliversOtherClusters", testWatchDeliversOtherClusters},
		{"WatchStartedAfterWrites", testWatchStartedAfterWrites},
		{"IdenticalPutsAreSkipped", testIdenticalPutsAreSkipped},
		{"PutEndpointsLeavesExport", testPutEndpointsLeavesExport},
		{"Publish", testPublish},
		{"DeleteExport", testDeleteExport},
		{"ExportedListsOwnServices", testExportedListsOwnServices},
		{"ClustersDoNotTouchEachOther", testClustersDoNotTouchEachOther},
		{"Order", testOrder},
		{"DeadClusterExpires", testDeadClusterExpires},
		{"ReopenWithinTTL", testReopenWithinTTL},
		{"Closed", testClosed},
		{"EndpointsUpdated", testEndpointsUpdated},
		{"ClusterLiveness", testClusterLiveness},
		{"ScopedWatch", testScopedWatch},
		{"PortsSharingANumber", testPortsSharingANumber},
	}
	t.Run("Conformance", func(t *testing.T) {
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				tc.run(t, f)
			})
		}
	})
}

var (
	web = registry.ServiceKey{Namespace: "shop", Name: "web"}
	api = registry.ServiceKey{Namespace: "shop", Name: "api"}
	db  = registry.ServiceKey{Namespace: "data", Name: "db"}

	equateEmpty = cmpopts.EquateEmpty()
	sortKeys    = cmpopts.SortSlices(func(x, y registry.ServiceKey) bool { return x.String() < y.String() })
)

// spec is a ClusterSetIP export with one port.
func spec(port int32) registry.ServiceSpec {
	return registry.ServiceSpec{
		Type:            registry.ClusterSetIP,
		Ports:           []registry.Port{{Name: "http", Protocol: corev1.ProtocolTCP, Port: port}},
		SessionAffinity: corev1.ServiceAffinityNone,
		IPFamilies:      []corev1.IPFamily{corev1.IPv4Protocol},
		ExportedLabels:  map[string]string{"app": "web"},
	}
}

// endpoints is one group of ready endpoints, one per address.
func endpoints(addrs ...string) []registry.EndpointGroup {
	g := registry.EndpointGroup{
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []registry.EndpointPort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 8080}},
	}
	for i, a := range addrs {
		g.Endpoints = append(g.Endpoints, registry.Endpoint{
			Addresses: []string{a},
			Ready:     true,
			Serving:   true,
			Hostname:  fmt.Sprintf("web-%d", i),
			NodeName:  "node-1",
			Zone:      "zone-a",
		})
	}
	return []registry.EndpointGroup{g}
}

func rid(cluster string, svc registry.ServiceKey) registry.RecordID {
	return registry.RecordID{Cluster: cluster, Service: svc}
}

// clusterSet is one subtest's clusterset.
type clusterSet struct {
	t        *testing.T
	f        Factory
	id       string
	barriers int
}

// newClusterSet names a clusterset that no other test uses.
func newClusterSet(t *testing.T, f Factory) *clusterSet {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	name := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			return r
		case r >= 'A' && r <= 'Z':
			return r - 'A' + 'a'
		}
		return -1
	}, path.Base(t.Name()))
	return &clusterSet{t: t, f: f, id: fmt.Sprintf("%.20s-%s", name, hex.EncodeToString(b[:]))}
}

func (cs *clusterSet) open(cluster string, ttl time.Duration) registry.Registry {
	return cs.f(cs.t, registry.Identity{ClusterSet: cs.id, Cluster: cluster}, ttl)
}

// barrier exports a new marker Service from reg, which is cluster, and waits
// until rec has it: everything reg wrote before has been delivered by then.
// It returns the events consumed.
func (cs *clusterSet) barrier(reg registry.Registry, cluster string, rec *Recorder) []Event {
	cs.t.Helper()
	cs.barriers++
	marker := registry.ServiceKey{Namespace: "barrier", Name: fmt.Sprintf("b%d", cs.barriers)}
	must(cs.t, reg.PutExport(cs.t.Context(), marker, spec(1)))
	return rec.WaitFor(cs.t, timeout, "barrier "+marker.String(), func(_ Event, v *View) bool {
		_, ok := v.Exports[rid(cluster, marker)]
		return ok
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// startSynced starts a watch of reg, as StartWatch does, and waits for its
// first update, which must be full.
func startSynced(t *testing.T, reg registry.Watcher) *Recorder {
	t.Helper()
	rec := StartWatch(t, reg)
	events := rec.WaitFor(t, timeout, "the first update", isUpdate)
	if u := events[len(events)-1].Update; !u.Full {
		t.Fatalf("first update is not full: %+v", *u)
	}
	return rec
}

// openPair opens clusters a, whose records outlive it by ttlA, and b, whose
// records outlive it by longTTL, of a new clusterset, and watches from b.
func openPair(t *testing.T, f Factory, ttlA time.Duration) (cs *clusterSet, a, b registry.Registry, rec *Recorder) {
	t.Helper()
	cs = newClusterSet(t, f)
	a, b = cs.open("a", ttlA), cs.open("b", longTTL)
	return cs, a, b, startSynced(t, b)
}

// put writes the export s and the endpoints groups of svc from reg.
func put(t *testing.T, reg registry.Registry, svc registry.ServiceKey, s registry.ServiceSpec, groups []registry.EndpointGroup) {
	t.Helper()
	must(t, reg.PutExport(t.Context(), svc, s))
	must(t, reg.PutEndpoints(t.Context(), svc, groups))
}

// waitRecords waits until rec has the export s and the endpoints groups of
// id, and returns the events consumed.
func waitRecords(t *testing.T, rec *Recorder, what string, id registry.RecordID, s registry.ServiceSpec, groups []registry.EndpointGroup) []Event {
	t.Helper()
	return rec.WaitFor(t, timeout, what, func(_ Event, v *View) bool {
		return hasRecords(v, id, s, groups)
	})
}

func isUpdate(e Event, _ *View) bool { return e.Update != nil }

func hasExport(v *View, id registry.RecordID, want registry.ServiceSpec) bool {
	x, ok := v.Exports[id]
	return ok && cmp.Equal(want, x.Spec, equateEmpty)
}

func hasEndpoints(v *View, id registry.RecordID, want []registry.EndpointGroup) bool {
	x, ok := v.Endpoints[id]
	return ok && cmp.Equal(want, x.Groups, equateEmpty)
}

// waitExport waits until rec has the export s of id, and returns the events
// consumed.
func waitExport(t *testing.T, rec *Recorder, what string, id registry.RecordID, s registry.ServiceSpec) []Event {
	t.Helper()
	return rec.WaitFor(t, timeout, what, func(_ Event, v *View) bool {
		return hasExport(v, id, s)
	})
}

// hasRecords reports whether v has the export s and the endpoints groups of
// id.
func hasRecords(v *View, id registry.RecordID, s registry.ServiceSpec, groups []registry.EndpointGroup) bool {
	return hasExport(v, id, s) && hasEndpoints(v, id, groups)
}

// lacksRecords reports whether v has neither an export nor endpoints of id.
func lacksRecords(v *View, id registry.RecordID) bool {
	_, x := v.Exports[id]
	_, p := v.Endpoints[id]
	return !x && !p
}

// mentions reports whether e carries a record or deletion of svc.
func mentions(e Event, svc registry.ServiceKey) bool {
	if e.Update == nil {
		return false
	}
	u := e.Update
	for _, x := range u.Exports {
		if x.Service == svc {
			return true
		}
	}
	for _, x := range u.Endpoints {
		if x.Service == svc {
			return true
		}
	}
	for _, id := range append(u.DeletedExports, u.DeletedEndpoints...) {
		if id.Service == svc {
			return true
		}
	}
	return false
}

func testWatchDeliversOtherClusters(t *testing.T, f Factory) {
	_, a, _, rec := openPair(t, f, longTTL)

	put(t, a, web, spec(80), endpoints("10.0.0.1", "10.0.0.2"))
	events := waitRecords(t, rec, "a's export and endpoints", rid("a", web), spec(80), endpoints("10.0.0.1", "10.0.0.2"))
	for _, e := range events {
		if e.Update != nil && e.Update.Full {
			t.Errorf("change delivered as a full update: %s", e)
		}
	}
	x := rec.View().Exports[rid("a", web)]
	if x.Cluster != "a" || x.Service != web {
		t.Errorf("export names cluster %q service %v, want a %v", x.Cluster, x.Service, web)
	}
}

// testPortsSharingANumber: two Service ports with one target port give
// endpoint ports of one number and two names; both reach the other
// clusters.
func testPortsSharingANumber(t *testing.T, f Factory) {
	_, a, _, rec := openPair(t, f, longTTL)
	s := spec(80)
	s.Ports = append(s.Ports, registry.Port{Name: "http-alt", Protocol: corev1.ProtocolTCP, Port: 8080})
	groups := endpoints("10.0.0.1", "10.0.0.2")
	groups[0].Ports = append(groups[0].Ports, registry.EndpointPort{Name: "http-alt", Protocol: corev1.ProtocolTCP, Port: 8080})
	put(t, a, web, s, groups)
	waitRecords(t, rec, "a's endpoints with both ports", rid("a", web), s, groups)
}

func testWatchStartedAfterWrites(t *testing.T, f Factory) {
	cs := newClusterSet(t, f)
	a, b := cs.open("a", longTTL), cs.open("b", longTTL)
	put(t, a, web, spec(80), endpoints("10.0.0.1"))

	rec := startSynced(t, b)
	v := rec.View()
	if !hasExport(v, rid("a", web), spec(80)) {
		t.Errorf("full update lacks a's export: %+v", v.Exports)
	}
	if !hasEndpoints(v, rid("a", web), endpoints("10.0.0.1")) {
		t.Errorf("full update lacks a's endpoints: %+v", v.Endpoints)
	}
}

func testIdenticalPutsAreSkipped(t *testing.T, f Factory) {
	cs, a, _, rec := openPair(t, f, longTTL)

	put(t, a, web, spec(80), endpoints("10.0.0.1"))
	waitRecords(t, rec, "a's export and endpoints", rid("a", web), spec(80), endpoints("10.0.0.1"))

	put(t, a, web, spec(80), endpoints("10.0.0.1"))
	for _, e := range cs.barrier(a, "a", rec) {
		if mentions(e, web) {
			t.Errorf("identical puts delivered: %s", e)
		}
	}

	must(t, a.PutExport(t.Context(), web, spec(81)))
	waitExport(t, rec, "a's changed export", rid("a", web), spec(81))
}

func testPutEndpointsLeavesExport(t *testing.T, f Factory) {
	_, a, _, rec := openPair(t, f, longTTL)

	put(t, a, web, spec(80), endpoints("10.0.0.1"))
	waitRecords(t, rec, "a's export and endpoints", rid("a", web), spec(80), endpoints("10.0.0.1"))
	before := rec.View().Exports[rid("a", web)]

	must(t, a.PutEndpoints(t.Context(), web, endpoints("10.0.0.1", "10.0.0.2")))
	events := rec.WaitFor(t, timeout, "a's new endpoints", func(_ Event, v *View) bool {
		return hasEndpoints(v, rid("a", web), endpoints("10.0.0.1", "10.0.0.2"))
	})
	for _, e := range events {
		if e.Update != nil && containsExport(e.Update.Exports, web) {
			t.Errorf("PutEndpoints delivered the export: %s", e)
		}
	}
	if diff := cmp.Diff(before, rec.View().Exports[rid("a", web)], equateEmpty); diff != "" {
		t.Errorf("export changed by PutEndpoints (-before +after):\n%s", diff)
	}
}

func testDeleteExport(t *testing.T, f Factory) {
	cs, a, _, rec := openPair(t, f, longTTL)

	for _, svc := range []registry.ServiceKey{web, api} {
		put(t, a, svc, spec(80), endpoints("10.0.0.1"))
	}
	rec.WaitFor(t, timeout, "a's exports and endpoints", func(_ Event, v *View) bool {
		return hasRecords(v, rid("a", web), spec(80), endpoints("10.0.0.1")) &&
			hasRecords(v, rid("a", api), spec(80), endpoints("10.0.0.1"))
	})

	must(t, a.DeleteExport(t.Context(), web))
	var deletedExport, deletedEndpoints bool
	rec.WaitFor(t, timeout, "a's export and endpoints of web deleted", func(e Event, v *View) bool {
		if e.Update != nil {
			deletedExport = deletedExport || contains(e.Update.DeletedExports, rid("a", web))
			deletedEndpoints = deletedEndpoints || contains(e.Update.DeletedEndpoints, rid("a", web))
		}
		return deletedExport && deletedEndpoints
	})
	v := rec.View()
	if _, ok := v.Exports[rid("a", web)]; ok {
		t.Errorf("a's export of web still delivered")
	}
	if !hasRecords(v, rid("a", api), spec(80), endpoints("10.0.0.1")) {
		t.Errorf("deleting web lost api")
	}
	got, err := a.Exported(t.Context())
	must(t, err)
	if diff := cmp.Diff([]registry.ServiceKey{api}, got, equateEmpty, sortKeys); diff != "" {
		t.Errorf("Exported() after DeleteExport (-want +got):\n%s", diff)
	}

	must(t, a.DeleteExport(t.Context(), web))
	must(t, a.DeleteExport(t.Context(), db))
	for _, e := range cs.barrier(a, "a", rec) {
		if mentions(e, web) || mentions(e, db) {
			t.Errorf("deleting again delivered: %s", e)
		}
	}
}

func contains(ids []registry.RecordID, id registry.RecordID) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

func testExportedListsOwnServices(t *testing.T, f Factory) {
	cs := newClusterSet(t, f)
	a, b := cs.open("a", longTTL), cs.open("b", longTTL)
	got, err := a.Exported(t.Context())
	must(t, err)
	if len(got) != 0 {
		t.Errorf("Exported() of a new cluster = %v, want none", got)
	}

	must(t, a.PutExport(t.Context(), web, spec(80)))
	must(t, a.PutExport(t.Context(), api, spec(80)))
	must(t, b.PutExport(t.Context(), web, spec(80)))
	must(t, b.PutExport(t.Context(), db, spec(5432)))
	must(t, b.PutEndpoints(t.Context(), api, endpoints("10.0.0.1")))

	for _, tc := range []struct {
		name string
		reg  registry.Registry
		want []registry.ServiceKey
	}{
		{"a", a, []registry.ServiceKey{web, api}},
		{"b", b, []registry.ServiceKey{web, db}},
	} {
		got, err := tc.reg.Exported(t.Context())
		must(t, err)
		if diff := cmp.Diff(tc.want, got, sortKeys); diff != "" {
			t.Errorf("Exported() of %s (-want +got):\n%s", tc.name, diff)
		}
	}
}

func testClustersDoNotTouchEachOther(t *testing.T, f Factory) {
	cs := newClusterSet(t, f)
	a, b, c := cs.open("a", longTTL), cs.open("b", longTTL), cs.open("c", longTTL)
	rec := startSynced(t, c)

	put(t, a, web, spec(80), endpoints("10.0.0.1"))
	put(t, b, web, spec(81), endpoints("10.1.0.1"))
	rec.WaitFor(t, timeout, "a's and b's records", func(_ Event, v *View) bool {
		return hasRecords(v, rid("a", web), spec(80), endpoints("10.0.0.1")) &&
			hasRecords(v, rid("b", web), spec(81), endpoints("10.1.0.1"))
	})

	must(t, a.DeleteExport(t.Context(), web))
	rec.WaitFor(t, timeout, "a's records deleted", func(_ Event, v *View) bool {
		return lacksRecords(v, rid("a", web))
	})
	// a deleting again, or a Service it never exported, leaves b's alone.
	must(t, a.DeleteExport(t.Context(), web))
	must(t, a.DeleteExport(t.Context(), db))
	cs.barrier(a, "a", rec)
	v := rec.View()
	if !hasRecords(v, rid("b", web), spec(81), endpoints("10.1.0.1")) {
		t.Errorf("a's DeleteExport removed b's records: exports %+v endpoints %+v", v.Exports, v.Endpoints)
	}
	got, err := b.Exported(t.Context())
	must(t, err)
	if diff := cmp.Diff([]registry.ServiceKey{web}, got); diff != "" {
		t.Errorf("b's Exported() after a's DeleteExport (-want +got):\n%s", diff)
	}
}

func testOrder(t *testing.T, f Factory) {
	cs := newClusterSet(t, f)
	a, b, c := cs.open("a", longTTL), cs.open("b", longTTL), cs.open("c", longTTL)
	rec := startSynced(t, c)

	must(t, a.PutExport(t.Context(), web, spec(80)))
	must(t, b.PutExport(t.Context(), web, spec(81)))
	rec.WaitFor(t, timeout, "a's and b's exports", func(_ Event, v *View) bool {
		return hasExport(v, rid("a", web), spec(80)) && hasExport(v, rid("b", web), spec(81))
	})
	orderA, orderB := rec.View().Exports[rid("a", web)].Order, rec.View().Exports[rid("b", web)].Order
	if orderA >= orderB {
		t.Errorf("a exported first but has Order %d, b has %d", orderA, orderB)
	}

	must(t, a.PutExport(t.Context(), web, spec(82)))
	waitExport(t, rec, "a's changed export", rid("a", web), spec(82))
	if got := rec.View().Exports[rid("a", web)].Order; got != orderA {
		t.Errorf("changing a's export moved its Order from %d to %d", orderA, got)
	}

	must(t, a.PutExport(t.Context(), api, spec(80)))
	waitExport(t, rec, "a's export of api", rid("a", api), spec(80))
	if got := rec.View().Exports[rid("a", api)].Order; got <= orderB {
		t.Errorf("a's later export of api has Order %d, not after b's %d", got, orderB)
	}

	// The same cluster and Service in another clusterset stay out of sight.
	other := newClusterSet(t, f)
	x := other.open("a", longTTL)
	put(t, x, web, spec(9999), endpoints("192.0.2.1"))
	for _, e := range cs.barrier(a, "a", rec) {
		if mentions(e, web) {
			t.Errorf("another clusterset's records delivered: %s", e)
		}
	}
	if !hasExport(rec.View(), rid("a", web), spec(82)) {
		t.Errorf("another clusterset's export replaced a's: %+v", rec.View().Exports[rid("a", web)])
	}
	got, err := x.Exported(t.Context())
	must(t, err)
	if diff := cmp.Diff([]registry.ServiceKey{web}, got); diff != "" {
		t.Errorf("Exported() in the other clusterset (-want +got):\n%s", diff)
	}
}

func testDeadClusterExpires(t *testing.T, f Factory) {
	_, a, b, rec := openPair(t, f, shortTTL)

	put(t, a, web, spec(80), endpoints("10.0.0.1"))
	must(t, b.PutExport(t.Context(), web, spec(80)))
	rec.WaitFor(t, timeout, "a's and b's records and clusters", func(_ Event, v *View) bool {
		_, liveA := v.Clusters["a"]
		_, liveB := v.Clusters["b"]
		return hasRecords(v, rid("a", web), spec(80), endpoints("10.0.0.1")) &&
			hasExport(v, rid("b", web), spec(80)) && liveA && liveB
	})

	must(t, a.Close())
	closed := time.Now()
	rec.WaitFor(t, shortTTL+expiryMargin, "a's records and cluster deleted", func(_ Event, v *View) bool {
		_, live := v.Clusters["a"]
		return lacksRecords(v, rid("a", web)) && !live
	})
	t.Logf("a's records expired %s after Close", time.Since(closed).Round(100*time.Millisecond))
	v := rec.View()
	if _, live := v.Clusters["b"]; !live || !hasExport(v, rid("b", web), spec(80)) {
		t.Errorf("b lost with a: clusters %v exports %v", v.Clusters, v.Exports)
	}
}

func testReopenWithinTTL(t *testing.T, f Factory) {
	cs, a, b, rec := openPair(t, f, shortTTL)

	put(t, a, web, spec(80), endpoints("10.0.0.1"))
	waitRecords(t, rec, "a's records", rid("a", web), spec(80), endpoints("10.0.0.1"))
	order := rec.View().Exports[rid("a", web)].Order

	must(t, a.Close())
	a = cs.open("a", shortTTL)
	got, err := a.Exported(t.Context())
	must(t, err)
	if diff := cmp.Diff([]registry.ServiceKey{web}, got); diff != "" {
		t.Errorf("Exported() after reopening (-want +got):\n%s", diff)
	}
	rec.Quiet(t, shortTTL+2*time.Second, "reopened cluster's records deleted", func(e Event) bool {
		if e.Update == nil {
			return false
		}
		u := e.Update
		_, x := rec.View().Exports[rid("a", web)]
		return contains(u.DeletedExports, rid("a", web)) || contains(u.DeletedEndpoints, rid("a", web)) ||
			len(u.DeletedClusters) > 0 || !x
	})

	v := startSynced(t, b).View()
	if !hasRecords(v, rid("a", web), spec(80), endpoints("10.0.0.1")) {
		t.Fatalf("a's records lost over the reopen: exports %+v endpoints %+v", v.Exports, v.Endpoints)
	}
	if got := v.Exports[rid("a", web)].Order; got != order {
		t.Errorf("reopening moved a's Order from %d to %d", order, got)
	}

	must(t, a.PutExport(t.Context(), web, spec(81)))
	waitExport(t, rec, "the reopened cluster's change", rid("a", web), spec(81))
	if got := rec.View().Exports[rid("a", web)].Order; got != order {
		t.Errorf("changing the export after reopening moved its Order from %d to %d", order, got)
	}
}

func testClosed(t *testing.T, f Factory) {
	cs := newClusterSet(t, f)
	a := cs.open("a", shortTTL)
	must(t, a.Close())
	ctx := t.Context()
	type result struct {
		call string
		err  error
	}
	results := []result{
		{"PutExport", a.PutExport(ctx, web, spec(80))},
		{"PutEndpoints", a.PutEndpoints(ctx, web, endpoints("10.0.0.1"))},
		{"DeleteExport", a.DeleteExport(ctx, web)},
	}
	_, err := a.Exported(ctx)
	results = append(results, result{"Exported", err})
	done := make(chan error, 1)
	go func() { done <- a.Watch(ctx, NewRecorder()) }()
	select {
	case err := <-done:
		results = append(results, result{"Watch", err})
	case <-time.After(timeout):
		t.Errorf("Watch on a closed registry did not return")
	}
	for _, r := range results {
		if !errors.Is(r.err, registry.ErrClosed) {
			t.Errorf("%s after Close = %v, want registry.ErrClosed", r.call, r.err)
		}
	}
}

// testScopedWatch: a handler that needs some namespaces (registry.Scoped)
// holds every record of those, whether the backend scopes or delivers
// everything; one that scopes delivers no other namespace, and a namespace
// it names in an update (Update.Namespaces) is held whole from that update
// on, with the changes made to it while it was not needed.
func testScopedWatch(t *testing.T, f Factory) {
	cs := newClusterSet(t, f)
	a, b := cs.open("a", longTTL), cs.open("b", longTTL)
	put(t, a, web, spec(80), endpoints("10.0.0.1"))
	put(t, a, db, spec(5432), endpoints("10.0.0.2"))

	rec := StartScopedWatch(t, b, web.Namespace, "barrier") // cs.barrier's namespace
	first := rec.WaitFor(t, timeout, "the first update", isUpdate)
	u := first[len(first)-1].Update
	if !u.Full {
		t.Fatalf("first update is not full: %+v", *u)
	}
	if !hasRecords(rec.View(), rid("a", web), spec(80), endpoints("10.0.0.1")) {
		t.Fatalf("first update lacks a's records of %v, a namespace needed: %+v", web, rec.View().Exports)
	}
	scoped := u.Scoped
	if scoped && (!slices.Contains(u.Namespaces, web.Namespace) || !lacksRecords(rec.View(), rid("a", db))) {
		t.Fatalf("scoped first update names namespaces %v and holds %v, want %s named and nothing of %s", u.Namespaces, rec.View().Exports, web.Namespace, db.Namespace)
	}

	put(t, a, db, spec(5433), endpoints("10.0.0.3"))
	if scoped {
		cs.barrier(a, "a", rec.Recorder)
		if !lacksRecords(rec.View(), rid("a", db)) {
			t.Fatalf("a change in namespace %s, not needed, was delivered", db.Namespace)
		}
	}
	rec.Need(db.Namespace)
	rec.WaitFor(t, timeout, "a's records of "+db.String()+" as they are now", func(e Event, v *View) bool {
		held := hasRecords(v, rid("a", db), spec(5433), endpoints("10.0.0.3"))
		if e.Update != nil && slices.Contains(e.Update.Namespaces, db.Namespace) && !held {
			t.Fatalf("update names namespace %s but does not hold its records: %s", db.Namespace, e)
		}
		return held
	})
}
