package imports

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/topology"
	"github.com/mcsd-io/mcsd/internal/wellknown"
	"github.com/mcsd-io/mcsd/pkg/registry"
)

func node(name, zone string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelTopologyZone: zone}}}
}

func zoned(addr, zone, nodeName string) registry.Endpoint {
	e := ready(addr)
	e.Zone, e.NodeName = zone, nodeName
	return e
}

// zoneHints renders the zone hints of every endpoint of the import's
// slices, by address.
func zoneHints(byCluster map[string][]discoveryv1.EndpointSlice) map[string][]string {
	return hintsByAddress(byCluster, func(h *discoveryv1.EndpointHints) (names []string) {
		for _, z := range h.ForZones {
			names = append(names, z.Name)
		}
		return names
	})
}

// nodeHints renders the node hints of every endpoint of the import's
// slices, by address.
func nodeHints(byCluster map[string][]discoveryv1.EndpointSlice) map[string][]string {
	return hintsByAddress(byCluster, func(h *discoveryv1.EndpointHints) (names []string) {
		for _, n := range h.ForNodes {
			names = append(names, n.Name)
		}
		return names
	})
}

// hintsByAddress renders, with names, the hints of every endpoint of the
// import's slices, by address.
func hintsByAddress(byCluster map[string][]discoveryv1.EndpointSlice, names func(*discoveryv1.EndpointHints) []string) map[string][]string {
	out := map[string][]string{}
	for _, ss := range byCluster {
		for _, s := range ss {
			for _, ep := range s.Endpoints {
				var got []string
				if ep.Hints != nil {
					got = names(ep.Hints)
				}
				out[ep.Addresses[0]] = got
			}
		}
	}
	return out
}

// portZoneHints renders the zone hints of every endpoint of the import's
// slices, by address and the slice's port names.
func portZoneHints(byCluster map[string][]discoveryv1.EndpointSlice) map[string][]string {
	out := map[string][]string{}
	for _, ss := range byCluster {
		for _, s := range ss {
			var names []string
			for _, p := range s.Ports {
				names = append(names, ptr.Deref(p.Name, ""))
			}
			slices.Sort(names)
			for _, ep := range s.Endpoints {
				var zones []string
				if ep.Hints != nil {
					for _, z := range ep.Hints.ForZones {
						zones = append(zones, z.Name)
					}
				}
				out[ep.Addresses[0]+" "+strings.Join(names, ",")] = zones
			}
		}
	}
	return out
}

// TestHints checks that the import's slices carry the hints the import's
// trafficDistribution and traffic preference ask for, with the condition
// that says so, and none once neither is asked for.
func TestHints(t *testing.T) {
	// This reconciler runs in "east", whose nodes are in zones a and b.
	e := newEnv(t, namespace(testNS), node("n1", "a"), node("n2", "b"))
	eps := []registry.Endpoints{
		endpoints("east", group(discoveryv1.AddressTypeIPv4, []registry.EndpointPort{epPort("http", 8080)}, zoned("10.1.0.1", "a", "n1"))),
		endpoints("west", group(discoveryv1.AddressTypeIPv4, []registry.EndpointPort{epPort("http", 8080)}, zoned("10.2.0.1", "b", "w1"))),
	}
	publish := func(td string, annotations map[string]string) {
		t.Helper()
		var exports []registry.Export
		for _, c := range []string{"east", "west"} {
			x := export(c, registry.ClusterSetIP, v4, port("http", corev1.ProtocolTCP, 80))
			if td != "" {
				x.Spec.TrafficDistribution = ptr.To(td)
			}
			x.Spec.ExportedAnnotations = annotations
			exports = append(exports, x)
		}
		e.publish(exports, eps...)
		e.reconcile("web")
	}

	publish(corev1.ServiceTrafficDistributionPreferSameZone, nil)
	if d := cmp.Diff(map[string][]string{"10.1.0.1": {"a"}, "10.2.0.1": {"b"}}, zoneHints(e.slices("web"))); d != "" {
		t.Errorf("PreferSameZone hints (-want +got):\n%s", d)
	}
	wantCondition(t, e.serviceImport("web"), topology.ConditionHints, metav1.ConditionTrue, topology.ReasonHinted)
	e.steady("web")

	publish("", map[string]string{topology.AnnotationPreference: topology.PreferSameCluster})
	if d := cmp.Diff(map[string][]string{"10.1.0.1": {"a", "b"}, "10.2.0.1": {topology.Elsewhere}}, zoneHints(e.slices("web"))); d != "" {
		t.Errorf("PreferSameCluster hints (-want +got):\n%s", d)
	}
	wantCondition(t, e.serviceImport("web"), topology.ConditionHints, metav1.ConditionTrue, topology.ReasonHinted)
	e.steady("web")

	publish("", nil)
	if d := cmp.Diff(map[string][]string{"10.1.0.1": nil, "10.2.0.1": nil}, zoneHints(e.slices("web"))); d != "" {
		t.Errorf("hints with nothing asked (-want +got):\n%s", d)
	}
	if c := condition(e.serviceImport("web"), topology.ConditionHints); c != nil {
		t.Errorf("condition %+v left", c)
	}
	e.steady("web")
}

// TestHeadlessClusterServingNoPortListsNoEndpoints: DNS answers with every
// endpoint of a headless import's slices, so the endpoints of a cluster
// whose port lost a conflict are left out rather than listed without
// ports; the cluster still has its empty slice of each family of the
// import, as every source cluster does.
func TestHeadlessClusterServingNoPortListsNoEndpoints(t *testing.T) {
	e := newEnv(t, namespace(testNS))
	twoHeadlessDB(e, 5433, ready("10.1.0.1"), ready("10.2.0.1"))
	e.reconcile("web")
	byCluster := e.slices("web")
	if len(byCluster["east"]) != 1 || len(byCluster["east"][0].Endpoints) != 1 {
		t.Fatalf("east's slices: %v", byCluster["east"])
	}
	west := byCluster["west"]
	if len(west) != 1 || west[0].AddressType != discoveryv1.AddressTypeIPv4 || len(west[0].Endpoints) != 0 || len(west[0].Ports) != 0 {
		t.Fatalf("west's slices: %v, want one empty IPv4 slice without ports", west)
	}
	e.steady("web")
}

// TestHeadlessImportListsItsFamiliesOnly: a headless import has the IP
// families of its oldest export; a newer export of more families does not
// conflict (merge), so its endpoints of the other family are not listed:
// DNS would answer that family's queries with that cluster's endpoints
// alone.
func TestHeadlessImportListsItsFamiliesOnly(t *testing.T) {
	e := newEnv(t, namespace(testNS))
	dbPort := []registry.EndpointPort{epPort("db", 5432)}
	e.publish([]registry.Export{
		export("east", registry.Headless, v4, port("db", corev1.ProtocolTCP, 5432)),
		export("west", registry.Headless, dual, port("db", corev1.ProtocolTCP, 5432)),
	},
		endpoints("east", group(discoveryv1.AddressTypeIPv4, dbPort, ready("10.1.0.1"))),
		endpoints("west",
			group(discoveryv1.AddressTypeIPv4, dbPort, ready("10.2.0.1")),
			group(discoveryv1.AddressTypeIPv6, dbPort, ready("fd00::2:1"))),
	)
	e.reconcile("web")
	wantCondition(t, e.serviceImport("web"), "Ready", metav1.ConditionTrue, "Ready")
	for cluster, slices := range e.slices("web") {
		for _, sl := range slices {
			if sl.AddressType != discoveryv1.AddressTypeIPv4 {
				t.Errorf("cluster %s has a slice of %s, which the import does not have: %v", cluster, sl.AddressType, sl.Endpoints)
			}
		}
	}
	if got := zoneHints(e.slices("web")); len(got) != 2 {
		t.Errorf("endpoints listed: %v, want 10.1.0.1 and 10.2.0.1", got)
	}
	e.steady("web")
}

func TestZoneBook(t *testing.T) {
	var b zoneBook
	if _, ok := b.zones(); ok {
		t.Fatal("zones known before any node event")
	}
	for _, step := range []struct {
		node, zone string
		deleted    bool
		changed    bool
	}{
		{"n1", "a", false, true},
		{"n2", "a", false, false}, // a second node of zone a
		{"n2", "a", false, false}, // a status update
		{"n3", "b", false, true},
		{"n1", "", true, false}, // n2 still in a
		{"n2", "", true, true},
		{"n4", "", false, false},  // unlabelled
		{"n3", "c", false, true},  // relabelled: b gone, c new
		{"n4", "c", false, false}, // labelled, in a zone there was
		{"n3", "b", false, true},  // back to b, c still has n4
		{"n4", "", false, true},   // unlabelled again: c gone
		{"n9", "", true, false},   // never seen
	} {
		if got := b.set(step.node, step.zone, step.deleted); got != step.changed {
			t.Errorf("%+v: changed %v", step, got)
		}
	}
	if zones, ok := b.zones(); !ok || len(zones) != 1 || zones[0] != "b" {
		t.Errorf("zones %v %v, want [b]", zones, ok)
	}
	b.set("n5", "a", false)
	if zones, _ := b.zones(); !slices.Equal(zones, []string{"a", "b"}) {
		t.Errorf("zones %v, want [a b]", zones)
	}
}

// TestSpillPerPort: with the same-cluster and same-zone preferences, a zone
// spills per port of the import, as kube-proxy picks per port: during a
// rollout that adds a port, this cluster's zone-a endpoint does not serve
// it yet, so its zone-b endpoint also serves zone a for that port, and
// only for it (a slice for each port), so that a client in zone a stays in
// this cluster for the new port and in its zone for the old one.
func TestSpillPerPort(t *testing.T) {
	e := newEnv(t, namespace(testNS), node("n1", "a"), node("n2", "b"))
	eps := []registry.Endpoints{
		endpoints("east",
			group(discoveryv1.AddressTypeIPv4, []registry.EndpointPort{epPort("http", 8080)}, zoned("10.1.0.1", "a", "n1")),
			group(discoveryv1.AddressTypeIPv4, []registry.EndpointPort{epPort("http", 8080), epPort("admin", 9090)}, zoned("10.1.0.2", "b", "n2"))),
		endpoints("west", group(discoveryv1.AddressTypeIPv4, []registry.EndpointPort{epPort("http", 8080), epPort("admin", 9090)},
			zoned("10.2.0.1", "a", "w1"), zoned("10.2.0.2", "b", "w2"))),
	}
	var exports []registry.Export
	for _, c := range []string{"east", "west"} {
		x := export(c, registry.ClusterSetIP, v4, port("http", corev1.ProtocolTCP, 80), port("admin", corev1.ProtocolTCP, 81))
		x.Spec.TrafficDistribution = ptr.To(corev1.ServiceTrafficDistributionPreferSameZone)
		x.Spec.ExportedAnnotations = map[string]string{topology.AnnotationPreference: topology.PreferSameCluster}
		exports = append(exports, x)
	}
	e.publish(exports, eps...)
	e.reconcile("web")
	want := map[string][]string{
		"10.1.0.1 http":       {"a"},
		"10.1.0.2 http":       {"b"},      // zone a has a ready endpoint of http
		"10.1.0.2 admin":      {"a", "b"}, // but none of admin
		"10.2.0.1 admin,http": {topology.Elsewhere}, "10.2.0.2 admin,http": {topology.Elsewhere},
	}
	if d := cmp.Diff(want, portZoneHints(e.slices("web"))); d != "" {
		t.Errorf("hints (-want +got):\n%s", d)
	}
	wantCondition(t, e.serviceImport("web"), topology.ConditionHints, metav1.ConditionTrue, topology.ReasonHinted)
	e.steady("web")
}

// publishHinted publishes web from east and west, one zoned endpoint each,
// with trafficDistribution td, and reconciles it.
func publishHinted(e *env, td string) {
	e.t.Helper()
	eps := []registry.Endpoints{
		endpoints("east", group(discoveryv1.AddressTypeIPv4, []registry.EndpointPort{epPort("http", 8080)}, zoned("10.1.0.1", "a", "n1"))),
		endpoints("west", group(discoveryv1.AddressTypeIPv4, []registry.EndpointPort{epPort("http", 8080)}, zoned("10.2.0.1", "b", "w1"))),
	}
	var exports []registry.Export
	for _, c := range []string{"east", "west"} {
		x := export(c, registry.ClusterSetIP, v4, port("http", corev1.ProtocolTCP, 80))
		x.Spec.TrafficDistribution = ptr.To(td)
		exports = append(exports, x)
	}
	e.publish(exports, eps...)
	e.reconcile("web")
}

// TestNodeHintsAddedToExistingSlices: an import that goes from
// PreferSameZone to PreferSameNode gets node hints in the slices it has,
// whose zone hints do not change.
func TestNodeHintsAddedToExistingSlices(t *testing.T) {
	e := newEnv(t, namespace(testNS), node("n1", "a"), node("n2", "b"))
	publishHinted(e, corev1.ServiceTrafficDistributionPreferSameZone)
	if d := cmp.Diff(map[string][]string{"10.1.0.1": nil, "10.2.0.1": nil}, nodeHints(e.slices("web"))); d != "" {
		t.Errorf("PreferSameZone node hints (-want +got):\n%s", d)
	}
	e.steady("web")
	publishHinted(e, corev1.ServiceTrafficDistributionPreferSameNode)
	if d := cmp.Diff(map[string][]string{"10.1.0.1": {"n1"}, "10.2.0.1": {topology.Elsewhere}}, nodeHints(e.slices("web"))); d != "" {
		t.Errorf("PreferSameNode node hints (-want +got):\n%s", d)
	}
	e.steady("web")
}

// TestNodeHintsDroppedByTheServer: an API server that drops node hints
// (Kubernetes before 1.34 by default) does not make mcsd write the slices
// again and again, and one that keeps them again gets them.
func TestNodeHintsDroppedByTheServer(t *testing.T) {
	e := newEnv(t, namespace(testNS), node("n1", "a"), node("n2", "b"))
	drop := func(o client.Object) error {
		if sl, ok := o.(*discoveryv1.EndpointSlice); ok {
			sl.Endpoints = withoutNodeHints(sl.Endpoints)
		}
		return nil
	}
	e.createHook, e.updateHook = drop, drop
	publishHinted(e, corev1.ServiceTrafficDistributionPreferSameNode)
	if d := cmp.Diff(map[string][]string{"10.1.0.1": nil, "10.2.0.1": nil}, nodeHints(e.slices("web"))); d != "" {
		t.Errorf("node hints kept by a server that drops them (-want +got):\n%s", d)
	}
	if d := cmp.Diff(map[string][]string{"10.1.0.1": {"a"}, "10.2.0.1": {"b"}}, zoneHints(e.slices("web"))); d != "" {
		t.Errorf("zone hints (-want +got):\n%s", d)
	}
	e.steady("web")

	// mcsd restarted, the server still dropping them: the slices are
	// written again once at most, not at every reconcile.
	e.r.nodeHintsDropped.Store(false)
	e.reconcile("web")
	e.steady("web")

	// The server upgraded, and mcsd restarted with it: every slice gets
	// its node hints.
	e.createHook, e.updateHook = nil, nil
	e.r.nodeHintsDropped.Store(false)
	e.reconcile("web")
	if d := cmp.Diff(map[string][]string{"10.1.0.1": {"n1"}, "10.2.0.1": {topology.Elsewhere}}, nodeHints(e.slices("web"))); d != "" {
		t.Errorf("node hints once the server keeps them (-want +got):\n%s", d)
	}
	e.steady("web")
}

// TestZonesBringBackOnlyHintedImports: a change of the cluster's zones
// brings back the imports that prefer their cluster and can carry hints;
// a headless one has none, and is left alone.
func TestZonesBringBackOnlyHintedImports(t *testing.T) {
	e := newEnv(t, namespace(testNS))
	for name, typ := range map[string]mcsv1beta1.ServiceImportType{"web": mcsv1beta1.ClusterSetIP, "db": mcsv1beta1.Headless} {
		si := &mcsv1beta1.ServiceImport{
			ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name, Annotations: map[string]string{
				wellknown.AnnotationManaged: "true", topology.AnnotationPreference: topology.PreferSameCluster}},
			Spec: mcsv1beta1.ServiceImportSpec{Type: typ},
		}
		if err := e.api.Create(e.ctx, si); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := e.r.importsPreferringTheirCluster(e.ctx), []reconcile.Request{request(testNS, "web")}; !cmp.Equal(got, want) {
		t.Errorf("imports brought back %v, want %v", got, want)
	}
}

// refuseSameZone fails writing Services with trafficDistribution
// PreferSameZone, as Kubernetes 1.33 with its default feature gates does.
func refuseSameZone(obj client.Object) error {
	svc, ok := obj.(*corev1.Service)
	if !ok || ptr.Deref(svc.Spec.TrafficDistribution, "") != corev1.ServiceTrafficDistributionPreferSameZone {
		return nil
	}
	return apierrors.NewInvalid(schema.GroupKind{Kind: "Service"}, svc.Name, field.ErrorList{field.NotSupported(
		field.NewPath("spec", "trafficDistribution"), *svc.Spec.TrafficDistribution, []string{corev1.ServiceTrafficDistributionPreferClose})})
}

// TestTrafficDistributionRefused: an API server that refuses the import's
// trafficDistribution on a Service still gets the derived Service, without
// it, and the hints in the slices; once, not at every reconcile.
func TestTrafficDistributionRefused(t *testing.T) {
	for _, existing := range []bool{false, true} {
		t.Run(fmt.Sprintf("derived Service existing %v", existing), func(t *testing.T) {
			e := newEnv(t, namespace(testNS), node("n1", "a"), node("n2", "b"))
			e.createHook, e.updateHook = refuseSameZone, refuseSameZone
			if existing {
				publishHinted(e, corev1.ServiceTrafficDistributionPreferClose)
				if td := e.service(DerivedServiceName("web")).Spec.TrafficDistribution; ptr.Deref(td, "") != corev1.ServiceTrafficDistributionPreferClose {
					t.Fatalf("trafficDistribution %v, want PreferClose", td)
				}
			}
			publishHinted(e, corev1.ServiceTrafficDistributionPreferSameZone)
			svc := e.service(DerivedServiceName("web"))
			if svc == nil || svc.Spec.TrafficDistribution != nil {
				t.Fatalf("derived Service %+v, want one without trafficDistribution", svc)
			}
			if d := cmp.Diff(map[string][]string{"10.1.0.1": {"a"}, "10.2.0.1": {"b"}}, zoneHints(e.slices("web"))); d != "" {
				t.Errorf("zone hints (-want +got):\n%s", d)
			}
			if ev := e.events(); !slices.ContainsFunc(ev, func(s string) bool { return strings.Contains(s, eventTrafficDistributionRefused) }) {
				t.Errorf("events %v, want %s", ev, eventTrafficDistributionRefused)
			}
			e.steady("web")
		})
	}
}

// TestTrafficDistributionRefusedLater: another import with the refused
// value gets its derived Service without it, and says so too; once the
// refusal is older than tdRetry, the value is tried again, and kept where
// the API server now takes it.
func TestTrafficDistributionRefusedLater(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	e := newEnv(t, namespace(testNS), node("n1", "a"), node("n2", "b"))
	e.r.Now = func() time.Time { return now }
	e.createHook, e.updateHook = refuseSameZone, refuseSameZone
	publishHinted(e, corev1.ServiceTrafficDistributionPreferSameZone)
	e.events()

	api := export("east", registry.ClusterSetIP, v4, port("http", corev1.ProtocolTCP, 80))
	api.Service.Name = "api"
	api.Spec.TrafficDistribution = ptr.To(corev1.ServiceTrafficDistributionPreferSameZone)
	e.publish([]registry.Export{api})
	// One create: none refused for the value, which is not asked again.
	if w := e.reconcile("api"); len(slices.DeleteFunc(w, func(s string) bool { return !strings.HasPrefix(s, "create *v1.Service") })) != 1 {
		t.Errorf("the refused value asked again for another import: %v", w)
	}
	if svc := e.service(DerivedServiceName("api")); svc == nil || svc.Spec.TrafficDistribution != nil {
		t.Fatalf("api's derived Service %+v, want one without trafficDistribution", svc)
	}
	if ev := e.events(); !slices.ContainsFunc(ev, func(s string) bool { return strings.Contains(s, eventTrafficDistributionRefused) }) {
		t.Errorf("api's events %v, want %s", ev, eventTrafficDistributionRefused)
	}

	// The cluster upgraded; past tdRetry, the next write takes the value.
	e.createHook, e.updateHook = nil, nil
	now = now.Add(tdRetry)
	e.reconcile("web")
	if td := e.service(DerivedServiceName("web")).Spec.TrafficDistribution; ptr.Deref(td, "") != corev1.ServiceTrafficDistributionPreferSameZone {
		t.Errorf("trafficDistribution %v once the API server takes it, want PreferSameZone", td)
	}
	e.steady("web")
}
