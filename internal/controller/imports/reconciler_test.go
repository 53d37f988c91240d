package imports

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/util/flowcontrol"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/clusterset"
	"github.com/mcsd-io/mcsd/internal/conditions"
	"github.com/mcsd-io/mcsd/internal/controller/skeleton"
	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	"github.com/mcsd-io/mcsd/internal/wellknown"
	"github.com/mcsd-io/mcsd/pkg/registry"
)

// twoClusters: east (oldest) exports http and metrics, west only http with
// other target ports; east's endpoints include a not-ready, terminating one.
func twoClusters(e *env) {
	east := export("east", registry.ClusterSetIP, v4, port("http", corev1.ProtocolTCP, 80), port("metrics", corev1.ProtocolTCP, 9090))
	east.Spec.ExportedLabels = map[string]string{"app": "web"}
	east.Spec.ExportedAnnotations = map[string]string{"team": "shop"}
	west := export("west", registry.ClusterSetIP, v4, port("http", corev1.ProtocolTCP, 80))
	west.Spec.ExportedLabels = map[string]string{"app": "other"} // loses: east is older
	e.publish([]registry.Export{east, west},
		endpoints("east", group(discoveryv1.AddressTypeIPv4, []registry.EndpointPort{epPort("http", 8080), epPort("metrics", 9091)},
			ready("10.1.0.1"),
			registry.Endpoint{Addresses: []string{"10.1.0.2"}, Terminating: true, NodeName: "n1", Zone: "z1"})),
		endpoints("west", group(discoveryv1.AddressTypeIPv4, []registry.EndpointPort{epPort("http", 8081)},
			registry.Endpoint{Addresses: []string{"10.2.0.1"}, Ready: true, Serving: true, Hostname: "web-0", NodeName: "w1", Zone: "z2"})),
	)
}

func TestClusterSetIPImport(t *testing.T) {
	e := newEnv(t, namespace(testNS))
	twoClusters(e)
	e.reconcile("web")

	si := e.serviceImport("web")
	if si.Spec.Type != mcsv1beta1.ClusterSetIP {
		t.Errorf("type = %s", si.Spec.Type)
	}
	wantPorts := []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}, {Name: "metrics", Protocol: corev1.ProtocolTCP, Port: 9090}}
	if d := cmp.Diff(wantPorts, si.Spec.Ports); d != "" {
		t.Errorf("ports (-want +got):\n%s", d)
	}
	if d := cmp.Diff(map[string]string{"app": "web"}, si.Labels); d != "" {
		t.Errorf("labels (-want +got):\n%s", d)
	}
	wantAnn := map[string]string{"team": "shop", wellknown.AnnotationManaged: "true", wellknown.AnnotationDerivedService: DerivedServiceName("web")}
	if d := cmp.Diff(wantAnn, si.Annotations); d != "" {
		t.Errorf("annotations (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]mcsv1beta1.ClusterStatus{{Cluster: "east"}, {Cluster: "west"}}, si.Status.Clusters); d != "" {
		t.Errorf("clusters (-want +got):\n%s", d)
	}
	if got := si.Status.EndpointSliceObjects; got != mcsv1beta1.EndpointSliceObjectsPresent {
		t.Errorf("endpointSliceObjects = %q, want Present", got)
	}
	if len(si.Spec.IPs) != 0 {
		t.Errorf("ips = %v before the Service has any", si.Spec.IPs)
	}
	wantCondition(t, si, "Ready", metav1.ConditionFalse, "Pending")

	svc := e.service(DerivedServiceName("web"))
	if svc == nil {
		t.Fatal("no derived Service")
	}
	if svc.Spec.Type != corev1.ServiceTypeClusterIP || len(svc.Spec.Selector) != 0 {
		t.Errorf("derived Service type %s selector %v", svc.Spec.Type, svc.Spec.Selector)
	}
	if !metav1.IsControlledBy(svc, si) {
		t.Errorf("derived Service owners %+v, want the ServiceImport", svc.OwnerReferences)
	}
	var svcPorts []string
	for _, p := range svc.Spec.Ports {
		svcPorts = append(svcPorts, fmt.Sprintf("%s/%s/%d->%s", p.Name, p.Protocol, p.Port, p.TargetPort.String()))
	}
	if d := cmp.Diff([]string{"http/TCP/80->80", "metrics/TCP/9090->9090"}, svcPorts); d != "" {
		t.Errorf("derived Service ports (-want +got):\n%s", d)
	}
	if d := cmp.Diff(v4, svc.Spec.IPFamilies); d != "" || ptr.Deref(svc.Spec.IPFamilyPolicy, "") != corev1.IPFamilyPolicySingleStack {
		t.Errorf("derived Service families %v policy %v", svc.Spec.IPFamilies, svc.Spec.IPFamilyPolicy)
	}

	// The API server allocates the cluster IP; the import takes it.
	e.allocate("web", "10.96.0.10")
	e.reconcile("web")
	si = e.serviceImport("web")
	if d := cmp.Diff([]string{"10.96.0.10"}, si.Spec.IPs); d != "" {
		t.Errorf("ips (-want +got):\n%s", d)
	}
	if d := cmp.Diff(v4, si.Spec.IPFamilies); d != "" {
		t.Errorf("ipFamilies (-want +got):\n%s", d)
	}
	wantCondition(t, si, "Ready", metav1.ConditionTrue, "Ready")

	e.steady("web")
	// A restarted controller finds everything as it wants it.
	e.r = &Reconciler{Client: e.r.Client, View: e.view, ClusterID: "east"}
	e.steady("web")
}

func TestEndpointSlicesPerCluster(t *testing.T) {
	e := newEnv(t, namespace(testNS))
	twoClusters(e)
	e.reconcile("web")
	svc := e.service(DerivedServiceName("web"))

	byCluster := e.slices("web")
	if len(byCluster) != 2 || len(byCluster["east"]) != 1 || len(byCluster["west"]) != 1 {
		t.Fatalf("slices by cluster: %v", byCluster)
	}
	for cluster, ss := range byCluster {
		s := ss[0]
		want := map[string]string{
			mcsv1beta1.LabelServiceName:   "web",
			mcsv1beta1.LabelSourceCluster: cluster,
			discoveryv1.LabelManagedBy:    wellknown.ManagedBy,
			discoveryv1.LabelServiceName:  DerivedServiceName("web"),
		}
		if d := cmp.Diff(want, s.Labels); d != "" {
			t.Errorf("%s labels (-want +got):\n%s", cluster, d)
		}
		if !metav1.IsControlledBy(&s, svc) {
			t.Errorf("%s slice not owned by the derived Service: %+v", cluster, s.OwnerReferences)
		}
		if len(validation.IsDNS1123Label(s.Name)) > 0 {
			t.Errorf("slice name %q is not a DNS label", s.Name)
		}
	}
	// Ports: the import's names, each cluster's own numbers, only the ports
	// the cluster serves.
	if d := cmp.Diff([]string{"http:8080", "metrics:9091"}, portNames(byCluster["east"][0].Ports)); d != "" {
		t.Errorf("east ports (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"http:8081"}, portNames(byCluster["west"][0].Ports)); d != "" {
		t.Errorf("west ports (-want +got):\n%s", d)
	}
	// Endpoints are copied with their conditions, hostname and zone; another
	// cluster's node name is dropped (this test's reconciler runs in "east").
	wantWest := []discoveryv1.Endpoint{{
		Addresses:  []string{"10.2.0.1"},
		Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
		Hostname:   ptr.To("web-0"), Zone: ptr.To("z2"),
	}}
	if d := cmp.Diff(wantWest, byCluster["west"][0].Endpoints); d != "" {
		t.Errorf("west endpoints (-want +got):\n%s", d)
	}
	wantEast := []discoveryv1.Endpoint{
		{Addresses: []string{"10.1.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)}},
		{Addresses: []string{"10.1.0.2"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(false), Terminating: ptr.To(true)}, NodeName: ptr.To("n1"), Zone: ptr.To("z1")},
	}
	if d := cmp.Diff(wantEast, byCluster["east"][0].Endpoints); d != "" {
		t.Errorf("east endpoints (-want +got):\n%s", d)
	}
}

func TestClusterServingNoPortGetsSlicesWithoutPorts(t *testing.T) {
	e := newEnv(t, namespace(testNS))
	// north's port 80 is "web", not "http": it matches the import port by
	// number, loses the conflict, and serves no import port. Its endpoints
	// are listed without ports: kube-proxy sends them nothing.
	e.publish([]registry.Export{
		export("east", registry.ClusterSetIP, v4, port("http", corev1.ProtocolTCP, 80)),
		export("north", registry.ClusterSetIP, v4, port("web", corev1.ProtocolTCP, 80)),
	},
		endpoints("east", group(discoveryv1.AddressTypeIPv4, []registry.EndpointPort{epPort("http", 8080)}, ready("10.1.0.1"))),
		endpoints("north", group(discoveryv1.AddressTypeIPv4, []registry.EndpointPort{epPort("web", 8080)}, ready("10.3.0.1"))),
	)
	e.reconcile("web")
	byCluster := e.slices("web")
	if len(byCluster["north"]) != 1 || len(byCluster["east"]) != 1 {
		t.Fatalf("slices by cluster: %v", byCluster)
	}
	if p := byCluster["north"][0].Ports; len(p) != 0 {
		t.Errorf("north's slice has ports %v, want none", portNames(p))
	}
	if d := cmp.Diff([]string{"10.3.0.1"}, addresses(byCluster["north"])); d != "" {
		t.Errorf("north's addresses (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"http:8080"}, portNames(byCluster["east"][0].Ports)); d != "" {
		t.Errorf("east ports (-want +got):\n%s", d)
	}
	e.steady("web")
}

// TestPortLostByNumberIsNotServed is the strict port rule: a cluster whose
// port of the import's name has another number lists no entry for it, and
// gets it back once its definition agrees again.
func TestPortLostByNumberIsNotServed(t *testing.T) {
	e := newEnv(t, namespace(testNS))
	eastEps := endpoints("east", group(discoveryv1.AddressTypeIPv4, []registry.EndpointPort{epPort("tcp", 42)}, ready("10.1.0.1")))
	westEps := endpoints("west", group(discoveryv1.AddressTypeIPv4, []registry.EndpointPort{epPort("tcp", 42), epPort("admin", 9000)}, ready("10.2.0.1")))
	e.publish([]registry.Export{
		export("east", registry.ClusterSetIP, v4, port("tcp", corev1.ProtocolTCP, 42)),
		export("west", registry.ClusterSetIP, v4, port("tcp", corev1.ProtocolTCP, 4242), port("admin", corev1.ProtocolTCP, 90)),
	}, eastEps, westEps)
	e.reconcile("web")
	byCluster := e.slices("web")
	if d := cmp.Diff([]string{"tcp:42"}, portNames(byCluster["east"][0].Ports)); d != "" {
		t.Errorf("east ports (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"admin:9000"}, portNames(byCluster["west"][0].Ports)); d != "" {
		t.Errorf("west ports while its tcp port loses (-want +got):\n%s", d)
	}
	e.steady("web")

	// The conflict clears: west's tcp port is 42 again.
	e.publish([]registry.Export{
		export("east", registry.ClusterSetIP, v4, port("tcp", corev1.ProtocolTCP, 42)),
		export("west", registry.ClusterSetIP, v4, port("tcp", corev1.ProtocolTCP, 42), port("admin", corev1.ProtocolTCP, 90)),
	}, eastEps, westEps)
	e.reconcile("web")
	if d := cmp.Diff([]string{"tcp:42", "admin:9000"}, portNames(e.slices("web")["west"][0].Ports)); d != "" {
		t.Errorf("west ports once the conflict cleared (-want +got):\n%s", d)
	}
	e.steady("web")
}

// twoHeadlessDB exports shop/web as headless from east, with the TCP port
// db 5432, and from west, with the port db westPort; each cluster has one
// endpoint serving its port, eastEp and westEp.
func twoHeadlessDB(e *env, westPort int32, eastEp, westEp registry.Endpoint) {
	e.publish([]registry.Export{
		export("east", registry.Headless, v4, port("db", corev1.ProtocolTCP, 5432)),
		export("west", registry.Headless, v4, port("db", corev1.ProtocolTCP, westPort)),
	},
		endpoints("east", group(discoveryv1.AddressTypeIPv4, []registry.EndpointPort{epPort("db", 5432)}, eastEp)),
		endpoints("west", group(discoveryv1.AddressTypeIPv4, []registry.EndpointPort{epPort("db", westPort)}, westEp)),
	)
}

func TestHeadlessImport(t *testing.T) {
	e := newEnv(t, namespace(testNS))
	twoHeadlessDB(e, 5432,
		registry.Endpoint{Addresses: []string{"10.1.0.1"}, Ready: true, Serving: true, Hostname: "db-0"},
		registry.Endpoint{Addresses: []string{"10.2.0.1"}, Ready: true, Serving: true, Hostname: "db-0"})
	e.reconcile("web")

	si := e.serviceImport("web")
	if si.Spec.Type != mcsv1beta1.Headless || len(si.Spec.IPs) != 0 {
		t.Errorf("type %s ips %v", si.Spec.Type, si.Spec.IPs)
	}
	if _, ok := si.Annotations[wellknown.AnnotationDerivedService]; ok {
		t.Errorf("headless import names a derived Service: %v", si.Annotations)
	}
	wantCondition(t, si, "Ready", metav1.ConditionTrue, "Ready")
	if got := si.Status.EndpointSliceObjects; got != mcsv1beta1.EndpointSliceObjectsPresent {
		t.Errorf("headless endpointSliceObjects = %q, want Present", got)
	}
	if e.service(DerivedServiceName("web")) != nil {
		t.Error("headless import has a derived Service")
	}
	for cluster, ss := range e.slices("web") {
		for _, s := range ss {
			if v, ok := s.Labels[discoveryv1.LabelServiceName]; ok {
				t.Errorf("%s slice has %s=%s", cluster, discoveryv1.LabelServiceName, v)
			}
			if h := ptr.Deref(s.Endpoints[0].Hostname, ""); h != "db-0" {
				t.Errorf("%s hostname = %q", cluster, h)
			}
		}
	}
	if n := len(e.slices("web")); n != 2 {
		t.Errorf("%d clusters with slices, want 2", n)
	}
	e.steady("web")
}

func TestLargeGroupsSplit(t *testing.T) {
	e := newEnv(t, namespace(testNS))
	var eps []registry.Endpoint
	for i := range 250 {
		eps = append(eps, ready(fmt.Sprintf("10.1.%d.%d", i/200, i%200)))
	}
	exports := []registry.Export{export("east", registry.ClusterSetIP, v4, port("http", corev1.ProtocolTCP, 80))}
	ports := []registry.EndpointPort{epPort("http", 8080)}
	e.publish(exports, endpoints("east", group(discoveryv1.AddressTypeIPv4, ports, eps...)))
	e.reconcile("web")

	ss := e.slices("web")["east"]
	var sizes []int
	for _, s := range ss {
		sizes = append(sizes, len(s.Endpoints))
	}
	slices.Sort(sizes)
	if d := cmp.Diff([]int{50, 100, 100}, sizes); d != "" {
		t.Errorf("slice sizes (-want +got):\n%s", d)
	}
	var want []string
	for _, ep := range eps {
		want = append(want, ep.Addresses[0])
	}
	slices.Sort(want)
	if d := cmp.Diff(want, addresses(ss)); d != "" {
		t.Errorf("addresses (-want +got):\n%s", d)
	}
	e.steady("web")

	// The split does not depend on the order the registry lists endpoints in.
	slices.Reverse(eps)
	e.publish(exports, endpoints("east", group(discoveryv1.AddressTypeIPv4, ports, eps...)))
	e.steady("web")

	// Fewer endpoints: the extra slice goes.
	e.publish(exports, endpoints("east", group(discoveryv1.AddressTypeIPv4, ports, eps[:150]...)))
	e.reconcile("web")
	if n := len(e.slices("web")["east"]); n != 2 {
		t.Errorf("%d slices for 150 endpoints, want 2", n)
	}
}

func TestLastExportGone(t *testing.T) {
	// A slice and a Service of someone else's stay.
	other := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: testNS, Name: "web-manual", Labels: map[string]string{mcsv1beta1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	plain := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "web"}}
	e := newEnv(t, namespace(testNS), other, plain)
	twoClusters(e)
	e.reconcile("web")
	e.allocate("web", "10.96.0.10")
	e.reconcile("web")

	e.unexport("east", "west")
	e.reconcile("web")
	if e.exists(&mcsv1beta1.ServiceImport{}, "web") {
		t.Error("ServiceImport not deleted")
	}
	if e.service(DerivedServiceName("web")) != nil {
		t.Error("derived Service not deleted")
	}
	left := e.slices("web")
	if len(left) != 1 || len(left[""]) != 1 || left[""][0].Name != "web-manual" {
		t.Errorf("slices left: %v, want only web-manual", left)
	}
	if e.service("web") == nil {
		t.Error("the exported Service itself was deleted")
	}
	e.steady("web")
}

func TestNamespaceMissingOrTerminating(t *testing.T) {
	t.Run("missing", func(t *testing.T) {
		e := newEnv(t)
		twoClusters(e)
		e.steady("web")
		if e.exists(&mcsv1beta1.ServiceImport{}, "web") {
			t.Error("ServiceImport created without a namespace")
		}
	})
	t.Run("terminating", func(t *testing.T) {
		ns := namespace(testNS)
		ns.Status.Phase = corev1.NamespaceTerminating
		e := newEnv(t, ns)
		twoClusters(e)
		e.steady("web")
		if e.exists(&mcsv1beta1.ServiceImport{}, "web") {
			t.Error("ServiceImport created in a terminating namespace")
		}
	})
}

// built returns an env whose import of web is complete and steady.
func built(t *testing.T) *env {
	e := newEnv(t, namespace(testNS))
	twoClusters(e)
	e.reconcile("web")
	e.allocate("web", "10.96.0.10")
	e.reconcile("web")
	e.steady("web")
	return e
}

// intact fails unless the import, its Service and its slices are still there.
func (e *env) intact() {
	e.t.Helper()
	si := e.serviceImport("web")
	if d := cmp.Diff([]string{"10.96.0.10"}, si.Spec.IPs); d != "" {
		e.t.Errorf("ips (-want +got):\n%s", d)
	}
	if len(si.Status.Clusters) != 2 {
		e.t.Errorf("clusters = %v", si.Status.Clusters)
	}
	if e.service(DerivedServiceName("web")) == nil {
		e.t.Error("derived Service gone")
	}
	if n := len(e.slices("web")); n != 2 {
		e.t.Errorf("slices of %d clusters, want 2", n)
	}
}

func TestNotSyncedTouchesNothing(t *testing.T) {
	e := built(t)
	// A restarted controller whose registry watch has not delivered its
	// first read yet: its View knows no exports.
	e.view = clusterset.NewView()
	e.r.View = e.view
	// No retry either: the first full read brings every import back.
	e.untouched("before the registry was read")
}

// untouched reconciles web and checks that it wrote nothing, asked for no
// retry, and left the import intact, as it must while the View cannot tell
// (what).
func (e *env) untouched(what string) {
	e.t.Helper()
	e.writes = nil
	if res, err := e.r.Reconcile(e.ctx, ctrl.Request{NamespacedName: client.ObjectKey{Namespace: testNS, Name: "web"}}); err != nil || !res.IsZero() {
		e.t.Fatalf("reconcile %s = %+v, %v; want neither a requeue nor an error", what, res, err)
	}
	if len(e.writes) > 0 {
		e.t.Fatalf("wrote %s: %v", what, e.writes)
	}
	e.intact()
}

// TestNamespaceNotReadTouchesNothing: a View that a scoped backend has not
// delivered the namespace to yet knows none of its Services: the import is
// left as it is until the namespace comes, and its coming brings the
// imports mcsd made there back.
func TestNamespaceNotReadTouchesNothing(t *testing.T) {
	e := built(t)
	e.view = clusterset.NewView()
	e.r.View = e.view
	e.view.OnUpdate(registry.Update{Full: true, Scoped: true, Namespaces: []string{"other"}})
	e.view.OnConnection(true, nil)
	e.untouched("before the namespace was read")

	// The namespace read, with nothing exported in it: its coming names
	// the import, which now goes.
	e.view.OnUpdate(registry.Update{Scoped: true, Namespaces: []string{testNS}})
	got := e.r.changeToImports(e.ctx, clusterset.Change{Namespace: testNS})
	if d := cmp.Diff([]ctrl.Request{request(testNS, "web")}, got); d != "" {
		t.Fatalf("changeToImports(namespace) (-want +got):\n%s", d)
	}
	e.reconcile("web")
	if e.exists(&mcsv1beta1.ServiceImport{}, "web") {
		t.Fatal("ServiceImport kept after its namespace was read with no export of it")
	}
}

func TestDisconnectedTouchesNothing(t *testing.T) {
	e := built(t)
	e.disconnect(errors.New("etcd: context deadline exceeded"))
	// Even the exports going deletes nothing while disconnected: the View
	// keeps what it last read.
	e.unexport("east", "west")
	w := e.reconcile("web")
	if d := cmp.Diff([]string{"patch/status *v1beta1.ServiceImport web"}, w); d != "" {
		t.Errorf("writes while disconnected (-want +got):\n%s", d)
	}
	e.intact()
	si := e.serviceImport("web")
	c := wantCondition(t, si, conditions.RegistryReachable, metav1.ConditionFalse, conditions.ReasonRegistryUnreachable)
	if !strings.Contains(c.Message, "deadline exceeded") {
		t.Errorf("message %q does not say why", c.Message)
	}
	wantCondition(t, si, "Ready", metav1.ConditionTrue, "Ready")
	e.steady("web")

	// Back, with the exports (exported again during the outage, in the same
	// order): the condition goes, nothing else changes.
	twoClusters(e)
	e.reconnect()
	w = e.reconcile("web")
	if d := cmp.Diff([]string{"patch/status *v1beta1.ServiceImport web"}, w); d != "" {
		t.Errorf("writes after reconnecting (-want +got):\n%s", d)
	}
	if c := condition(e.serviceImport("web"), conditions.RegistryReachable); c != nil {
		t.Errorf("RegistryReachable still set: %+v", c)
	}
	e.intact()
	e.steady("web")

	// Disconnected again, then back without the exports: now it goes.
	e.disconnect(errors.New("down"))
	e.unexport("east", "west")
	e.reconcile("web")
	e.intact()
	e.reconnect()
	e.reconcile("web")
	if e.exists(&mcsv1beta1.ServiceImport{}, "web") {
		t.Error("ServiceImport kept after reconnecting without exports")
	}
}

func TestNotConnectedYetTouchesNothing(t *testing.T) {
	e := built(t)
	// The exports go, and the controller restarts: its new watch delivers
	// the full read, without them, before it reports the connection; the
	// report is held back until the test ends.
	e.unexport("east", "west")
	release := make(chan struct{})
	defer close(release)
	e.view = clusterset.NewView()
	e.r.View = e.view
	e.watch(heldConnection{View: e.view, release: release})
	poll.Until(t, settleTimeout, "the new View's first read", func() (bool, string) { return e.view.HasSynced(), "not synced" })
	if len(e.view.Exports(webKey)) != 0 {
		t.Fatal("the registry still holds exports of web")
	}
	e.steady("web")
	e.intact()
	if c := condition(e.serviceImport("web"), conditions.RegistryReachable); c != nil {
		t.Errorf("RegistryReachable set before the first connection report: %+v", c)
	}
}

// heldConnection passes a registry watch's updates to the View and holds
// back its connection reports until release is closed: the View stays as a
// backend leaves it between its first full read and the report that
// follows.
type heldConnection struct {
	*clusterset.View
	release <-chan struct{}
}

func (h heldConnection) OnConnection(connected bool, err error) {
	<-h.release
	h.View.OnConnection(connected, err)
}

func TestUnmarkedServiceImportNotTouched(t *testing.T) {
	theirs := &mcsv1beta1.ServiceImport{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "web", Labels: map[string]string{"owner": "someone"}},
		Spec:       mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.Headless, Ports: []mcsv1beta1.ServicePort{}},
	}
	e := newEnv(t, namespace(testNS), theirs)
	before := e.serviceImport("web")
	twoClusters(e)
	e.steady("web")
	if d := cmp.Diff(before, e.serviceImport("web")); d != "" {
		t.Errorf("unmarked ServiceImport changed (-before +after):\n%s", d)
	}
	if e.service(DerivedServiceName("web")) != nil || len(e.slices("web")) > 0 {
		t.Error("mcsd created objects for an import it does not own")
	}
	if ev := e.events(); len(ev) != 1 || !strings.Contains(ev[0], "Warning "+eventNotManaged) {
		t.Errorf("events = %v, want one %s warning", ev, eventNotManaged)
	}

	// Nor is it deleted when the exports go.
	e.unexport("east", "west")
	e.steady("web")
	if !e.exists(&mcsv1beta1.ServiceImport{}, "web") {
		t.Error("unmarked ServiceImport deleted")
	}
}

func TestForeignDerivedService(t *testing.T) {
	squatter := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: DerivedServiceName("web")},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "x"}, Ports: []corev1.ServicePort{{Port: 1}}},
	}
	e := newEnv(t, namespace(testNS), squatter)
	before := e.service(squatter.Name)
	twoClusters(e)
	e.reconcile("web")

	if d := cmp.Diff(before, e.service(squatter.Name)); d != "" {
		t.Errorf("foreign Service changed (-before +after):\n%s", d)
	}
	si := e.serviceImport("web")
	c := wantCondition(t, si, "Ready", metav1.ConditionFalse, conditions.ReasonDerivedServiceConflict)
	if !strings.Contains(c.Message, squatter.Name) {
		t.Errorf("message %q does not name the Service", c.Message)
	}
	for _, ss := range e.slices("web") {
		if _, ok := ss[0].Labels[discoveryv1.LabelServiceName]; ok {
			t.Error("slices route the foreign Service to the import's endpoints")
		}
	}
	if n, ok := si.Annotations[wellknown.AnnotationDerivedService]; ok {
		t.Errorf("the import names %q, the foreign Service, as its derived Service: a gateway would route to it", n)
	}
	e.events()
	e.steady("web")

	// Once it is gone, mcsd creates its own.
	if err := e.api.Delete(e.ctx, before); err != nil {
		t.Fatal(err)
	}
	e.reconcile("web")
	if svc := e.service(squatter.Name); svc == nil || !isManaged(svc) {
		t.Fatal("no derived Service after the foreign one was deleted")
	}
	if n := e.serviceImport("web").Annotations[wellknown.AnnotationDerivedService]; n != squatter.Name {
		t.Errorf("derived-service annotation %q, want %q", n, squatter.Name)
	}
	for _, ss := range e.slices("web") {
		if ss[0].Labels[discoveryv1.LabelServiceName] != squatter.Name {
			t.Errorf("slice labels %v", ss[0].Labels)
		}
	}
}

func TestDualStackIPsInFamilyOrder(t *testing.T) {
	e := newEnv(t, namespace(testNS))
	families := []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}
	e.publish([]registry.Export{export("east", registry.ClusterSetIP, families, port("http", corev1.ProtocolTCP, 80))})
	e.reconcile("web")
	svc := e.service(DerivedServiceName("web"))
	if ptr.Deref(svc.Spec.IPFamilyPolicy, "") != corev1.IPFamilyPolicyRequireDualStack {
		t.Errorf("policy = %v", svc.Spec.IPFamilyPolicy)
	}
	e.allocate("web", "fd00::10", "10.96.0.10")
	e.reconcile("web")
	si := e.serviceImport("web")
	if d := cmp.Diff([]string{"fd00::10", "10.96.0.10"}, si.Spec.IPs); d != "" {
		t.Errorf("ips (-want +got):\n%s", d)
	}
	if d := cmp.Diff(families, si.Spec.IPFamilies); d != "" {
		t.Errorf("ipFamilies (-want +got):\n%s", d)
	}
	e.steady("web")
}

// TestEmptySlicePerFamily: a dual-stack import gets, per source cluster, a
// slice of every family of the import, empty where the cluster has no
// endpoints of it (or no endpoints record yet), with the same labels; the
// placeholders are written once and go once the cluster has endpoints of
// the family.
func TestEmptySlicePerFamily(t *testing.T) {
	e := newEnv(t, namespace(testNS))
	dual := []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	http := []registry.EndpointPort{epPort("http", 8080)}
	exports := []registry.Export{
		export("east", registry.ClusterSetIP, dual, port("http", corev1.ProtocolTCP, 80)),
		export("west", registry.ClusterSetIP, dual, port("http", corev1.ProtocolTCP, 80)),
	}
	e.publish(exports, endpoints("east", group(discoveryv1.AddressTypeIPv4, http, ready("10.1.0.1"))))
	e.reconcile("web")

	types := func(ss []discoveryv1.EndpointSlice) map[discoveryv1.AddressType]int {
		out := map[discoveryv1.AddressType]int{}
		for _, s := range ss {
			out[s.AddressType] += len(s.Endpoints)
		}
		return out
	}
	byCluster := e.slices("web")
	if d := cmp.Diff(map[discoveryv1.AddressType]int{"IPv4": 1, "IPv6": 0}, types(byCluster["east"])); d != "" {
		t.Errorf("east endpoints per address type (-want +got):\n%s", d)
	}
	if d := cmp.Diff(map[discoveryv1.AddressType]int{"IPv4": 0, "IPv6": 0}, types(byCluster["west"])); d != "" {
		t.Errorf("west endpoints per address type (-want +got):\n%s", d)
	}
	for cluster, ss := range byCluster {
		for _, s := range ss {
			if s.Labels[mcsv1beta1.LabelSourceCluster] != cluster || s.Labels[discoveryv1.LabelServiceName] != DerivedServiceName("web") ||
				s.Labels[discoveryv1.LabelManagedBy] != wellknown.ManagedBy {
				t.Errorf("%s slice %s labels %v", cluster, s.Name, s.Labels)
			}
		}
	}
	e.steady("web")

	// A group without endpoints (a cluster's own empty slice) is no
	// endpoint of its family: the placeholder stays, nothing is written.
	e.publish(exports,
		endpoints("east", group(discoveryv1.AddressTypeIPv4, http, ready("10.1.0.1")), group(discoveryv1.AddressTypeIPv6, http)))
	e.steady("web")

	// west's IPv6 endpoints replace its IPv6 placeholder.
	e.publish(exports,
		endpoints("east", group(discoveryv1.AddressTypeIPv4, http, ready("10.1.0.1"))),
		endpoints("west", group(discoveryv1.AddressTypeIPv6, http, ready("fd00::2:1"))))
	e.reconcile("web")
	byCluster = e.slices("web")
	if n := len(byCluster["west"]); n != 2 {
		t.Errorf("west has %d slices, want 2", n)
	}
	if d := cmp.Diff(map[discoveryv1.AddressType]int{"IPv4": 0, "IPv6": 1}, types(byCluster["west"])); d != "" {
		t.Errorf("west endpoints per address type (-want +got):\n%s", d)
	}
	e.steady("web")
}

// refuseIPv6 fails creating Services that ask for IPv6, as a single-stack
// IPv4 API server does.
func refuseIPv6(obj client.Object) error {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return nil
	}
	var errs field.ErrorList
	if ptr.Deref(svc.Spec.IPFamilyPolicy, "") == corev1.IPFamilyPolicyRequireDualStack {
		errs = append(errs, field.Invalid(field.NewPath("spec", "ipFamilyPolicy"), svc.Spec.IPFamilyPolicy, "this cluster is not configured for dual-stack services"))
	}
	for i, f := range svc.Spec.IPFamilies {
		if f == corev1.IPv6Protocol {
			errs = append(errs, field.Invalid(field.NewPath("spec", "ipFamilies").Index(i), f, "not configured on this cluster"))
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(schema.GroupKind{Kind: "Service"}, svc.Name, errs)
}

func TestIPFamilyFallback(t *testing.T) {
	e := newEnv(t, namespace(testNS))
	e.createHook = refuseIPv6
	e.publish([]registry.Export{export("east", registry.ClusterSetIP, dual, port("http", corev1.ProtocolTCP, 80))})
	e.reconcile("web")

	svc := e.service(DerivedServiceName("web"))
	if svc == nil {
		t.Fatal("no derived Service")
	}
	if d := cmp.Diff(v4, svc.Spec.IPFamilies); d != "" || ptr.Deref(svc.Spec.IPFamilyPolicy, "") != corev1.IPFamilyPolicySingleStack {
		t.Errorf("fallback Service families %v policy %v", svc.Spec.IPFamilies, svc.Spec.IPFamilyPolicy)
	}
	e.allocate("web", "10.96.0.10")
	e.reconcile("web")
	si := e.serviceImport("web")
	if d := cmp.Diff([]string{"10.96.0.10"}, si.Spec.IPs); d != "" {
		t.Errorf("ips (-want +got):\n%s", d)
	}
	if d := cmp.Diff(v4, si.Spec.IPFamilies); d != "" {
		t.Errorf("ipFamilies (-want +got):\n%s", d)
	}
	c := wantCondition(t, si, "Ready", metav1.ConditionFalse, "IPFamilyNotSupported")
	if !strings.Contains(c.Message, "IPv6") {
		t.Errorf("message %q does not name the refused family", c.Message)
	}
	// Stable: the refused family is not asked for again, the Service stays.
	e.steady("web")
}

// TestNoIPFamilies: an export that names no IP family (written by an older
// mcsd, or the AWS controller) gets a derived Service of the cluster's
// default family.
func TestNoIPFamilies(t *testing.T) {
	e := newEnv(t, namespace(testNS))
	e.publish([]registry.Export{export("east", registry.ClusterSetIP, nil, port("http", corev1.ProtocolTCP, 80))},
		endpoints("east", group(discoveryv1.AddressTypeIPv4, []registry.EndpointPort{epPort("http", 8080)}, ready("10.1.0.1"))))
	e.reconcile("web")
	if e.service(DerivedServiceName("web")) == nil {
		t.Error("no derived Service for an export without IP families")
	}
}

func TestIPFamilyNoneSupported(t *testing.T) {
	e := newEnv(t, namespace(testNS))
	var creates atomic.Int32
	e.createHook = func(o client.Object) error {
		if _, ok := o.(*corev1.Service); ok {
			creates.Add(1)
		}
		return refuseIPv6(o)
	}
	exports := []registry.Export{export("east", registry.ClusterSetIP, v6, port("http", corev1.ProtocolTCP, 80))}
	e.publish(exports, endpoints("east", group(discoveryv1.AddressTypeIPv6, []registry.EndpointPort{epPort("http", 8080)}, ready("fd00:1::1"))))
	e.reconcile("web")
	// The import's next reconciles (its endpoints change) do not ask for
	// the family again, nor say it again.
	for _, addr := range []string{"fd00:1::2", "fd00:1::3"} {
		e.publish(exports, endpoints("east", group(discoveryv1.AddressTypeIPv6, []registry.EndpointPort{epPort("http", 8080)}, ready(addr))))
		e.reconcile("web")
	}
	if n := creates.Load(); n != 1 {
		t.Errorf("%d creates of the derived Service, want 1 (refused)", n)
	}
	refusals := 0
	for _, ev := range e.events() {
		if strings.Contains(ev, "IPFamilyNotSupported") {
			refusals++
		}
	}
	if refusals != 1 {
		t.Errorf("%d IPFamilyNotSupported events, want 1", refusals)
	}
	if e.service(DerivedServiceName("web")) != nil {
		t.Error("derived Service created")
	}
	si := e.serviceImport("web")
	c := wantCondition(t, si, "Ready", metav1.ConditionFalse, "IPFamilyNotSupported")
	if !strings.Contains(c.Message, "IPv6") {
		t.Errorf("message %q does not name the family", c.Message)
	}
	if len(si.Spec.IPs) != 0 {
		t.Errorf("ips = %v", si.Spec.IPs)
	}
}

func TestFamilyChangeRecreatesService(t *testing.T) {
	e := built(t)
	old := e.service(DerivedServiceName("web"))
	e.events()

	east := export("east", registry.ClusterSetIP, v6, port("http", corev1.ProtocolTCP, 80), port("metrics", corev1.ProtocolTCP, 9090))
	east.Spec.ExportedLabels = map[string]string{"app": "web"}
	east.Spec.ExportedAnnotations = map[string]string{"team": "shop"}
	e.publish([]registry.Export{east, export("west", registry.ClusterSetIP, v4, port("http", corev1.ProtocolTCP, 80))})
	writes := e.reconcile("web")

	svc := e.service(DerivedServiceName("web"))
	if svc == nil || svc.UID == old.UID {
		t.Fatalf("derived Service not recreated: %+v", svc)
	}
	// The old Service's slices became the ServiceImport's before it went.
	deleted := slices.Index(writes, "delete *v1.Service "+old.Name)
	si := e.serviceImport("web")
	for _, ss := range e.slices("web") {
		for _, sl := range ss {
			if metav1.IsControlledBy(&sl, old) {
				t.Errorf("slice %s still owned by the deleted Service", sl.Name)
			}
			i := slices.Index(writes, "update *v1.EndpointSlice "+sl.Name)
			if i < 0 {
				i = slices.Index(writes, "create *v1.EndpointSlice "+sl.Name)
			}
			if metav1.IsControlledBy(&sl, si) && (i < 0 || i > deleted) {
				t.Errorf("slice %s handed to the ServiceImport after its Service was deleted: %v", sl.Name, writes)
			}
		}
	}
	if d := cmp.Diff(v6, svc.Spec.IPFamilies); d != "" {
		t.Errorf("families (-want +got):\n%s", d)
	}
	if ev := e.events(); !slices.ContainsFunc(ev, func(s string) bool { return strings.Contains(s, eventServiceRecreated) }) {
		t.Errorf("events = %v, want %s", ev, eventServiceRecreated)
	}
	e.allocate("web", "fd00::10")
	e.reconcile("web")
	if d := cmp.Diff([]string{"fd00::10"}, e.serviceImport("web").Spec.IPs); d != "" {
		t.Errorf("ips (-want +got):\n%s", d)
	}
	e.steady("web")
}

// TestStaleCacheDeletesNoNewService: a reconcile that still reads the
// derived Service replaced for another family (its cache has not caught
// up) must not delete the new one, of the same name: the delete is of the
// Service as read (its UID), and refused; the import is looked at again
// soon, without an error or an event saying it was recreated.
func TestStaleCacheDeletesNoNewService(t *testing.T) {
	e := built(t)
	old := e.service(DerivedServiceName("web"))
	e.publish([]registry.Export{export("east", registry.ClusterSetIP, v6, port("http", corev1.ProtocolTCP, 80)),
		export("west", registry.ClusterSetIP, v6, port("http", corev1.ProtocolTCP, 80))})
	e.reconcile("web")
	replaced := e.service(DerivedServiceName("web"))
	if replaced == nil || replaced.UID == old.UID {
		t.Fatalf("derived Service not replaced: %+v", replaced)
	}
	e.events()
	e.stale = old
	res, err := e.r.Reconcile(e.ctx, request(testNS, "web"))
	e.stale = nil
	if err != nil || res.RequeueAfter == 0 {
		t.Errorf("reconcile with the replaced Service in the cache: %v, %+v; want no error, a look again soon", err, res)
	}
	if ev := e.events(); slices.ContainsFunc(ev, func(s string) bool { return strings.Contains(s, eventServiceRecreated) }) {
		t.Errorf("events %v: a recreation told that did not happen", ev)
	}
	if now := e.service(DerivedServiceName("web")); now == nil || now.UID != replaced.UID {
		t.Fatalf("the new derived Service was deleted by a reconcile that read the old one: now %+v", now)
	}
}

// TestSliceRemovedOnlyOnceItsSuccessorIsWritten: when an endpoint moves to
// another slice (its cluster's ports changed, so its slice's name did), the
// old slice goes only once the new one is written: an endpoint in no slice
// would be gone for kube-proxy. A create that fails leaves the old slice,
// unless it was refused for want of room (a quota), which the delete makes.
func TestSliceRemovedOnlyOnceItsSuccessorIsWritten(t *testing.T) {
	for _, tc := range []struct {
		name    string
		refusal error
		kept    bool
	}{
		{"the API server busy", apierrors.NewServiceUnavailable("the API server is busy"), true},
		{"a quota reached", apierrors.NewForbidden(discoveryv1.Resource("endpointslices"), "x", errors.New("exceeded quota: slices")), false},
		{"the new slice there, not yet cached", apierrors.NewAlreadyExists(discoveryv1.Resource("endpointslices"), "x"), true},
		{"an admission webhook's refusal", apierrors.NewForbidden(discoveryv1.Resource("endpointslices"), "x", errors.New("admission webhook denied the request")), true},
	} {
		t.Run(tc.name, func(t *testing.T) { testSliceMove(t, tc.refusal, tc.kept) })
	}
}

// TestSliceUpdatedOnlyOnceItsSuccessorIsWritten: a set grown past one
// slice moves its last endpoint to a new slice; the full slice is updated
// only once the new one is written, so that the endpoint is never in none.
func TestSliceUpdatedOnlyOnceItsSuccessorIsWritten(t *testing.T) {
	e := built(t)
	var eps []registry.Endpoint
	for i := range maxEndpointsPerSlice {
		eps = append(eps, ready(fmt.Sprintf("10.2.1.%d", i+1)))
	}
	publishWest := func(eps []registry.Endpoint) {
		e.publish([]registry.Export{export("east", registry.ClusterSetIP, v4, port("http", corev1.ProtocolTCP, 80)),
			export("west", registry.ClusterSetIP, v4, port("http", corev1.ProtocolTCP, 80))},
			endpoints("east", group(discoveryv1.AddressTypeIPv4, []registry.EndpointPort{epPort("http", 8080)}, ready("10.1.0.1"))),
			endpoints("west", group(discoveryv1.AddressTypeIPv4, []registry.EndpointPort{epPort("http", 8081)}, eps...)))
	}
	publishWest(eps)
	e.reconcile("web")
	want := map[string]bool{}
	for _, ep := range eps {
		want[ep.Addresses[0]] = true
	}
	// One endpoint more, first in order: the full slice's last one moves.
	publishWest(append([]registry.Endpoint{ready("10.2.0.1")}, eps...))
	e.createHook = func(o client.Object) error {
		if _, ok := o.(*discoveryv1.EndpointSlice); ok {
			return apierrors.NewServiceUnavailable("the API server is busy")
		}
		return nil
	}
	_, _ = e.r.Reconcile(e.ctx, request(testNS, "web"))
	for _, sl := range e.slices("web")["west"] {
		for _, ep := range sl.Endpoints {
			delete(want, ep.Addresses[0])
		}
	}
	if len(want) > 0 {
		t.Errorf("west's endpoints %v in no slice while the new slice could not be created", slices.Collect(maps.Keys(want)))
	}
	e.createHook = nil
	e.reconcile("web")
	e.steady("web")
}

func testSliceMove(t *testing.T, refusal error, kept bool) {
	e := built(t)
	east := export("east", registry.ClusterSetIP, v4, port("http", corev1.ProtocolTCP, 80), port("metrics", corev1.ProtocolTCP, 9090))
	west := export("west", registry.ClusterSetIP, v4, port("http", corev1.ProtocolTCP, 80), port("metrics", corev1.ProtocolTCP, 9090))
	e.publish([]registry.Export{east, west},
		endpoints("east", group(discoveryv1.AddressTypeIPv4, []registry.EndpointPort{epPort("http", 8080), epPort("metrics", 9091)}, ready("10.1.0.1"))),
		endpoints("west", group(discoveryv1.AddressTypeIPv4, []registry.EndpointPort{epPort("http", 8081), epPort("metrics", 9091)}, ready("10.2.0.1"))))
	e.createHook = func(o client.Object) error {
		if _, ok := o.(*discoveryv1.EndpointSlice); ok {
			return refusal
		}
		return nil
	}
	_, _ = e.r.Reconcile(e.ctx, request(testNS, "web"))
	var addrs []string
	for _, sl := range e.slices("web")["west"] {
		for _, ep := range sl.Endpoints {
			addrs = append(addrs, ep.Addresses...)
		}
	}
	if got := slices.Contains(addrs, "10.2.0.1"); got != kept {
		t.Errorf("west's old slice kept: %v, want %v (slices %v)", got, kept, e.slices("web")["west"])
	}
	e.createHook = nil
	e.reconcile("web")
	e.steady("web")
}

func TestRepairsHandEdits(t *testing.T) {
	e := built(t)
	before := e.slices("web")

	// Someone edits the derived Service, empties a slice, deletes another,
	// and edits the ServiceImport.
	svc := e.service(DerivedServiceName("web"))
	uid := svc.UID
	svc.Spec.Selector = map[string]string{"app": "web"}
	svc.Spec.Ports = svc.Spec.Ports[:1]
	if err := e.api.Update(e.ctx, svc); err != nil {
		t.Fatal(err)
	}
	east := before["east"][0]
	east.Endpoints = nil
	if err := e.api.Update(e.ctx, &east); err != nil {
		t.Fatal(err)
	}
	west := before["west"][0]
	if err := e.api.Delete(e.ctx, &west); err != nil {
		t.Fatal(err)
	}
	si := e.serviceImport("web")
	si.Spec.Ports = nil
	si.Labels["extra"] = "x"
	if err := e.api.Update(e.ctx, si); err != nil {
		t.Fatal(err)
	}

	e.reconcile("web")
	svc = e.service(DerivedServiceName("web"))
	if svc.UID != uid || len(svc.Spec.Selector) != 0 || len(svc.Spec.Ports) != 2 {
		t.Errorf("derived Service not repaired in place: uid %s selector %v ports %v", svc.UID, svc.Spec.Selector, svc.Spec.Ports)
	}
	after := e.slices("web")
	for _, c := range []string{"east", "west"} {
		if d := cmp.Diff(before[c][0].Endpoints, after[c][0].Endpoints); d != "" {
			t.Errorf("%s endpoints not repaired (-want +got):\n%s", c, d)
		}
	}
	si = e.serviceImport("web")
	if len(si.Spec.Ports) != 2 || si.Labels["extra"] != "" || len(si.Spec.IPs) != 1 {
		t.Errorf("ServiceImport not repaired: %+v", si)
	}
	e.steady("web")
}

// TestSliceRelabelledByHandTakenBack: someone removes the label a slice is
// listed by: its name is still taken, so the create of its replacement is
// refused; the slice is taken back (labels and endpoints as wanted), and
// the cluster's slices follow its endpoints again.
func TestSliceRelabelledByHandTakenBack(t *testing.T) {
	e := built(t)
	east := e.slices("web")["east"][0]
	delete(east.Labels, discoveryv1.LabelManagedBy)
	if err := e.api.Update(e.ctx, &east); err != nil {
		t.Fatal(err)
	}
	e.publish([]registry.Export{
		export("east", registry.ClusterSetIP, v4, port("http", corev1.ProtocolTCP, 80), port("metrics", corev1.ProtocolTCP, 9090)),
		export("west", registry.ClusterSetIP, v4, port("http", corev1.ProtocolTCP, 80)),
	}, endpoints("east", group(discoveryv1.AddressTypeIPv4, []registry.EndpointPort{epPort("http", 8080), epPort("metrics", 9091)},
		ready("10.1.0.1"), ready("10.1.0.3"))))
	e.reconcile("web")
	got := &discoveryv1.EndpointSlice{}
	if err := e.api.Get(e.ctx, client.ObjectKeyFromObject(&east), got); err != nil {
		t.Fatal(err)
	}
	if got.Labels[discoveryv1.LabelManagedBy] != wellknown.ManagedBy {
		t.Errorf("labels %v, want %s's managed-by back", got.Labels, wellknown.ManagedBy)
	}
	if d := cmp.Diff([]string{"10.1.0.1", "10.1.0.3"}, addresses([]discoveryv1.EndpointSlice{*got})); d != "" {
		t.Errorf("east's endpoints (-want +got):\n%s", d)
	}
	e.steady("web")
}

// TestServiceOwnerRestoredByPatch: a derived Service without its owner (as
// a cache behind its adoption shows it, or after a hand edit) gets it back
// by a patch, never by an update, which a stale cache would make fail.
func TestServiceOwnerRestoredByPatch(t *testing.T) {
	e := built(t)
	derived := DerivedServiceName("web")
	svc := e.service(derived)
	svc.OwnerReferences = nil
	if err := e.api.Update(e.ctx, svc); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"patch *v1.Service " + derived}, e.reconcile("web")); d != "" {
		t.Errorf("writes (-want +got):\n%s", d)
	}
	if !metav1.IsControlledBy(e.service(derived), e.serviceImport("web")) {
		t.Errorf("derived Service owners %+v, want the ServiceImport", e.service(derived).OwnerReferences)
	}
	e.steady("web")
}

// TestImportUpdateWaitsForItsCache: when the cache shows the ServiceImport
// older than the controller's last write of it, its spec is not updated
// from that copy (the update would conflict) but looked at again as soon
// as the cache has caught up.
func TestImportUpdateWaitsForItsCache(t *testing.T) {
	e := built(t)
	cache := &staleImports{Client: e.r.Client}
	e.r.Client = e.r.echoes.Client(cache)
	east := func(ports ...registry.Port) registry.Export {
		return export("east", registry.ClusterSetIP, v4, ports...)
	}
	west := export("west", registry.ClusterSetIP, v4, port("http", corev1.ProtocolTCP, 80))
	before := e.serviceImport("web")
	// A write of the controller's own: east drops its metrics port.
	e.publish([]registry.Export{east(port("http", corev1.ProtocolTCP, 80)), west})
	if w := e.reconcile("web"); !slices.Contains(w, "update *v1beta1.ServiceImport web") {
		t.Fatalf("writes %v, want the ServiceImport's update", w)
	}

	// The cache still shows the ServiceImport before that write when east
	// adds a port.
	cache.set(before)
	e.publish([]registry.Export{east(port("http", corev1.ProtocolTCP, 80), port("admin", corev1.ProtocolTCP, 8443)), west})
	e.writes = nil
	res, err := e.r.Reconcile(e.ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: testNS, Name: "web"}})
	if err != nil {
		t.Fatalf("reconcile from a cache behind: %v", err)
	}
	if slices.Contains(e.writes, "update *v1beta1.ServiceImport web") {
		t.Errorf("writes %v: the ServiceImport was updated from a copy older than the last write", e.writes)
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > cacheLag {
		t.Errorf("result %+v, want a look again within %v", res, cacheLag)
	}

	cache.set(nil)
	if w := e.reconcile("web"); !slices.Contains(w, "update *v1beta1.ServiceImport web") {
		t.Fatalf("writes %v once the cache caught up, want the ServiceImport's update", w)
	}
	if got := e.serviceImport("web").Spec.Ports; len(got) != 2 {
		t.Errorf("ports %+v, want http and admin", got)
	}
}

// staleImports reads through Client, but for a ServiceImport it was set
// to, which it shows as it was.
type staleImports struct {
	client.Client
	mu sync.Mutex
	si *mcsv1beta1.ServiceImport
}

func (c *staleImports) set(si *mcsv1beta1.ServiceImport) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.si = si
}

func (c *staleImports) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.mu.Lock()
	si := c.si
	c.mu.Unlock()
	if out, ok := obj.(*mcsv1beta1.ServiceImport); ok && si != nil && client.ObjectKeyFromObject(si) == key {
		si.DeepCopyInto(out)
		return nil
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

// TestUpgradeRelabelsDerivedService: an import an older mcsd wrote names its
// derived Service in the legacy annotation only. The next reconcile replaces
// it with the standard one in place: the ServiceImport, the derived Service
// and the slices are kept.
func TestUpgradeRelabelsDerivedService(t *testing.T) {
	e := built(t)
	si := e.serviceImport("web")
	svc := e.service(DerivedServiceName("web"))
	delete(si.Annotations, wellknown.AnnotationDerivedService)
	si.Annotations[wellknown.AnnotationLegacyDerivedService] = svc.Name
	if err := e.api.Update(e.ctx, si); err != nil {
		t.Fatal(err)
	}
	if w := e.reconcile("web"); len(w) != 1 || !strings.Contains(w[0], "ServiceImport web") {
		t.Errorf("writes %v, want the ServiceImport's update only", w)
	}
	got := e.serviceImport("web")
	if got.UID != si.UID || e.service(svc.Name).UID != svc.UID {
		t.Error("the upgrade recreated the ServiceImport or its derived Service")
	}
	if got.Annotations[wellknown.AnnotationDerivedService] != svc.Name {
		t.Errorf("annotations %v, want %s=%s", got.Annotations, wellknown.AnnotationDerivedService, svc.Name)
	}
	if _, ok := got.Annotations[wellknown.AnnotationLegacyDerivedService]; ok {
		t.Errorf("legacy annotation kept: %v", got.Annotations)
	}
	e.steady("web")
}

func TestClustersChangedEvent(t *testing.T) {
	e := newEnv(t, namespace(testNS))
	e.publish([]registry.Export{export("east", registry.ClusterSetIP, v4, port("http", corev1.ProtocolTCP, 80))})
	e.reconcile("web")
	if ev := e.events(); len(ev) != 0 {
		t.Errorf("events for a new import = %v, want none", ev)
	}
	e.publish([]registry.Export{
		export("east", registry.ClusterSetIP, v4, port("http", corev1.ProtocolTCP, 80)),
		export("west", registry.ClusterSetIP, v4, port("http", corev1.ProtocolTCP, 80)),
	})
	e.reconcile("web")
	if ev := e.events(); len(ev) != 1 || !strings.Contains(ev[0], eventClustersChanged) || !strings.Contains(ev[0], "added west") {
		t.Errorf("events = %v", ev)
	}
	e.reconcile("web")
	if ev := e.events(); len(ev) != 0 {
		t.Errorf("events without a change: %v", ev)
	}
}

func TestDerivedServiceName(t *testing.T) {
	long := strings.Repeat("a", 63)
	for _, name := range []string{"web", long, long[:62] + "b", "a-b"} {
		got := DerivedServiceName(name)
		if errs := validation.IsDNS1035Label(got); len(errs) > 0 {
			t.Errorf("DerivedServiceName(%q) = %q: %v", name, got, errs)
		}
		if got != DerivedServiceName(name) {
			t.Errorf("DerivedServiceName(%q) is not deterministic", name)
		}
	}
	if DerivedServiceName(long) == DerivedServiceName(long[:62]+"b") {
		t.Error("names that share the kept prefix collide")
	}
	if got := DerivedServiceName("web"); !strings.HasPrefix(got, "mcsd-web-") {
		t.Errorf("DerivedServiceName(web) = %q", got)
	}
}

func TestMapFuncs(t *testing.T) {
	e := built(t)
	ctx := context.Background()
	want := []ctrl.Request{request(testNS, "web")}

	svc := e.service(DerivedServiceName("web"))
	if d := cmp.Diff(want, serviceToImport(ctx, svc)); d != "" {
		t.Errorf("serviceToImport (-want +got):\n%s", d)
	}
	if got := serviceToImport(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "web"}}); got != nil {
		t.Errorf("serviceToImport(plain Service) = %v", got)
	}
	s := e.slices("web")["east"][0]
	if d := cmp.Diff(want, sliceToImport(ctx, &s)); d != "" {
		t.Errorf("sliceToImport (-want +got):\n%s", d)
	}
	local := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Labels: map[string]string{discoveryv1.LabelServiceName: "web"}}}
	if got := sliceToImport(ctx, local); got != nil {
		t.Errorf("sliceToImport(local slice) = %v", got)
	}
	if d := cmp.Diff(want, e.r.namespaceToImports(ctx, namespace(testNS))); d != "" {
		t.Errorf("namespaceToImports (-want +got):\n%s", d)
	}
	if got := e.r.namespaceToImports(ctx, namespace("other")); got != nil {
		t.Errorf("namespaceToImports(other) = %v", got)
	}

	// Reachability: the View's keys and every import mcsd made, even one whose
	// Service is no longer exported.
	e.publish([]registry.Export{{Cluster: "east", Service: registry.ServiceKey{Namespace: testNS, Name: "api"}, Spec: registry.ServiceSpec{Type: registry.ClusterSetIP}}})
	e.unexport("east", "west")
	got := e.r.changeToImports(ctx, clusterset.Change{Reachability: true})
	if d := cmp.Diff([]ctrl.Request{request(testNS, "api"), request(testNS, "web")}, got); d != "" {
		t.Errorf("changeToImports(reachability) (-want +got):\n%s", d)
	}
	got = e.r.changeToImports(ctx, clusterset.Change{Service: registry.ServiceKey{Namespace: testNS, Name: "api"}})
	if d := cmp.Diff([]ctrl.Request{request(testNS, "api")}, got); d != "" {
		t.Errorf("changeToImports(service) (-want +got):\n%s", d)
	}
}

// A new ClusterSetIP import is written whole: the derived Service first
// (the API server gives it its cluster IP in the create response), then the
// ServiceImport, created with that IP, and the EndpointSlices, which the
// derived Service owns; then the Service gets the ServiceImport as its
// owner, and the status is written. Nothing is written twice.
func TestNewImportWrittenWhole(t *testing.T) {
	e := newEnv(t, namespace(testNS))
	var createdIPs []string
	e.createHook = func(obj client.Object) error {
		switch o := obj.(type) {
		case *corev1.Service: // as the API server allocates
			o.Spec.ClusterIP, o.Spec.ClusterIPs = "10.96.0.10", []string{"10.96.0.10"}
		case *mcsv1beta1.ServiceImport:
			createdIPs = slices.Clone(o.Spec.IPs)
		}
		return nil
	}
	twoClusters(e)
	writes := e.reconcile("web")

	derived := DerivedServiceName("web")
	if len(writes) == 0 || writes[0] != "create *v1.Service "+derived {
		t.Fatalf("first write %v, want the derived Service's creation", writes)
	}
	if d := cmp.Diff([]string{"10.96.0.10"}, createdIPs); d != "" {
		t.Errorf("ServiceImport created with IPs (-want +got):\n%s", d)
	}
	var sliceNames []string
	for _, ss := range e.slices("web") {
		for _, s := range ss {
			sliceNames = append(sliceNames, "create *v1.EndpointSlice "+s.Name)
		}
	}
	want := append([]string{
		"create *v1.Service " + derived,
		"create *v1beta1.ServiceImport web",
		"update *v1.Service " + derived, // at the version its creation returned
		"patch/status *v1beta1.ServiceImport web",
	}, sliceNames...)
	slices.Sort(want)
	got := slices.Sorted(slices.Values(writes))
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("writes (-want +got):\n%s", d)
	}
	si, svc := e.serviceImport("web"), e.service(derived)
	if !metav1.IsControlledBy(svc, si) {
		t.Errorf("derived Service owners %+v, want the ServiceImport", svc.OwnerReferences)
	}
	wantCondition(t, si, "Ready", metav1.ConditionTrue, "Ready")
	e.steady("web")
}

// TestNewServiceWrittenMeanwhileGetsItsOwnerByPatch: a derived Service
// that someone else writes between its creation and its adoption makes the
// update at the created version conflict; the owner is then patched, and
// the other writer's change is kept.
func TestNewServiceWrittenMeanwhileGetsItsOwnerByPatch(t *testing.T) {
	e := newEnv(t, namespace(testNS))
	derived := DerivedServiceName("web")
	e.updateHook = func(obj client.Object) error {
		if _, ok := obj.(*corev1.Service); !ok {
			return nil
		}
		// Runs in the reconcile's own goroutine: errors, not t.Fatal.
		other := &corev1.Service{}
		if err := e.api.Get(e.ctx, client.ObjectKeyFromObject(obj), other); err != nil {
			return err
		}
		other.Labels = map[string]string{"written-by": "someone-else"}
		return e.api.Update(e.ctx, other)
	}
	twoClusters(e)
	writes := e.reconcile("web")
	for _, w := range []string{"update *v1.Service " + derived, "patch *v1.Service " + derived} {
		if !slices.Contains(writes, w) {
			t.Errorf("writes %v, want %q", writes, w)
		}
	}
	e.updateHook = nil
	si, svc := e.serviceImport("web"), e.service(derived)
	if !metav1.IsControlledBy(svc, si) {
		t.Errorf("derived Service owners %+v, want the ServiceImport", svc.OwnerReferences)
	}
	if svc.Labels["written-by"] != "someone-else" {
		t.Errorf("derived Service labels %v: the other writer's label is lost", svc.Labels)
	}
	e.steady("web")
}

// EndpointSlices that an earlier mcsd made the ServiceImport's are kept as
// they are; when the import turns headless, its slices become the
// ServiceImport's before the derived Service (their owner) is deleted, so
// that the garbage collector does not take them with it.
func TestSliceOwners(t *testing.T) {
	legacy := newEnv(t, namespace(testNS))
	twoClusters(legacy)
	legacy.reconcile("web")
	si := legacy.serviceImport("web")
	for _, ss := range legacy.slices("web") {
		for i := range ss {
			s := &ss[i]
			s.OwnerReferences = []metav1.OwnerReference{ownerRef(si)}
			if err := legacy.api.Update(legacy.ctx, s); err != nil {
				t.Fatal(err)
			}
		}
	}
	legacy.steady("web")

	e := newEnv(t, namespace(testNS))
	twoClusters(e)
	e.reconcile("web")
	svc := e.service(DerivedServiceName("web"))
	for _, ss := range e.slices("web") {
		for _, s := range ss {
			if !metav1.IsControlledBy(&s, svc) {
				t.Fatalf("slice %s owners %+v, want the derived Service", s.Name, s.OwnerReferences)
			}
		}
	}
	e.publish([]registry.Export{
		export("east", registry.Headless, v4, port("http", corev1.ProtocolTCP, 80), port("metrics", corev1.ProtocolTCP, 9090)),
		export("west", registry.Headless, v4, port("http", corev1.ProtocolTCP, 80)),
	})
	writes := e.reconcile("web")
	if e.service(DerivedServiceName("web")) != nil {
		t.Error("headless import kept its derived Service")
	}
	deleteAt := slices.Index(writes, "delete *v1.Service "+svc.Name)
	if deleteAt < 0 {
		t.Fatalf("writes %v: the derived Service was not deleted", writes)
	}
	si = e.serviceImport("web")
	for cluster, ss := range e.slices("web") {
		for _, s := range ss {
			if !metav1.IsControlledBy(&s, si) {
				t.Errorf("%s slice %s owners %+v, want the ServiceImport", cluster, s.Name, s.OwnerReferences)
			}
			if i := slices.Index(writes, "update *v1.EndpointSlice "+s.Name); i < 0 || i > deleteAt {
				t.Errorf("slice %s not moved to the ServiceImport before its owner was deleted: %v", s.Name, writes)
			}
		}
	}
	e.steady("web")
}

// A cluster that leaves changes every import it exported to at once: the
// ClustersChanged events are rate-limited, the statuses are not.
func TestClustersChangedEventsRateLimited(t *testing.T) {
	e := newEnv(t, namespace(testNS))
	// Two at once, then none while the clock stands still.
	e.r.clusterEvents = flowcontrol.NewTokenBucketRateLimiterWithClock(1, 2, clocktesting.NewFakeClock(time.Now()))
	var keys []registry.ServiceKey
	var exports []registry.Export
	for i := range 5 {
		key := registry.ServiceKey{Namespace: testNS, Name: fmt.Sprintf("web%d", i)}
		keys = append(keys, key)
		for _, c := range []string{"east", "west"} {
			x := export(c, registry.ClusterSetIP, v4, port("http", corev1.ProtocolTCP, 80))
			x.Service = key
			exports = append(exports, x)
		}
	}
	e.publish(exports)
	for _, key := range keys {
		e.reconcile(key.Name)
	}
	for _, key := range keys {
		if err := e.publisher("west").DeleteExport(e.ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	e.settle()
	for _, key := range keys {
		e.reconcile(key.Name)
		si := &mcsv1beta1.ServiceImport{}
		if err := e.api.Get(e.ctx, client.ObjectKey{Namespace: testNS, Name: key.Name}, si); err != nil {
			t.Fatal(err)
		}
		if len(si.Status.Clusters) != 1 || si.Status.Clusters[0].Cluster != "east" {
			t.Errorf("%s: status clusters %v, want east alone", key.Name, si.Status.Clusters)
		}
	}
	if ev := e.events(); len(ev) != 2 {
		t.Errorf("%d events for 5 imports that lost a cluster, want the limit's 2: %v", len(ev), ev)
	}
}

// The View's changes queue only the Services of namespaces this cluster
// has: a reconnection does not queue the whole clusterset. A namespace
// created later brings its imports (namespaceToImports).
func TestChangesQueueOnlyLocalNamespaces(t *testing.T) {
	e := newEnv(t, namespace(testNS))
	local := registry.ServiceKey{Namespace: testNS, Name: "web"}
	elsewhere := registry.ServiceKey{Namespace: "elsewhere", Name: "web"}
	var exports []registry.Export
	for _, key := range []registry.ServiceKey{local, elsewhere} {
		x := export("east", registry.ClusterSetIP, v4, port("http", corev1.ProtocolTCP, 80))
		x.Service = key
		exports = append(exports, x)
	}
	e.publish(exports)
	names := func(reqs []reconcile.Request) []string {
		var out []string
		for _, r := range reqs {
			out = append(out, r.String())
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	if got := names(e.r.changeToImports(e.ctx, clusterset.Change{Reachability: true})); !slices.Equal(got, []string{testNS + "/web"}) {
		t.Errorf("a reachability change queues %v, want %s/web alone", got, testNS)
	}
	if got := e.r.changeToImports(e.ctx, clusterset.Change{Service: elsewhere}); len(got) != 0 {
		t.Errorf("a change in a namespace this cluster lacks queues %v, want nothing", got)
	}
	if err := e.api.Create(e.ctx, namespace("elsewhere")); err != nil {
		t.Fatal(err)
	}
	if got := names(e.r.namespaceToImports(e.ctx, namespace("elsewhere"))); !slices.Equal(got, []string{"elsewhere/web"}) {
		t.Errorf("the namespace's creation queues %v, want elsewhere/web", got)
	}
	if got := names(e.r.changeToImports(e.ctx, clusterset.Change{Service: elsewhere})); !slices.Equal(got, []string{"elsewhere/web"}) {
		t.Errorf("a change once the namespace exists queues %v, want elsewhere/web", got)
	}
}

// A reconcile that fails before it could read the derived Service leaves
// the status as it was: a Ready import stays Ready through a failed read.
func TestFailedReadWritesNoStatus(t *testing.T) {
	e := newEnv(t, namespace(testNS))
	twoClusters(e)
	e.reconcile("web")
	e.allocate("web", "10.96.0.10")
	e.reconcile("web")
	wantCondition(t, e.serviceImport("web"), "Ready", metav1.ConditionTrue, "Ready")

	errRead := errors.New("read failed")
	e.getHook = func(obj client.Object) error {
		if _, ok := obj.(*corev1.Service); ok {
			return errRead
		}
		return nil
	}
	e.writes = nil
	if _, err := e.r.Reconcile(e.ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: testNS, Name: "web"}}); !errors.Is(err, errRead) {
		t.Fatalf("reconcile: %v, want the read's error", err)
	}
	if len(e.writes) > 0 {
		t.Errorf("a reconcile that could not read the derived Service wrote %v", e.writes)
	}
	e.getHook = nil
	wantCondition(t, e.serviceImport("web"), "Ready", metav1.ConditionTrue, "Ready")
	e.steady("web")
}

// TestCreateRefusedInATerminatingNamespace: creates that the API server
// refuses because the import's namespace is being deleted (before the cache
// shows it) end the reconcile without an error; any other refusal is one.
func TestCreateRefusedInATerminatingNamespace(t *testing.T) {
	e := newEnv(t, namespace(testNS))
	twoClusters(e)
	refuse := func(cause metav1.CauseType) func(client.Object) error {
		return func(o client.Object) error {
			err := apierrors.NewForbidden(schema.GroupResource{Resource: "services"}, o.GetName(), errors.New("refused"))
			err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{Type: cause})
			return err
		}
	}
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: testNS, Name: "web"}}
	e.createHook = refuse(corev1.NamespaceTerminatingCause)
	if _, err := e.r.Reconcile(e.ctx, req); err != nil {
		t.Errorf("reconcile in a terminating namespace: %v, want no error", err)
	}
	e.createHook = refuse("SomethingElse")
	if _, err := e.r.Reconcile(e.ctx, req); err == nil {
		t.Error("reconcile with creates refused otherwise: no error, want one")
	}
}

// TestCreateOfWhatTheCacheHasNotSeen: after an API server restarted under
// the controller, its cache may miss a ServiceImport or a derived Service
// that exists. The create that follows is refused (AlreadyExists): the
// import is looked at again within cacheLag, with no error (whose backoff
// grows to minutes) and without writing a status from what it cannot see.
// While the cache stays behind, each look waits twice as long as the one
// before, up to skeleton.BehindMax (each costs a refused create); once a reconcile
// finds the cache caught up, the next wait is cacheLag again.
func TestCreateOfWhatTheCacheHasNotSeen(t *testing.T) {
	for _, hide := range []string{"ServiceImport", "derived Service"} {
		t.Run(hide, func(t *testing.T) {
			e := built(t)
			cache := &unseen{Client: e.r.Client}
			e.r.Client = e.r.echoes.Client(cache)
			hideIt := func() {
				if hide == "ServiceImport" {
					cache.hide(&mcsv1beta1.ServiceImport{}, "web")
				} else {
					cache.hide(&corev1.Service{}, DerivedServiceName("web"))
				}
			}
			// looks reconciles with the object hidden, and checks each
			// wait and write.
			looks := func(want ...time.Duration) {
				t.Helper()
				for i, wait := range want {
					e.writes = nil
					res, err := e.r.Reconcile(e.ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: testNS, Name: "web"}})
					if err != nil {
						t.Fatalf("reconcile %d with the %s missing from the cache: %v", i+1, hide, err)
					}
					if res.RequeueAfter != wait {
						t.Errorf("reconcile %d: result %+v, want a look again after %v", i+1, res, wait)
					}
					// The recorder sees the create before the API server
					// refuses it.
					if len(e.writes) != 1 || !strings.HasPrefix(e.writes[0], "create ") {
						t.Errorf("reconcile %d: writes %v, want the refused create only", i+1, e.writes)
					}
				}
			}
			hideIt()
			looks(cacheLag, 2*cacheLag, 4*cacheLag, 8*cacheLag, 16*cacheLag, 32*cacheLag, skeleton.BehindMax, skeleton.BehindMax)
			cache.hide(nil, "")
			e.steady("web")
			hideIt()
			looks(cacheLag, 2*cacheLag)
			cache.hide(nil, "")
			e.steady("web")
		})
	}
}

// unseen reads through Client, but has not seen the one object it hides.
type unseen struct {
	client.Client
	mu   sync.Mutex
	kind client.Object
	name string
}

func (c *unseen) hide(kind client.Object, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.kind, c.name = kind, name
}

func (c *unseen) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.mu.Lock()
	kind, name := c.kind, c.name
	c.mu.Unlock()
	if kind != nil && fmt.Sprintf("%T", kind) == fmt.Sprintf("%T", obj) && key.Name == name {
		return apierrors.NewNotFound(schema.GroupResource{}, name)
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

// TestWithdrawnWhileTheCacheMissesTheImport: the last export goes while the
// cache has not shown the ServiceImport this controller created (its watch
// behind, as after an API server's restart). The ServiceImport is read past
// the cache and deleted with the rest: once the cache caught up, the event
// of its creation would be dropped as this controller's own, and nothing
// would delete it (its IPs those of the deleted derived Service).
func TestWithdrawnWhileTheCacheMissesTheImport(t *testing.T) {
	e := newEnv(t, namespace(testNS))
	cache := &unseen{Client: e.r.Client}
	e.r.Client = e.r.echoes.Client(cache)
	cache.hide(&mcsv1beta1.ServiceImport{}, "web")
	twoClusters(e)
	e.reconcile("web")
	if err := e.api.Get(e.ctx, client.ObjectKey{Namespace: testNS, Name: "web"}, &mcsv1beta1.ServiceImport{}); err != nil {
		t.Fatalf("no ServiceImport created: %v", err)
	}

	e.unexport("east", "west")
	e.writes = nil
	if _, err := e.r.Reconcile(e.ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: testNS, Name: "web"}}); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(e.writes, "delete *v1beta1.ServiceImport web") {
		t.Errorf("writes %v, want the ServiceImport deleted", e.writes)
	}
	err := e.api.Get(e.ctx, client.ObjectKey{Namespace: testNS, Name: "web"}, &mcsv1beta1.ServiceImport{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("ServiceImport of an unexported Service left: %v", err)
	}
	if e.service(DerivedServiceName("web")) != nil {
		t.Error("derived Service left")
	}
}

// listCounter counts the lists read through it.
type listCounter struct {
	client.Reader
	lists atomic.Int32
}

func (l *listCounter) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	l.lists.Add(1)
	return l.Reader.List(ctx, list, opts...)
}

// TestNoReadPastTheCacheWithoutAnImport: a Service whose one export is
// refused has no import; each change of its records brings a reconcile,
// which reads nothing past the cache: no ServiceImport of this controller
// awaits it there.
func TestNoReadPastTheCacheWithoutAnImport(t *testing.T) {
	e := newEnv(t, namespace(testNS))
	api := &listCounter{Reader: e.api}
	e.r.APIReader = api
	x := export("west", registry.ClusterSetIP, v4, port("http", corev1.ProtocolTCP, 80))
	x.Spec.ExportedAnnotations = map[string]string{wellknown.AnnotationRetiring: "payments"}
	if err := e.publisher("west").PutExport(e.ctx, webKey, x.Spec); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, settleTimeout, "the View to refuse west's export", func() (bool, string) {
		return len(e.view.Rejected(webKey)) > 0, fmt.Sprint(e.view.Exports(webKey))
	})
	for range 3 {
		e.reconcile("web")
	}
	if n := api.lists.Load(); n != 0 {
		t.Errorf("%d reads past the cache for a Service that has no import", n)
	}
}

// TestOrphanDerivedServiceComesBack: the derived Service was created, its
// ServiceImport's create failed (or the process stopped between the two),
// and the export went while mcsd was down. The registry's first read (and
// a namespace's) brings back the import of every derived Service mcsd
// made, whose reconcile deletes it and its slices.
func TestOrphanDerivedServiceComesBack(t *testing.T) {
	e := newEnv(t, namespace(testNS))
	e.createHook = func(o client.Object) error {
		if _, ok := o.(*mcsv1beta1.ServiceImport); ok {
			return errors.New("the process stopped")
		}
		return nil
	}
	twoClusters(e)
	if _, err := e.r.Reconcile(e.ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: testNS, Name: "web"}}); err == nil {
		t.Fatal("the ServiceImport's create did not fail")
	}
	e.createHook = nil
	if e.service(DerivedServiceName("web")) == nil {
		t.Fatal("no derived Service to begin with")
	}
	e.unexport("east", "west")
	for _, c := range []clusterset.Change{{Reachability: true}, {Namespace: testNS}} {
		reqs := e.r.changeToImports(e.ctx, c)
		if !slices.Contains(reqs, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: testNS, Name: "web"}}) {
			t.Errorf("change %+v brings %v, not the import of the derived Service", c, reqs)
		}
	}
	e.reconcile("web")
	if e.service(DerivedServiceName("web")) != nil {
		t.Error("the derived Service of an unexported Service is left")
	}
	if n := len(e.slices("web")); n != 0 {
		t.Errorf("EndpointSlices of %d clusters left", n)
	}
}

// TestSecondaryFamilyChangedInPlace: the oldest export turns dual-stack,
// then single-stack again. The derived Service gets its secondary family,
// and loses it, in place: its primary cluster IP, and the import's, stay.
func TestSecondaryFamilyChangedInPlace(t *testing.T) {
	e := newEnv(t, namespace(testNS))
	e.publish([]registry.Export{export("east", registry.ClusterSetIP, v4, port("http", corev1.ProtocolTCP, 80))})
	e.reconcile("web")
	e.allocate("web", "10.96.0.10")
	e.reconcile("web")
	old := e.service(DerivedServiceName("web"))

	e.publish([]registry.Export{export("east", registry.ClusterSetIP, dual, port("http", corev1.ProtocolTCP, 80))})
	writes := e.reconcile("web")
	svc := e.service(DerivedServiceName("web"))
	if svc == nil || svc.UID != old.UID {
		t.Fatalf("derived Service recreated for a secondary family: writes %v", writes)
	}
	if d := cmp.Diff(dual, svc.Spec.IPFamilies); d != "" || ptr.Deref(svc.Spec.IPFamilyPolicy, "") != corev1.IPFamilyPolicyRequireDualStack {
		t.Errorf("families %v policy %v, want IPv4,IPv6 RequireDualStack", svc.Spec.IPFamilies, svc.Spec.IPFamilyPolicy)
	}
	if d := cmp.Diff([]string{"10.96.0.10"}, svc.Spec.ClusterIPs); d != "" {
		t.Errorf("cluster IPs as asked for (-want +got):\n%s", d)
	}
	e.allocate("web", "10.96.0.10", "fd00::10") // the API server's, for the secondary family
	e.reconcile("web")
	si := e.serviceImport("web")
	if d := cmp.Diff([]string{"10.96.0.10", "fd00::10"}, si.Spec.IPs); d != "" {
		t.Errorf("ips (-want +got):\n%s", d)
	}
	e.steady("web")

	e.publish([]registry.Export{export("east", registry.ClusterSetIP, v4, port("http", corev1.ProtocolTCP, 80))})
	e.reconcile("web")
	svc = e.service(DerivedServiceName("web"))
	if svc == nil || svc.UID != old.UID {
		t.Fatal("derived Service recreated when its secondary family went")
	}
	if d := cmp.Diff([]string{"10.96.0.10"}, svc.Spec.ClusterIPs); d != "" || ptr.Deref(svc.Spec.IPFamilyPolicy, "") != corev1.IPFamilyPolicySingleStack {
		t.Errorf("cluster IPs %v policy %v, want 10.96.0.10 SingleStack", svc.Spec.ClusterIPs, svc.Spec.IPFamilyPolicy)
	}
	if d := cmp.Diff([]string{"10.96.0.10"}, e.serviceImport("web").Spec.IPs); d != "" {
		t.Errorf("ips (-want +got):\n%s", d)
	}
	e.steady("web")
}

// TestFamilyOrderKeepsService: the import's families follow its oldest
// export, but a change of their order alone (the oldest export of one order
// withdrawn, the next listing them the other way), or a new family listed
// first, keeps the derived Service and the import's IPs: Kubernetes cannot
// change a Service's primary family, and the IPs must stay stable while
// every family is still served.
func TestFamilyOrderKeepsService(t *testing.T) {
	e := newEnv(t, namespace(testNS))
	v6v4 := []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}
	e.publish([]registry.Export{
		export("east", registry.ClusterSetIP, dual, port("http", corev1.ProtocolTCP, 80)),
		export("west", registry.ClusterSetIP, v6v4, port("http", corev1.ProtocolTCP, 80)),
	})
	e.reconcile("web")
	e.allocate("web", "10.96.0.10", "fd00::10")
	e.reconcile("web")
	old := e.service(DerivedServiceName("web"))
	ips := []string{"10.96.0.10", "fd00::10"}
	if d := cmp.Diff(ips, e.serviceImport("web").Spec.IPs); d != "" {
		t.Fatalf("ips (-want +got):\n%s", d)
	}
	e.steady("web")
	e.events()

	// east withdrawn: west, now the oldest, lists IPv6 first.
	e.unexport("east")
	e.reconcile("web")
	if svc := e.service(DerivedServiceName("web")); svc == nil || svc.UID != old.UID {
		t.Fatalf("derived Service recreated for a change of family order: %+v", svc)
	}
	si := e.serviceImport("web")
	if d := cmp.Diff(ips, si.Spec.IPs); d != "" {
		t.Errorf("ips (-want +got):\n%s", d)
	}
	if d := cmp.Diff(dual, si.Spec.IPFamilies); d != "" {
		t.Errorf("families (-want +got):\n%s", d)
	}
	if ev := e.events(); slices.ContainsFunc(ev, func(s string) bool { return strings.Contains(s, eventServiceRecreated) }) {
		t.Errorf("events %v", ev)
	}
	e.steady("web")

	// West single-stack IPv4, then dual-stack again with IPv6 first: the
	// secondary family goes and comes back in place.
	e.publish([]registry.Export{export("west", registry.ClusterSetIP, v4, port("http", corev1.ProtocolTCP, 80))})
	e.reconcile("web")
	e.allocate("web", "10.96.0.10")
	e.reconcile("web")
	e.publish([]registry.Export{export("west", registry.ClusterSetIP, v6v4, port("http", corev1.ProtocolTCP, 80))})
	e.reconcile("web")
	svc := e.service(DerivedServiceName("web"))
	if svc == nil || svc.UID != old.UID {
		t.Fatalf("derived Service recreated for a family added before its own: %+v", svc)
	}
	if d := cmp.Diff(dual, svc.Spec.IPFamilies); d != "" {
		t.Errorf("derived Service's families (-want +got):\n%s", d)
	}
	e.allocate("web", "10.96.0.10", "fd00::11")
	e.reconcile("web")
	if d := cmp.Diff([]string{"10.96.0.10", "fd00::11"}, e.serviceImport("web").Spec.IPs); d != "" {
		t.Errorf("ips (-want +got):\n%s", d)
	}
	e.steady("web")
}

// TestSecondaryFamilyRefusedInPlace: on a single-stack cluster, the oldest
// export turns dual-stack. The API server refuses the secondary family; the
// derived Service keeps its family and its IP (recreating it would give it
// the same family and another IP), Ready says which family this cluster
// does not support, and it is not asked for again.
func TestSecondaryFamilyRefusedInPlace(t *testing.T) {
	e := newEnv(t, namespace(testNS))
	e.createHook, e.updateHook = refuseIPv6, refuseIPv6
	e.publish([]registry.Export{export("east", registry.ClusterSetIP, v4, port("http", corev1.ProtocolTCP, 80))})
	e.reconcile("web")
	e.allocate("web", "10.96.0.10")
	e.reconcile("web")
	old := e.service(DerivedServiceName("web"))
	e.events()

	e.publish([]registry.Export{export("east", registry.ClusterSetIP, dual, port("http", corev1.ProtocolTCP, 80))})
	e.reconcile("web")
	svc := e.service(DerivedServiceName("web"))
	if svc == nil || svc.UID != old.UID {
		t.Fatal("derived Service recreated")
	}
	if d := cmp.Diff(v4, svc.Spec.IPFamilies); d != "" {
		t.Errorf("families (-want +got):\n%s", d)
	}
	si := e.serviceImport("web")
	if d := cmp.Diff([]string{"10.96.0.10"}, si.Spec.IPs); d != "" {
		t.Errorf("ips (-want +got):\n%s", d)
	}
	c := wantCondition(t, si, "Ready", metav1.ConditionFalse, "IPFamilyNotSupported")
	if !strings.Contains(c.Message, "IPv6") {
		t.Errorf("message %q does not name the refused family", c.Message)
	}
	if ev := e.events(); !slices.ContainsFunc(ev, func(s string) bool { return strings.Contains(s, eventFamilyRefused) }) {
		t.Errorf("events = %v, want %s", ev, eventFamilyRefused)
	}
	e.steady("web")
}
