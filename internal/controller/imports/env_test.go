package imports

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/clusterset"
	"github.com/mcsd-io/mcsd/internal/testutil/ctrltest"
	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/memory"
)

const (
	testNS     = "shop"
	clusterSet = "set"
	// settleTimeout bounds the wait for the View to catch up with a write.
	settleTimeout = 10 * time.Second
)

var webKey = registry.ServiceKey{Namespace: testNS, Name: "web"}

// env is a reconciler over a fake API server and the View of a memory
// registry: the exporting clusters publish their records through their own
// Registries of one Store, and the View is fed by a watch of the store, as
// the manager's registry watch feeds it (internal/manager). Tests call
// Reconcile themselves once the View holds what the registry does, so that
// they can tell what one reconcile writes.
type env struct {
	t    *testing.T
	ctx  context.Context
	api  client.Client // the fake API server, for the test's own reads and writes
	view *clusterset.View
	rec  *record.FakeRecorder
	r    *Reconciler

	// store is the registry; watcher is this cluster's connection to it,
	// which feeds view; clusters are the exporting clusters' Registries.
	store    *memory.Store
	watcher  *memory.Watcher
	clusters map[string]*memory.Registry
	// down is set between disconnect and reconnect: the View hears nothing.
	down bool

	// mu guards writes and uids: a reconcile writes the derived Service and
	// the EndpointSlices concurrently.
	mu sync.Mutex
	// writes counts the reconciler's writes, by verb and kind.
	writes []string
	uids   int
	// createHook, when set, may fail the reconciler's creates, as an API
	// server would.
	createHook func(client.Object) error
	// getHook, when set, may fail the reconciler's reads.
	getHook func(client.Object) error
	// stale, when set, answers the reconciler's reads of an object of its
	// name with a copy of it, as a cache that has not caught up would.
	stale client.Object
	// updateHook, when set, runs before each of the reconciler's updates
	// (another writer's write, say) and may fail it.
	updateHook func(client.Object) error
}

func newEnv(t *testing.T, objs ...client.Object) *env {
	t.Helper()
	scheme := ctrltest.Scheme(t)
	api := fake.NewClientBuilder().WithScheme(scheme).
		WithStatusSubresource(&mcsv1beta1.ServiceImport{}).
		// The API server's own field selector, which mcsd reads a
		// ServiceImport past the cache with (importToDelete).
		WithIndex(&mcsv1beta1.ServiceImport{}, "metadata.name", func(o client.Object) []string { return []string{o.GetName()} }).
		WithObjects(objs...).Build()
	store := memory.NewStore()
	e := &env{
		t: t, ctx: ctrl.LoggerInto(context.Background(), ctrl.Log), api: api, view: clusterset.NewView(), rec: record.NewFakeRecorder(100),
		store: store, watcher: store.Watcher(clusterSet), clusters: map[string]*memory.Registry{},
	}
	t.Cleanup(func() { _ = e.watcher.Close() })
	e.watch(e.view)
	e.waitConnected(true)
	counted := interceptor.NewClient(api, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if e.getHook != nil {
				if err := e.getHook(obj); err != nil {
					return err
				}
			}
			if e.stale != nil && reflect.TypeOf(e.stale) == reflect.TypeOf(obj) && client.ObjectKeyFromObject(e.stale) == key {
				reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(e.stale.DeepCopyObject()).Elem())
				return nil
			}
			return c.Get(ctx, key, obj, opts...)
		},
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			e.record("create", obj)
			if e.createHook != nil {
				if err := e.createHook(obj); err != nil {
					return err
				}
			}
			if obj.GetUID() == "" { // as the API server does
				e.mu.Lock()
				e.uids++
				obj.SetUID(types.UID(fmt.Sprintf("uid-%d", e.uids)))
				e.mu.Unlock()
			}
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			e.record("update", obj)
			if e.updateHook != nil {
				if err := e.updateHook(obj); err != nil {
					return err
				}
			}
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			e.record("patch", obj)
			return c.Patch(ctx, obj, patch, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			e.record("delete", obj)
			// The API server's UID precondition, which the fake lacks.
			do := (&client.DeleteOptions{}).ApplyOptions(opts)
			if do.Preconditions != nil && do.Preconditions.UID != nil {
				cur := obj.DeepCopyObject().(client.Object)
				if err := c.Get(ctx, client.ObjectKeyFromObject(obj), cur); err == nil && cur.GetUID() != *do.Preconditions.UID {
					return apierrors.NewConflict(corev1.Resource("services"), obj.GetName(), errors.New("UID precondition failed"))
				}
			}
			return c.Delete(ctx, obj, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			e.record("update/"+sub, obj)
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			e.record("patch/"+sub, obj)
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	})
	e.r = &Reconciler{Client: counted, APIReader: api, View: e.view, ClusterID: "east", Recorder: e.rec}
	return e
}

func namespace(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

func (e *env) record(verb string, obj client.Object) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.writes = append(e.writes, fmt.Sprintf("%s %T %s", verb, obj, obj.GetName()))
}

// reconcile runs one reconcile of shop/name and returns the writes it made.
func (e *env) reconcile(name string) []string {
	e.t.Helper()
	e.writes = nil
	if _, err := e.r.Reconcile(e.ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: testNS, Name: name}}); err != nil {
		e.t.Fatalf("reconcile %s: %v", name, err)
	}
	return e.writes
}

// steady reconciles and fails unless nothing was written.
func (e *env) steady(name string) {
	e.t.Helper()
	if w := e.reconcile(name); len(w) > 0 {
		e.t.Fatalf("steady state reconcile of %s wrote: %v", name, w)
	}
}

// watch feeds h from the env's watcher until the test ends, as the
// manager's registry watch feeds its View.
func (e *env) watch(h registry.Handler) {
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- e.watcher.Watch(ctx, h) }()
	e.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, registry.ErrClosed) {
			e.t.Errorf("registry watch: %v", err)
		}
	})
}

// waitConnected waits until the View reports the registry reachable or not.
func (e *env) waitConnected(want bool) {
	e.t.Helper()
	poll.Until(e.t, settleTimeout, fmt.Sprintf("the View to report the registry connected=%t", want), func() (bool, string) {
		connected, err := e.view.Connected()
		return connected == want, fmt.Sprintf("connected=%t (%v)", connected, err)
	})
}

// open opens cluster's Registry in the store, its endpoints stamped by
// stamp (nil: the time they are put).
func (e *env) open(cluster string, stamp func() time.Time) *memory.Registry {
	e.t.Helper()
	reg, err := e.store.Open(memory.Options{Identity: registry.Identity{ClusterSet: clusterSet, Cluster: cluster}, Stamp: stamp})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = reg.Close() })
	e.clusters[cluster] = reg
	return reg
}

// publisher returns cluster's Registry, opened on first use.
func (e *env) publisher(cluster string) *memory.Registry {
	if reg := e.clusters[cluster]; reg != nil {
		return reg
	}
	return e.open(cluster, nil)
}

// publish puts each export through its cluster's Registry, in order, so
// that the first is the oldest of those not exported before, then each
// cluster's endpoints; then it waits for the View to hold them.
func (e *env) publish(exports []registry.Export, endpoints ...registry.Endpoints) {
	e.t.Helper()
	for _, x := range exports {
		if err := e.publisher(x.Cluster).PutExport(e.ctx, x.Service, x.Spec); err != nil {
			e.t.Fatalf("%s: put export: %v", x.Cluster, err)
		}
	}
	for _, x := range endpoints {
		if err := e.publisher(x.Cluster).PutEndpoints(e.ctx, x.Service, x.Groups); err != nil {
			e.t.Fatalf("%s: put endpoints: %v", x.Cluster, err)
		}
	}
	e.settle()
}

// unexport deletes the clusters' exports of web, endpoints included, and
// waits for the View to hear of it.
func (e *env) unexport(clusters ...string) {
	e.t.Helper()
	for _, c := range clusters {
		if err := e.publisher(c).DeleteExport(e.ctx, webKey); err != nil {
			e.t.Fatalf("%s: delete export: %v", c, err)
		}
	}
	e.settle()
}

// disconnect cuts this cluster off the registry until reconnect.
func (e *env) disconnect(err error) {
	e.t.Helper()
	e.watcher.Disconnect(err)
	e.down = true
	e.waitConnected(false)
}

// reconnect ends the outage: the View is read again in full.
func (e *env) reconnect() {
	e.t.Helper()
	e.watcher.Reconnect()
	e.down = false
	e.waitConnected(true)
	e.settle()
}

// settle waits until the View holds the registry's records, unless this
// cluster is cut off from the registry.
func (e *env) settle() {
	e.t.Helper()
	if e.down {
		return
	}
	poll.Until(e.t, settleTimeout, "the View to hold the registry's records", func() (bool, string) {
		stored := e.store.Snapshot(clusterSet)
		exports := map[registry.ServiceKey]map[string]registry.Export{}
		endpoints := map[registry.ServiceKey]map[string]registry.Endpoints{}
		for _, x := range stored.Exports {
			byCluster(exports, x.Service)[x.Cluster] = x
		}
		for _, x := range stored.Endpoints {
			byCluster(endpoints, x.Service)[x.Cluster] = x
		}
		for _, k := range e.view.Keys("") {
			byCluster(exports, k)
		}
		for k, want := range exports {
			held := map[string]registry.Export{}
			for _, x := range e.view.Exports(k) {
				held[x.Cluster] = x
			}
			if !reflect.DeepEqual(want, held) {
				return false, fmt.Sprintf("exports of %s: registry %v, View %v", k, want, held)
			}
			if held := e.view.Endpoints(k); !reflect.DeepEqual(byCluster(endpoints, k), held) {
				return false, fmt.Sprintf("endpoints of %s differ", k)
			}
		}
		return true, ""
	})
}

// byCluster returns m's records of key, made on first use.
func byCluster[T any](m map[registry.ServiceKey]map[string]T, key registry.ServiceKey) map[string]T {
	if m[key] == nil {
		m[key] = map[string]T{}
	}
	return m[key]
}

func (e *env) serviceImport(name string) *mcsv1beta1.ServiceImport {
	e.t.Helper()
	si := &mcsv1beta1.ServiceImport{}
	if err := e.api.Get(e.ctx, client.ObjectKey{Namespace: testNS, Name: name}, si); err != nil {
		e.t.Fatalf("get ServiceImport %s: %v", name, err)
	}
	return si
}

// service returns the Service, or nil.
func (e *env) service(name string) *corev1.Service {
	e.t.Helper()
	svc := &corev1.Service{}
	err := e.api.Get(e.ctx, client.ObjectKey{Namespace: testNS, Name: name}, svc)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return svc
}

func (e *env) exists(obj client.Object, name string) bool {
	e.t.Helper()
	err := e.api.Get(e.ctx, client.ObjectKey{Namespace: testNS, Name: name}, obj)
	if err != nil && !apierrors.IsNotFound(err) {
		e.t.Fatal(err)
	}
	return err == nil
}

// slices returns the import's EndpointSlices by source cluster, each
// cluster's sorted by name.
func (e *env) slices(name string) map[string][]discoveryv1.EndpointSlice {
	e.t.Helper()
	list := &discoveryv1.EndpointSliceList{}
	if err := e.api.List(e.ctx, list, client.InNamespace(testNS), client.MatchingLabels{mcsv1beta1.LabelServiceName: name}); err != nil {
		e.t.Fatal(err)
	}
	out := map[string][]discoveryv1.EndpointSlice{}
	for _, s := range list.Items {
		c := s.Labels[mcsv1beta1.LabelSourceCluster]
		out[c] = append(out[c], s)
	}
	for _, ss := range out {
		sort.Slice(ss, func(i, j int) bool { return ss[i].Name < ss[j].Name })
	}
	return out
}

// allocate gives the derived Service of name cluster IPs, as the API server
// does on create: spec.clusterIP is the first of spec.clusterIPs.
func (e *env) allocate(name string, ips ...string) {
	e.t.Helper()
	svc := e.service(DerivedServiceName(name))
	if svc == nil {
		e.t.Fatalf("no derived Service for %s", name)
	}
	svc.Spec.ClusterIP, svc.Spec.ClusterIPs = ips[0], ips
	if err := e.api.Update(e.ctx, svc); err != nil {
		e.t.Fatal(err)
	}
}

// events drains the recorded events.
func (e *env) events() []string { return ctrltest.Events(e.rec) }

// Registry records.

func port(name string, proto corev1.Protocol, n int32) registry.Port {
	return registry.Port{Name: name, Protocol: proto, Port: n}
}

// export is cluster's export of web, to publish: the registry orders it.
func export(cluster string, typ registry.ServiceType, families []corev1.IPFamily, ports ...registry.Port) registry.Export {
	return registry.Export{Cluster: cluster, Service: webKey, Spec: registry.ServiceSpec{Type: typ, Ports: ports, IPFamilies: families}}
}

// endpoints is cluster's endpoints of web, to publish: the registry stamps
// them.
func endpoints(cluster string, groups ...registry.EndpointGroup) registry.Endpoints {
	return registry.Endpoints{Cluster: cluster, Service: webKey, Groups: groups}
}

func group(at discoveryv1.AddressType, ports []registry.EndpointPort, eps ...registry.Endpoint) registry.EndpointGroup {
	return registry.EndpointGroup{AddressType: at, Ports: ports, Endpoints: eps}
}

func epPort(name string, n int32) registry.EndpointPort {
	return registry.EndpointPort{Name: name, Protocol: corev1.ProtocolTCP, Port: n}
}

func ready(addr string) registry.Endpoint {
	return registry.Endpoint{Addresses: []string{addr}, Ready: true, Serving: true}
}

var (
	v4   = []corev1.IPFamily{corev1.IPv4Protocol}
	v6   = []corev1.IPFamily{corev1.IPv6Protocol}
	dual = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
)

// Assertions on objects.

func portNames(ports []discoveryv1.EndpointPort) []string {
	var out []string
	for _, p := range ports {
		out = append(out, fmt.Sprintf("%s:%d", *p.Name, *p.Port))
	}
	return out
}

func addresses(ss []discoveryv1.EndpointSlice) []string {
	var out []string
	for _, s := range ss {
		for _, ep := range s.Endpoints {
			out = append(out, ep.Addresses...)
		}
	}
	slices.Sort(out)
	return out
}

func condition(si *mcsv1beta1.ServiceImport, typ string) *metav1.Condition {
	for i := range si.Status.Conditions {
		if si.Status.Conditions[i].Type == typ {
			return &si.Status.Conditions[i]
		}
	}
	return nil
}

func wantCondition(t *testing.T, si *mcsv1beta1.ServiceImport, typ string, status metav1.ConditionStatus, reason string) *metav1.Condition {
	t.Helper()
	c := condition(si, typ)
	if c == nil {
		t.Fatalf("no %s condition; have %+v", typ, si.Status.Conditions)
	}
	if c.Status != status || c.Reason != reason {
		t.Fatalf("%s = %s/%s (%q), want %s/%s", typ, c.Status, c.Reason, c.Message, status, reason)
	}
	return c
}
