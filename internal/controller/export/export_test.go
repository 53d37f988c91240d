package export

import (
	"context"
	"errors"
	"fmt"
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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/clusterset"
	"github.com/mcsd-io/mcsd/internal/conditions"
	"github.com/mcsd-io/mcsd/internal/controller/skeleton"
	"github.com/mcsd-io/mcsd/internal/testutil/ctrltest"
	"github.com/mcsd-io/mcsd/internal/wellknown"
	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/memory"
)

const (
	ns         = "default"
	clusterSet = "set"
	thisID     = "c-local"
	otherID    = "c-other"
	ownOrder   = 100 // this cluster's exports are younger than the others' in these tests
	otherOrd   = 1
	svcName    = "web"
	validType  = string(mcsv1beta1.ServiceExportConditionValid)
	readyType  = string(mcsv1beta1.ServiceExportConditionReady)
	confType   = string(mcsv1beta1.ServiceExportConditionConflict)
)

var webKey = registry.ServiceKey{Namespace: ns, Name: svcName}

// testRegistry is the memory backend opened for this cluster, with a
// failure the test can switch on for every call.
type testRegistry struct {
	registry.Registry
	store *memory.Store

	mu  sync.Mutex
	err error
	// largest: the most endpoints a record may hold, as a backend's size
	// limit would; 0 for no limit.
	largest int
}

var _ registry.Publisher = (*testRegistry)(nil)

// setLargest sets the most endpoints a record may hold (0: no limit).
func (f *testRegistry) setLargest(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.largest = n
}

// tooLarge refuses groups as a backend refuses a record too large for it.
func (f *testRegistry) tooLarge(groups []registry.EndpointGroup) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, g := range groups {
		n += len(g.Endpoints)
	}
	if f.largest > 0 && n > f.largest {
		return &registry.RejectedError{Reason: registry.RejectTooLarge, Err: fmt.Errorf("an endpoints record of %d endpoints is larger than this backend takes", n)}
	}
	return nil
}

func newTestRegistry(t *testing.T) *testRegistry {
	t.Helper()
	store := memory.NewStore()
	reg, err := store.Open(memory.Options{Identity: registry.Identity{ClusterSet: clusterSet, Cluster: thisID}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	return &testRegistry{Registry: reg, store: store}
}

func (f *testRegistry) setErr(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

func (f *testRegistry) failure() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

func (f *testRegistry) PutExport(ctx context.Context, key registry.ServiceKey, spec registry.ServiceSpec) error {
	if err := f.failure(); err != nil {
		return err
	}
	return f.Registry.PutExport(ctx, key, spec)
}

func (f *testRegistry) PutEndpoints(ctx context.Context, key registry.ServiceKey, groups []registry.EndpointGroup) error {
	if err := errors.Join(f.failure(), f.tooLarge(groups)); err != nil {
		return err
	}
	return f.Registry.PutEndpoints(ctx, key, groups)
}

func (f *testRegistry) Publish(ctx context.Context, key registry.ServiceKey, spec registry.ServiceSpec, groups []registry.EndpointGroup) error {
	if err := errors.Join(f.failure(), f.tooLarge(groups)); err != nil {
		return err
	}
	return f.Registry.Publish(ctx, key, spec, groups)
}

func (f *testRegistry) DeleteExport(ctx context.Context, key registry.ServiceKey) error {
	if err := f.failure(); err != nil {
		return err
	}
	return f.Registry.DeleteExport(ctx, key)
}

func (f *testRegistry) Exported(ctx context.Context) ([]registry.ServiceKey, error) {
	if err := f.failure(); err != nil {
		return nil, err
	}
	return f.Registry.Exported(ctx)
}

// stored is the clusterset as the registry holds it: the first, full update
// of a read-only watch.
func (f *testRegistry) stored() registry.Update {
	h := &firstUpdate{}
	ctx, cancel := context.WithCancel(context.Background())
	h.stop = cancel
	_ = f.store.Watcher(clusterSet).Watch(ctx, h)
	return h.u
}

// export returns this cluster's export of key in the registry.
func (f *testRegistry) export(key registry.ServiceKey) (registry.ServiceSpec, bool) {
	for _, e := range f.stored().Exports {
		if e.Cluster == thisID && e.Service == key {
			return e.Spec, true
		}
	}
	return registry.ServiceSpec{}, false
}

// groups returns this cluster's endpoints of key in the registry, or nil.
func (f *testRegistry) groups(key registry.ServiceKey) []registry.EndpointGroup {
	for _, e := range f.stored().Endpoints {
		if e.Cluster == thisID && e.Service == key {
			return e.Groups
		}
	}
	return nil
}

// firstUpdate keeps the first update a watch delivers and ends the watch.
type firstUpdate struct {
	u    registry.Update
	got  bool
	stop context.CancelFunc
}

// OnUpdate keeps the first update alone: the watch may deliver others
// taken with it (changes queued behind the full one) before it sees the
// stop.
func (h *firstUpdate) OnUpdate(u registry.Update) {
	if h.got {
		return
	}
	h.u, h.got = u, true
	h.stop()
}

func (h *firstUpdate) OnConnection(bool, error) {}

// env is a reconciler over a fake client, a fake registry and a view.
type env struct {
	t      *testing.T
	c      client.Client
	reg    *testRegistry
	view   *clusterset.View
	rec    *record.FakeRecorder
	r      *Reconciler
	writes atomic.Int64 // API writes of any kind
	// beforePatch, when set, runs before every patch (not of a status);
	// an error it returns is the patch's.
	beforePatch func(client.Object) error
}

func newEnv(t *testing.T, objs ...client.Object) *env {
	t.Helper()
	scheme := ctrltest.Scheme(t)
	e := &env{t: t, reg: newTestRegistry(t), view: clusterset.NewView(), rec: record.NewFakeRecorder(100)}
	count := func() { e.writes.Add(1) }
	e.c = fake.NewClientBuilder().
		WithScheme(scheme).
		WithStatusSubresource(&mcsv1beta1.ServiceExport{}).
		WithObjects(objs...).
		WithInterceptorFuncs(interceptor.Funcs{
			Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
				count()
				return c.Create(ctx, obj, opts...)
			},
			Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
				count()
				return c.Update(ctx, obj, opts...)
			},
			Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
				count()
				if e.beforePatch != nil {
					if err := e.beforePatch(obj); err != nil {
						return err
					}
				}
				return c.Patch(ctx, obj, patch, opts...)
			},
			SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
				count()
				return c.SubResource(sub).Update(ctx, obj, opts...)
			},
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				count()
				return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
			},
		}).
		Build()
	e.r = e.newReconciler()
	return e
}

// newReconciler returns a reconciler over the env's state, as a restarted
// controller would have.
func (e *env) newReconciler() *Reconciler {
	return &Reconciler{Client: e.c, Registry: e.reg, View: e.view, ClusterID: thisID, Recorder: e.rec}
}

func (e *env) reconcile() error {
	e.t.Helper()
	_, err := e.reconcileResult()
	return err
}

func (e *env) reconcileResult() (ctrl.Result, error) {
	e.t.Helper()
	return e.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: svcName}})
}

func (e *env) mustReconcile() {
	e.t.Helper()
	if err := e.reconcile(); err != nil {
		e.t.Fatalf("Reconcile: %v", err)
	}
}

func (e *env) serviceExport() *mcsv1beta1.ServiceExport {
	e.t.Helper()
	se := &mcsv1beta1.ServiceExport{}
	if err := e.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: svcName}, se); err != nil {
		e.t.Fatalf("get ServiceExport: %v", err)
	}
	return se
}

// syncView feeds the view a full update: this cluster's records as the
// registry holds them, younger than the others (ownOrder), plus others.
func (e *env) syncView(others ...registry.Export) {
	stored := e.reg.stored()
	u := registry.Update{Full: true, Exports: others, Endpoints: stored.Endpoints, Clusters: []registry.Cluster{{ID: thisID}, {ID: otherID}}}
	for _, x := range stored.Exports {
		x.Order = ownOrder
		u.Exports = append(u.Exports, x)
	}
	e.view.OnUpdate(u)
}

// events drains the recorded events.
func (e *env) events() []string { return ctrltest.Events(e.rec) }

// assertCondition checks a condition's status and reason, and that it
// observed the ServiceExport's generation.
func assertCondition(t *testing.T, se *mcsv1beta1.ServiceExport, typ string, status metav1.ConditionStatus, reason string) *metav1.Condition {
	t.Helper()
	c := conditions.Get(se.Status.Conditions, typ)
	if c == nil {
		t.Fatalf("no %s condition in %+v", typ, se.Status.Conditions)
	}
	if c.Status != status || c.Reason != reason {
		t.Errorf("%s = %s/%s (%q), want %s/%s", typ, c.Status, c.Reason, c.Message, status, reason)
	}
	if c.ObservedGeneration != se.Generation {
		t.Errorf("%s observedGeneration = %d, want %d", typ, c.ObservedGeneration, se.Generation)
	}
	return c
}

// assertNotExportable checks the ServiceExport of a Service that can no
// longer be exported: Valid False for reason, Ready False Pending, and no
// export of it in the registry. It returns the ServiceExport.
func (e *env) assertNotExportable(reason mcsv1beta1.ServiceExportConditionReason) *mcsv1beta1.ServiceExport {
	e.t.Helper()
	se := e.serviceExport()
	assertCondition(e.t, se, validType, metav1.ConditionFalse, string(reason))
	assertCondition(e.t, se, readyType, metav1.ConditionFalse, string(mcsv1beta1.ServiceExportReasonPending))
	if _, ok := e.reg.export(webKey); ok {
		e.t.Errorf("export still in the registry with Valid %s", reason)
	}
	return se
}

func newServiceExport(mut ...func(*mcsv1beta1.ServiceExport)) *mcsv1beta1.ServiceExport {
	se := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: svcName, Generation: 3}}
	for _, m := range mut {
		m(se)
	}
	return se
}

func newService(mut ...func(*corev1.Service)) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: svcName},
		Spec: corev1.ServiceSpec{
			Type:            corev1.ServiceTypeClusterIP,
			ClusterIP:       "10.0.0.10",
			Ports:           []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}},
			SessionAffinity: corev1.ServiceAffinityNone,
			IPFamilies:      []corev1.IPFamily{corev1.IPv4Protocol},
		},
	}
	for _, m := range mut {
		m(svc)
	}
	return svc
}

func newSlice(name, svc string, at discoveryv1.AddressType, ports []discoveryv1.EndpointPort, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{
			discoveryv1.LabelServiceName: svc,
			discoveryv1.LabelManagedBy:   "endpointslice-controller.k8s.io",
		}},
		AddressType: at,
		Ports:       ports,
		Endpoints:   eps,
	}
}

func httpPort() []discoveryv1.EndpointPort {
	return []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)}}
}

func ep(addr string, ready *bool) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: ready}}
}

func TestNoServiceThenService(t *testing.T) {
	e := newEnv(t, newServiceExport())
	e.mustReconcile()

	se := e.serviceExport()
	if c := assertCondition(t, se, validType, metav1.ConditionFalse, string(mcsv1beta1.ServiceExportReasonNoService)); !strings.Contains(c.Message, `"web"`) {
		t.Errorf("Valid message %q does not name the Service", c.Message)
	}
	if c := assertCondition(t, se, readyType, metav1.ConditionFalse, string(mcsv1beta1.ServiceExportReasonPending)); !strings.Contains(c.Message, "waiting for Service") {
		t.Errorf("Ready message %q", c.Message)
	}
	if conditions.Get(se.Status.Conditions, confType) != nil {
		t.Errorf("Conflict set without an export")
	}
	if !slices.Contains(se.Finalizers, Finalizer) {
		t.Errorf("finalizers = %v, want %q", se.Finalizers, Finalizer)
	}
	if _, ok := e.reg.export(webKey); ok {
		t.Errorf("exported without a Service")
	}

	if err := e.c.Create(context.Background(), newService()); err != nil {
		t.Fatal(err)
	}
	e.mustReconcile()
	se = e.serviceExport()
	assertCondition(t, se, validType, metav1.ConditionTrue, string(mcsv1beta1.ServiceExportReasonValid))
	assertCondition(t, se, readyType, metav1.ConditionTrue, string(mcsv1beta1.ServiceExportReasonExported))
	if spec, ok := e.reg.export(webKey); !ok || spec.Type != registry.ClusterSetIP {
		t.Errorf("registry export = %+v, %v; want a ClusterSetIP export", spec, ok)
	}
	if got := ctrltest.ConditionTypes(se.Status.Conditions); !cmp.Equal(got, []string{validType, readyType}) {
		t.Errorf("condition order = %v", got)
	}
}

func TestExternalNameIsNotExported(t *testing.T) {
	e := newEnv(t, newServiceExport(), newService())
	e.mustReconcile()
	if _, ok := e.reg.export(webKey); !ok {
		t.Fatal("ClusterIP Service not exported")
	}

	svc := &corev1.Service{}
	if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: svcName}, svc); err != nil {
		t.Fatal(err)
	}
	svc.Spec = corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "example.com"}
	if err := e.c.Update(context.Background(), svc); err != nil {
		t.Fatal(err)
	}
	e.mustReconcile()

	e.assertNotExportable(mcsv1beta1.ServiceExportReasonInvalidServiceType)
	if g := e.reg.groups(webKey); g != nil {
		t.Errorf("ExternalName Service still has endpoints %v", g)
	}
}

func TestServiceSpec(t *testing.T) {
	tests := []struct {
		name string
		svc  *corev1.Service
		se   *mcsv1beta1.ServiceExport
		want registry.ServiceSpec
	}{
		{
			name: "headless",
			svc: newService(func(s *corev1.Service) {
				s.Spec.ClusterIP = corev1.ClusterIPNone
			}),
			se: newServiceExport(),
			want: registry.ServiceSpec{
				Type:            registry.Headless,
				Ports:           []registry.Port{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}},
				SessionAffinity: corev1.ServiceAffinityNone,
				IPFamilies:      []corev1.IPFamily{corev1.IPv4Protocol},
			},
		},
		{
			name: "ports, affinity, policies, families, exported metadata",
			svc: newService(func(s *corev1.Service) {
				s.Labels = map[string]string{"svc-label": "no"}
				s.Annotations = map[string]string{"svc-annotation": "no"}
				s.Spec.Type = corev1.ServiceTypeLoadBalancer
				s.Spec.Ports = []corev1.ServicePort{
					{Name: "https", Port: 443, AppProtocol: ptr.To("https"), TargetPort: intstr.FromInt32(8443), NodePort: 30443},
					{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53},
					{Name: "assoc", Protocol: corev1.ProtocolSCTP, Port: 9999},
				}
				s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
				s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](60)}}
				s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}
				s.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
				s.Spec.TrafficDistribution = ptr.To("PreferClose")
			}),
			se: newServiceExport(func(se *mcsv1beta1.ServiceExport) {
				se.Labels = map[string]string{"se-label": "no"}
				se.Annotations = map[string]string{"se-annotation": "no"}
				se.Spec.ExportedLabels = map[string]string{"team": "a"}
				se.Spec.ExportedAnnotations = map[string]string{"note": "b"}
			}),
			want: registry.ServiceSpec{
				Type: registry.ClusterSetIP,
				Ports: []registry.Port{
					{Name: "https", Protocol: corev1.ProtocolTCP, AppProtocol: ptr.To("https"), Port: 443},
					{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53},
					{Name: "assoc", Protocol: corev1.ProtocolSCTP, Port: 9999},
				},
				SessionAffinity:       corev1.ServiceAffinityClientIP,
				SessionAffinityConfig: &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](60)}},
				IPFamilies:            []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol},
				InternalTrafficPolicy: ptr.To(corev1.ServiceInternalTrafficPolicyLocal),
				TrafficDistribution:   ptr.To("PreferClose"),
				ExportedLabels:        map[string]string{"team": "a"},
				ExportedAnnotations:   map[string]string{"note": "b"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, tt.se, tt.svc)
			e.mustReconcile()
			got, ok := e.reg.export(webKey)
			if !ok {
				t.Fatal("not exported")
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("exported spec (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEndpointsFromSlices(t *testing.T) {
	notReady := ptr.To(false)
	v6 := newSlice("web-v6", svcName, discoveryv1.AddressTypeIPv6, httpPort(), ep("fd00::1", nil))
	v4a := newSlice("web-a", svcName, discoveryv1.AddressTypeIPv4, httpPort(),
		ep("10.1.0.2", nil),
		discoveryv1.Endpoint{
			Addresses: []string{"10.1.0.3"},
			Conditions: discoveryv1.EndpointConditions{
				Ready: ptr.To(false), Serving: ptr.To(true), Terminating: ptr.To(true),
			},
			Hostname: ptr.To("web-1"), NodeName: ptr.To("node-b"), Zone: ptr.To("z2"),
		})
	// Same ports in another order: same group. 10.1.0.2 also appears here,
	// not ready, as it does while the EndpointSlice controller moves it.
	// 10.1.0.4 terminates, its serving unset: serving, as the API and
	// kube-proxy read it.
	v4b := newSlice("web-b", svcName, discoveryv1.AddressTypeIPv4, httpPort(),
		ep("10.1.0.1", notReady), ep("10.1.0.2", notReady),
		discoveryv1.Endpoint{Addresses: []string{"10.1.0.4"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false), Terminating: ptr.To(true)}})
	// Another port list: another group.
	v4metrics := newSlice("web-metrics", svcName, discoveryv1.AddressTypeIPv4,
		[]discoveryv1.EndpointPort{
			{Name: ptr.To("metrics"), Port: ptr.To[int32](9090), AppProtocol: ptr.To("http")},
			{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)},
		},
		ep("10.1.0.9", nil))
	fqdn := newSlice("web-fqdn", svcName, discoveryv1.AddressTypeFQDN, httpPort(), ep("a.example.com", nil))
	imported := newSlice("web-imported", svcName, discoveryv1.AddressTypeIPv4, httpPort(), ep("10.9.9.9", nil))
	imported.Labels[discoveryv1.LabelManagedBy] = wellknown.ManagedBy
	otherSvc := newSlice("api-a", "api", discoveryv1.AddressTypeIPv4, httpPort(), ep("10.2.0.1", nil))
	empty := newSlice("web-empty", svcName, discoveryv1.AddressTypeIPv4, nil)

	e := newEnv(t, newServiceExport(), newService(), v6, v4a, v4b, v4metrics, fqdn, imported, otherSvc, empty)
	e.mustReconcile()

	http := []registry.EndpointPort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 8080}}
	want := []registry.EndpointGroup{
		{
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       http,
			Endpoints: []registry.Endpoint{
				{Addresses: []string{"10.1.0.1"}, Serving: true},
				{Addresses: []string{"10.1.0.2"}, Ready: true, Serving: true},
				{Addresses: []string{"10.1.0.3"}, Serving: true, Terminating: true, Hostname: "web-1", NodeName: "node-b", Zone: "z2"},
				{Addresses: []string{"10.1.0.4"}, Serving: true, Terminating: true},
			},
		},
		{
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports: []registry.EndpointPort{
				{Name: "http", Protocol: corev1.ProtocolTCP, Port: 8080},
				{Name: "metrics", Protocol: corev1.ProtocolTCP, Port: 9090, AppProtocol: ptr.To("http")},
			},
			Endpoints: []registry.Endpoint{{Addresses: []string{"10.1.0.9"}, Ready: true, Serving: true}},
		},
		{
			AddressType: discoveryv1.AddressTypeIPv6,
			Ports:       http,
			Endpoints:   []registry.Endpoint{{Addresses: []string{"fd00::1"}, Ready: true, Serving: true}},
		},
	}
	if diff := cmp.Diff(want, e.reg.groups(webKey)); diff != "" {
		t.Errorf("endpoints (-want +got):\n%s", diff)
	}
}

func TestEndpointGroupsIndependentOfOrder(t *testing.T) {
	a := *newSlice("a", svcName, discoveryv1.AddressTypeIPv4, httpPort(), ep("10.0.0.2", nil), ep("10.0.0.1", ptr.To(false)))
	b := *newSlice("b", svcName, discoveryv1.AddressTypeIPv4, httpPort(), ep("10.0.0.1", nil))
	c := *newSlice("c", svcName, discoveryv1.AddressTypeIPv6, httpPort(), ep("fd00::1", nil))
	one := endpointGroups([]discoveryv1.EndpointSlice{a, b, c})
	two := endpointGroups([]discoveryv1.EndpointSlice{c, b, a})
	if diff := cmp.Diff(one, two); diff != "" {
		t.Errorf("order changed the result (-abc +cba):\n%s", diff)
	}
	if got := one[0].Endpoints[0]; !got.Ready {
		t.Errorf("duplicate endpoint kept the not-ready copy: %+v", got)
	}
}

func TestDeletingServiceExportWithdraws(t *testing.T) {
	e := newEnv(t, newServiceExport(), newService(),
		newSlice("web-a", svcName, discoveryv1.AddressTypeIPv4, httpPort(), ep("10.1.0.1", nil)))
	e.mustReconcile()
	if _, ok := e.reg.export(webKey); !ok {
		t.Fatal("not exported")
	}
	if err := e.c.Delete(context.Background(), e.serviceExport()); err != nil {
		t.Fatal(err)
	}
	e.mustReconcile()

	if _, ok := e.reg.export(webKey); ok {
		t.Error("export not withdrawn")
	}
	if g := e.reg.groups(webKey); g != nil {
		t.Errorf("endpoints not withdrawn: %v", g)
	}
	err := e.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: svcName}, &mcsv1beta1.ServiceExport{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("ServiceExport still there after its finalizer ran: %v", err)
	}
}

// TestDeletionWaitingForTheRegistrySaysWhy: a ServiceExport whose
// withdrawal the registry refuses stays, and its Ready condition says why;
// the retries warn once.
func TestDeletionWaitingForTheRegistrySaysWhy(t *testing.T) {
	e := newEnv(t, newServiceExport(), newService())
	e.mustReconcile()
	e.events()
	e.reg.setErr(errors.New("permission denied"))
	if err := e.c.Delete(context.Background(), e.serviceExport()); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := e.reconcile(); err == nil {
			t.Fatal("the withdrawal the registry refused succeeded")
		}
	}
	c := assertCondition(t, e.serviceExport(), readyType, metav1.ConditionFalse, string(mcsv1beta1.ServiceExportReasonFailed))
	if !strings.Contains(c.Message, "withdraw export") || !strings.Contains(c.Message, "permission denied") {
		t.Errorf("Ready message %q does not say the withdrawal failed, and why", c.Message)
	}
	if ev := e.events(); len(ev) != 1 || !strings.HasPrefix(ev[0], "Warning "+EventReasonRegistryFailed) {
		t.Errorf("events = %q, want one %s warning", ev, EventReasonRegistryFailed)
	}

	e.reg.setErr(nil)
	e.mustReconcile()
	if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: svcName}, &mcsv1beta1.ServiceExport{}); !apierrors.IsNotFound(err) {
		t.Errorf("ServiceExport still there once the registry took the withdrawal: %v", err)
	}
}

// TestDeletedBeforeFinalizerWithdraws: the finalizer is added while the
// export is published, so a ServiceExport deleted before the finalizer
// lands has been published; its records are withdrawn once the deletion is
// seen, whether the object is gone or another party's finalizer keeps it.
func TestDeletedBeforeFinalizerWithdraws(t *testing.T) {
	for _, tc := range []struct {
		name  string
		other []string // finalizers of other parties
	}{
		{name: "gone"},
		{name: "kept by another finalizer", other: []string{"example.com/keep"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, newServiceExport(func(se *mcsv1beta1.ServiceExport) { se.Finalizers = tc.other }), newService(),
				newSlice("web-a", svcName, discoveryv1.AddressTypeIPv4, httpPort(), ep("10.1.0.1", nil)))
			e.beforePatch = func(obj client.Object) error {
				if _, ok := obj.(*mcsv1beta1.ServiceExport); !ok {
					return nil
				}
				// The user deletes the ServiceExport first.
				if err := e.c.Delete(context.Background(), newServiceExport()); err != nil {
					return err
				}
				return apierrors.NewConflict(mcsv1beta1.Resource("serviceexports"), svcName, errors.New("deleted"))
			}
			// A conflict: not an error, a look again soon.
			if res, err := e.reconcileResult(); err != nil || res.RequeueAfter != skeleton.BehindMin {
				t.Fatalf("Reconcile: %+v, %v; want a look again after %v, no error", res, err, skeleton.BehindMin)
			}
			if _, ok := e.reg.export(webKey); !ok {
				t.Fatal("not published while the finalizer was being added")
			}
			e.beforePatch = nil
			e.mustReconcile() // the deletion, seen

			if _, ok := e.reg.export(webKey); ok {
				t.Error("export not withdrawn")
			}
			if g := e.reg.groups(webKey); g != nil {
				t.Errorf("endpoints not withdrawn: %v", g)
			}
		})
	}
}

// TestFinalizerMeetsANewerServiceExport: the finalizer's write is refused
// because the ServiceExport changed after the cache's copy (a user's edit,
// or this controller's own status write the cache has not shown yet). That
// is no failure to log: the export is published, the status waits, and
// the ServiceExport is looked at again soon, when both are written.
func TestFinalizerMeetsANewerServiceExport(t *testing.T) {
	e := newEnv(t, newServiceExport(), newService(),
		newSlice("web-a", svcName, discoveryv1.AddressTypeIPv4, httpPort(), ep("10.1.0.1", nil)))
	refuse := func(obj client.Object) error {
		if _, ok := obj.(*mcsv1beta1.ServiceExport); !ok {
			return nil
		}
		return apierrors.NewConflict(mcsv1beta1.Resource("serviceexports"), svcName, errors.New("the object has been modified"))
	}
	e.beforePatch = refuse
	// While it goes on, each look waits twice as long, up to
	// skeleton.BehindMax: each is a write the API server refuses.
	for _, wait := range []time.Duration{skeleton.BehindMin, 2 * skeleton.BehindMin, 4 * skeleton.BehindMin} {
		res, err := e.reconcileResult()
		if err != nil || res.RequeueAfter != wait {
			t.Fatalf("Reconcile: %+v, %v; want a look again after %v, no error", res, err, wait)
		}
	}
	if _, ok := e.reg.export(webKey); !ok {
		t.Error("not published while the finalizer was refused")
	}
	if se := e.serviceExport(); len(se.Status.Conditions) != 0 || controllerutil.ContainsFinalizer(se, Finalizer) {
		t.Errorf("finalizers %v, conditions %v; want neither before the finalizer is written", se.Finalizers, se.Status.Conditions)
	}

	e.beforePatch = nil
	e.mustReconcile()
	se := e.serviceExport()
	if !controllerutil.ContainsFinalizer(se, Finalizer) {
		t.Errorf("finalizers %v, want %s", se.Finalizers, Finalizer)
	}
	assertCondition(t, se, readyType, metav1.ConditionTrue, string(mcsv1beta1.ServiceExportReasonExported))
	// Written: the next refusal waits skeleton.BehindMin again.
	se.Finalizers = nil
	if err := e.c.Update(context.Background(), se); err != nil {
		t.Fatal(err)
	}
	e.beforePatch = refuse
	if res, err := e.reconcileResult(); err != nil || res.RequeueAfter != skeleton.BehindMin {
		t.Errorf("Reconcile after the finalizer was written once: %+v, %v; want a look again after %v", res, err, skeleton.BehindMin)
	}
}

// TestPublishedByAnEarlierRunWithdrawn: records the synced view shows of a
// Service without ServiceExport (published by an earlier run before its
// finalizer was added) are withdrawn when a request for it comes.
func TestPublishedByAnEarlierRunWithdrawn(t *testing.T) {
	e := newEnv(t, newService())
	if err := e.reg.Publish(context.Background(), webKey, registry.ServiceSpec{Type: registry.ClusterSetIP}, nil); err != nil {
		t.Fatal(err)
	}
	e.syncView()
	e.mustReconcile()
	if _, ok := e.reg.export(webKey); ok {
		t.Error("export without ServiceExport not withdrawn")
	}
}

// TestNotFoundWithoutPublishingCallsNoRegistry: a request for a Service
// without ServiceExport (an event of an unexported Service) costs the
// registry nothing.
func TestNotFoundWithoutPublishingCallsNoRegistry(t *testing.T) {
	e := newEnv(t, newService())
	e.reg.setErr(errors.New("no call expected"))
	e.mustReconcile() // the view not read yet
	e.syncView()
	e.mustReconcile()
}

// inConflict exports web from this cluster, in conflict with an older
// export of another cluster, and returns the env and the Service.
func inConflict(t *testing.T) (*env, *corev1.Service) {
	t.Helper()
	svc := newService()
	e := newEnv(t, newServiceExport(), svc)
	e.mustReconcile()
	e.syncView(registry.Export{Cluster: otherID, Service: webKey, Spec: registry.ServiceSpec{Type: registry.ClusterSetIP}, Order: otherOrd})
	e.mustReconcile()
	return e, svc
}

func TestDeletingServiceWithdraws(t *testing.T) {
	e, svc := inConflict(t)
	if conditions.Get(e.serviceExport().Status.Conditions, confType) == nil {
		t.Fatal("no Conflict condition once the view holds the export")
	}

	if err := e.c.Delete(context.Background(), svc); err != nil {
		t.Fatal(err)
	}
	e.mustReconcile()

	se := e.assertNotExportable(mcsv1beta1.ServiceExportReasonNoService)
	if c := conditions.Get(se.Status.Conditions, confType); c != nil {
		t.Errorf("Conflict kept after withdrawal: %+v", c)
	}
}

// TestConflictKeptUntilWithdrawn: while the registry refuses the
// withdrawal, this cluster's record is still there, in conflict, and the
// condition says so; it goes with the record.
func TestConflictKeptUntilWithdrawn(t *testing.T) {
	e, svc := inConflict(t)
	before := conditions.Get(e.serviceExport().Status.Conditions, confType)
	if before == nil || before.Status != metav1.ConditionTrue {
		t.Fatalf("Conflict %+v, want True", before)
	}
	if err := e.c.Delete(context.Background(), svc); err != nil {
		t.Fatal(err)
	}
	e.reg.setErr(errors.New("registry down"))
	if err := e.reconcile(); err == nil {
		t.Fatal("Reconcile succeeded with a failing registry")
	}
	assertCondition(t, e.serviceExport(), confType, metav1.ConditionTrue, before.Reason)
	e.reg.setErr(nil)
	e.mustReconcile()
	if c := conditions.Get(e.serviceExport().Status.Conditions, confType); c != nil {
		t.Errorf("Conflict kept after withdrawal: %+v", c)
	}
}

func TestRegistryFailure(t *testing.T) {
	e := newEnv(t, newServiceExport(), newService())
	e.reg.setErr(errors.New("etcd unavailable"))
	if err := e.reconcile(); err == nil {
		t.Fatal("Reconcile succeeded with a failing registry")
	}
	se := e.serviceExport()
	assertCondition(t, se, validType, metav1.ConditionTrue, string(mcsv1beta1.ServiceExportReasonValid))
	if c := assertCondition(t, se, readyType, metav1.ConditionFalse, string(mcsv1beta1.ServiceExportReasonFailed)); !strings.Contains(c.Message, "etcd unavailable") {
		t.Errorf("Ready message %q does not carry the error", c.Message)
	}
	if ev := e.events(); len(ev) != 1 || !strings.HasPrefix(ev[0], "Warning "+EventReasonRegistryFailed) {
		t.Errorf("events = %q, want one %s warning", ev, EventReasonRegistryFailed)
	}

	e.reg.setErr(nil)
	e.mustReconcile()
	assertCondition(t, e.serviceExport(), readyType, metav1.ConditionTrue, string(mcsv1beta1.ServiceExportReasonExported))
}

func TestConflictFollowsTheView(t *testing.T) {
	e := newEnv(t, newServiceExport(), newService())
	e.mustReconcile()
	if c := conditions.Get(e.serviceExport().Status.Conditions, confType); c != nil {
		t.Fatalf("Conflict set before the view holds this cluster's export: %+v", c)
	}

	// An older export elsewhere is headless and has another port.
	older := registry.Export{Cluster: otherID, Service: webKey, Order: otherOrd, Spec: registry.ServiceSpec{
		Type:       registry.Headless,
		Ports:      []registry.Port{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 8080}},
		IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
	}}
	e.syncView(older)
	e.mustReconcile()
	se := e.serviceExport()
	c := assertCondition(t, se, confType, metav1.ConditionTrue, "PortConflict,TypeConflict")
	if !strings.Contains(c.Message, otherID) || !strings.Contains(c.Message, "type") {
		t.Errorf("Conflict message %q does not name the field and the winning cluster", c.Message)
	}
	assertCondition(t, se, readyType, metav1.ConditionTrue, string(mcsv1beta1.ServiceExportReasonExported))
	if ev := e.events(); len(ev) != 1 || !strings.HasPrefix(ev[0], "Warning "+EventReasonConflict) {
		t.Errorf("events = %q, want one %s warning", ev, EventReasonConflict)
	}

	// Unchanged conflict: no new event.
	e.mustReconcile()
	if ev := e.events(); len(ev) != 0 {
		t.Errorf("events on an unchanged conflict: %q", ev)
	}

	// The other cluster comes to agree.
	agreed := older
	agreed.Spec = registry.ServiceSpec{Type: registry.ClusterSetIP, Ports: []registry.Port{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}, IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol}}
	e.syncView(agreed)
	e.mustReconcile()
	assertCondition(t, e.serviceExport(), confType, metav1.ConditionFalse, string(mcsv1beta1.ServiceExportReasonNoConflicts))
	if got := ctrltest.ConditionTypes(e.serviceExport().Status.Conditions); !cmp.Equal(got, []string{validType, readyType, confType}) {
		t.Errorf("condition order = %v", got)
	}
}

// TestConflictWaitsForTheOwnSpec: after an edit of the ServiceExport, the
// View holds this cluster's previous export until the registry's change
// comes back: the Conflict of the new generation is told from the new
// export, not from the previous one.
func TestConflictWaitsForTheOwnSpec(t *testing.T) {
	e := newEnv(t, newServiceExport(), newService())
	e.mustReconcile()
	agreeing := registry.Export{Cluster: otherID, Service: webKey, Order: otherOrd, Spec: registry.ServiceSpec{
		Type: registry.ClusterSetIP, Ports: []registry.Port{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}},
		SessionAffinity: corev1.ServiceAffinityNone, IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol}}}
	e.syncView(agreeing)
	e.mustReconcile()
	assertCondition(t, e.serviceExport(), confType, metav1.ConditionFalse, string(mcsv1beta1.ServiceExportReasonNoConflicts))

	// Labels the older export does not have.
	se := e.serviceExport()
	se.Spec.ExportedLabels = map[string]string{"tier": "gold"}
	se.Generation++
	if err := e.c.Update(context.Background(), se); err != nil {
		t.Fatal(err)
	}
	e.mustReconcile()
	se = e.serviceExport()
	if c := conditions.Get(se.Status.Conditions, confType); c == nil || c.ObservedGeneration == se.Generation {
		t.Errorf("Conflict of generation %d told before the View held its export: %+v", se.Generation, c)
	}
	e.syncView(agreeing)
	e.mustReconcile()
	se = e.serviceExport()
	if c := assertCondition(t, se, confType, metav1.ConditionTrue, "LabelsConflict"); c.ObservedGeneration != se.Generation {
		t.Errorf("Conflict's observedGeneration %d, want %d", c.ObservedGeneration, se.Generation)
	}
}

// TestOtherClustersEndpointsConcernNoExport: a change of other clusters'
// endpoints alone reconciles no export; one of this cluster's endpoints,
// or of another cluster's export, does.
func TestOtherClustersEndpointsConcernNoExport(t *testing.T) {
	e := newEnv(t, newServiceExport(), newService())
	e.mustReconcile()
	e.syncView()
	want := []ctrl.Request{{NamespacedName: types.NamespacedName{Namespace: ns, Name: svcName}}}
	for _, tc := range []struct {
		name string
		c    clusterset.Change
		want []ctrl.Request
	}{
		{"another cluster's endpoints", clusterset.Change{Service: webKey, EndpointsOf: []string{otherID}}, nil},
		{"this cluster's endpoints", clusterset.Change{Service: webKey, EndpointsOf: []string{otherID, thisID}}, want},
		{"any other change", clusterset.Change{Service: webKey}, want},
	} {
		if got := e.r.changeToExport(context.Background(), tc.c); !cmp.Equal(got, tc.want) {
			t.Errorf("%s: changeToExport = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestConflictWaitsForTheNamespace: a View that a scoped backend has not
// delivered the namespace to yet holds this cluster's own export alone (a
// backend delivers those whatever their namespace): no Conflict is told
// from it. The namespace's coming names the ServiceExport, whose Conflict
// then follows the other clusters' exports.
func TestConflictWaitsForTheNamespace(t *testing.T) {
	e := newEnv(t, newServiceExport(), newService())
	e.mustReconcile()
	stored := e.reg.stored()
	own := stored.Exports[0]
	own.Order = ownOrder
	e.view.OnUpdate(registry.Update{Full: true, Scoped: true, Exports: []registry.Export{own}, Clusters: []registry.Cluster{{ID: thisID}, {ID: otherID}}})
	e.mustReconcile()
	if c := conditions.Get(e.serviceExport().Status.Conditions, confType); c != nil {
		t.Fatalf("Conflict set before the View holds the namespace: %+v", c)
	}

	older := registry.Export{Cluster: otherID, Service: webKey, Order: otherOrd, Spec: registry.ServiceSpec{Type: registry.Headless}}
	e.view.OnUpdate(registry.Update{Scoped: true, Namespaces: []string{ns}, Exports: []registry.Export{older}})
	got := e.r.changeToExport(context.Background(), clusterset.Change{Namespace: ns})
	if want := []ctrl.Request{{NamespacedName: types.NamespacedName{Namespace: ns, Name: svcName}}}; !cmp.Equal(got, want) {
		t.Fatalf("changeToExport(namespace) = %v, want %v", got, want)
	}
	e.mustReconcile()
	assertCondition(t, e.serviceExport(), confType, metav1.ConditionTrue, "PortConflict,TypeConflict")
}

func TestUnchangedReconcileWritesNothing(t *testing.T) {
	e := newEnv(t, newServiceExport(), newService(),
		newSlice("web-a", svcName, discoveryv1.AddressTypeIPv4, httpPort(), ep("10.1.0.1", nil)))
	e.mustReconcile()
	e.syncView(registry.Export{Cluster: otherID, Service: webKey, Order: otherOrd, Spec: registry.ServiceSpec{Type: registry.Headless}})
	e.mustReconcile()
	if !conditions.IsTrue(e.serviceExport().Status.Conditions, confType) {
		t.Fatal("want a conflict in the state under test")
	}
	before := e.serviceExport()

	for _, name := range []string{"same controller", "restarted controller"} {
		if name == "restarted controller" {
			e.r = e.newReconciler()
		}
		e.writes.Store(0)
		e.mustReconcile()
		if n := e.writes.Load(); n != 0 {
			t.Errorf("%s: %d API writes reconciling an unchanged ServiceExport, want 0", name, n)
		}
	}
	if diff := cmp.Diff(before, e.serviceExport()); diff != "" {
		t.Errorf("ServiceExport changed (-before +after):\n%s", diff)
	}
}

func TestWithdrawOrphans(t *testing.T) {
	kept := registry.ServiceKey{Namespace: ns, Name: svcName}
	orphan := registry.ServiceKey{Namespace: "other", Name: "gone"}
	// Being deleted, held by another party's finalizer, without mcsd's:
	// its records were published before mcsd's finalizer was added.
	deleting := registry.ServiceKey{Namespace: "other", Name: "deleting"}
	now := metav1.Now()
	e := newEnv(t, newServiceExport(), newService(), &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{
		Namespace: deleting.Namespace, Name: deleting.Name, DeletionTimestamp: &now, Finalizers: []string{"example.com/keep"}}})
	ctx := context.Background()
	for _, k := range []registry.ServiceKey{kept, orphan, deleting} {
		if err := e.reg.PutExport(ctx, k, registry.ServiceSpec{Type: registry.ClusterSetIP}); err != nil {
			t.Fatal(err)
		}
	}
	// The keys go to the controller's queue; each is reconciled.
	queue := make(chan event.TypedGenericEvent[*mcsv1beta1.ServiceExport], 10)
	e.r.enqueueExported(ctx, queue)
	close(queue)
	for ev := range queue {
		if _, err := e.r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(ev.Object)}); err != nil {
			t.Fatalf("reconcile %s: %v", client.ObjectKeyFromObject(ev.Object), err)
		}
	}
	got, _ := e.reg.Exported(ctx)
	if diff := cmp.Diff([]registry.ServiceKey{kept}, got); diff != "" {
		t.Errorf("exported after cleanup (-want +got):\n%s", diff)
	}
}

// TestTakeOverFromAWSController: a ServiceExport the AWS Cloud Map MCS
// controller finalized becomes mcsd's (its finalizer replaced by mcsd's in
// one write), and this cluster's records that controller wrote are
// published over even when they read the same.
func TestTakeOverFromAWSController(t *testing.T) {
	e := newEnv(t, newServiceExport(func(se *mcsv1beta1.ServiceExport) {
		se.Finalizers = []string{wellknown.AWSExportFinalizer}
	}), newService(), newSlice("web-a", svcName, discoveryv1.AddressTypeIPv4, httpPort(), ep("10.1.0.1", nil)))
	e.mustReconcile()
	if got := e.serviceExport().Finalizers; !slices.Equal(got, []string{Finalizer}) {
		t.Errorf("finalizers = %v, want mcsd's only", got)
	}
	// The View shows this cluster's records as the AWS controller's,
	// and the registry lost them: mcsd writes its own.
	stored := e.reg.stored()
	u := registry.Update{Full: true, Endpoints: stored.Endpoints, Clusters: []registry.Cluster{{ID: thisID}}}
	for _, x := range stored.Exports {
		x.WrittenBy = "aws-cloud-map-mcs-controller-for-k8s v0.3.1"
		u.Exports = append(u.Exports, x)
	}
	e.view.OnUpdate(u)
	if err := e.reg.DeleteExport(context.Background(), webKey); err != nil {
		t.Fatal(err)
	}
	e.mustReconcile()
	if _, ok := e.reg.export(webKey); !ok {
		t.Error("an export the View shows as the AWS controller's was not published over")
	}
}

// TestDeletedAWSFinalizedExportReleased: a ServiceExport deleted while
// only the AWS controller's finalizer held it is withdrawn and released.
func TestDeletedAWSFinalizedExportReleased(t *testing.T) {
	now := metav1.Now()
	e := newEnv(t, newServiceExport(func(se *mcsv1beta1.ServiceExport) {
		se.Finalizers = []string{wellknown.AWSExportFinalizer}
		se.DeletionTimestamp = &now
	}), newService())
	if err := e.reg.PutExport(context.Background(), webKey, registry.ServiceSpec{Type: registry.ClusterSetIP}); err != nil {
		t.Fatal(err)
	}
	e.syncView()
	e.mustReconcile()
	if _, ok := e.reg.export(webKey); ok {
		t.Error("export not withdrawn")
	}
	se := &mcsv1beta1.ServiceExport{}
	if err := e.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: svcName}, se); !apierrors.IsNotFound(err) {
		t.Errorf("ServiceExport still there (finalizers %v): %v", se.Finalizers, err)
	}
}
