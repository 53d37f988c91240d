package manager

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache/informertest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllertest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/clusterset"
	"github.com/mcsd-io/mcsd/internal/testutil/ctrltest"
	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/memory"
)

// runs numbers the runs of a test (go test -count), so that each run's
// metric series, by cluster, are its own.
var runs atomic.Int64

// inProcess is mcsd's manager for one cluster with no API server: its cache
// is fake informers that the test feeds, its client a fake API server that
// keeps the indexes the controllers register.
type inProcess struct {
	mgr       ctrl.Manager
	view      *clusterset.View
	api       client.Client
	informers *informertest.FakeInformers
	stop      func()
	// ended has start's error once it returned (read by stop).
	ended <-chan error
}

// startInProcess starts the controllers of cluster over a Registry of store,
// with objs in the cluster's API server, and waits until its View has read
// the registry.
func startInProcess(t *testing.T, store *memory.Store, cluster string, objs ...client.Object) *inProcess {
	t.Helper()
	return startGated(t, store, cluster, nil, objs...)
}

// cacheGate holds the caches of startGated unsynced until it opens (at the
// latest when the test ends, before the manager stops).
type cacheGate struct {
	ch   chan struct{}
	once sync.Once
	// bound, when set, is the bound on the caches' first sync
	// (Options.CacheSyncTimeout); an hour otherwise.
	bound time.Duration
}

func newCacheGate() *cacheGate { return &cacheGate{ch: make(chan struct{})} }

func (g *cacheGate) open() { g.once.Do(func() { close(g.ch) }) }

// startGated is startInProcess with caches that sync only once gate opens
// (nil: at once).
func startGated(t *testing.T, store *memory.Store, cluster string, gate *cacheGate, objs ...client.Object) *inProcess {
	t.Helper()
	// Every kind the controllers watch gets its informer up front: the fake
	// informers make them on first use without a lock.
	informers := &informertest.FakeInformers{Scheme: Scheme, InformersByGVK: map[schema.GroupVersionKind]toolscache.SharedIndexInformer{}}
	for _, o := range []client.Object{&mcsv1beta1.ServiceExport{}, &mcsv1beta1.ServiceImport{}, &corev1.Service{}, &discoveryv1.EndpointSlice{}, &corev1.Namespace{}, &corev1.Node{}} {
		gvk, err := gvkOf(o)
		if err != nil {
			t.Fatal(err)
		}
		informers.InformersByGVK[gvk] = &lockedInformer{FakeInformer: &controllertest.FakeInformer{Synced: true}}
	}
	c := &indexingCache{FakeInformers: informers, gate: gate}
	api := &lateClient{}
	mgr, err := ctrl.NewManager(&rest.Config{Host: "http://127.0.0.1:1"}, ctrl.Options{
		Scheme:                 Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		MapperProvider:         ctrltest.StaticMapper,
		NewCache:               func(*rest.Config, cache.Options) (cache.Cache, error) { return c, nil },
		NewClient:              func(*rest.Config, client.Options) (client.Client, error) { return api, nil },
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := store.Open(memory.Options{Identity: registry.Identity{ClusterSet: "set", Cluster: cluster}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	view, err := addControllers(ctx, mgr, reg, nil, cluster, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := fake.NewClientBuilder().WithScheme(Scheme).WithObjects(objs...).
		WithStatusSubresource(&mcsv1beta1.ServiceExport{}, &mcsv1beta1.ServiceImport{})
	for _, ix := range c.indexes {
		b = b.WithIndex(ix.obj, ix.field, ix.extract)
	}
	api.Client = b.Build()

	bound := time.Hour
	if gate != nil && gate.bound > 0 {
		bound = gate.bound
	}
	done := make(chan error, 1)
	go func() {
		done <- start(ctx, mgr, reg, view, cacheSync{timeout: bound, why: (&listErrors{}).err})
	}()
	p := &inProcess{mgr: mgr, view: view.View, api: api, informers: informers, ended: done}
	var once sync.Once
	p.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("manager of %s: %v", cluster, err)
			}
			_ = reg.Close()
		})
	}
	t.Cleanup(p.stop)
	if gate != nil {
		t.Cleanup(gate.open) // runs before p.stop: a manager stopped while its caches sync does not return
	}
	poll.Until(t, 10*time.Second, cluster+"'s View synced", func() (bool, string) { return view.HasSynced(), "" })
	return p
}

// add tells the controllers that obj was created, as an informer would.
func (p *inProcess) add(t *testing.T, obj client.Object) {
	t.Helper()
	i, err := p.informers.GetInformer(t.Context(), obj)
	if err != nil {
		t.Fatal(err)
	}
	i.(*lockedInformer).add(obj)
}

func gvkOf(o client.Object) (schema.GroupVersionKind, error) {
	gvks, _, err := Scheme.ObjectKinds(o)
	if err != nil {
		return schema.GroupVersionKind{}, fmt.Errorf("kind of %T: %w", o, err)
	}
	return gvks[0], nil
}

// indexingCache keeps the indexes the controllers register, for the fake API
// server that serves their reads.
type indexingCache struct {
	*informertest.FakeInformers
	indexes []index
	gate    *cacheGate
}

func (c *indexingCache) WaitForCacheSync(ctx context.Context) bool {
	if c.gate == nil {
		return true
	}
	select {
	case <-c.gate.ch:
		return true
	case <-ctx.Done():
		return false
	}
}

type index struct {
	obj     client.Object
	field   string
	extract client.IndexerFunc
}

// GetInformer serves a metadata-only watch (the Nodes' zones) from the
// informer of its kind: the fake informers know only typed objects.
func (c *indexingCache) GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error) {
	if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
		return c.GetInformerForKind(ctx, m.GroupVersionKind(), opts...)
	}
	return c.FakeInformers.GetInformer(ctx, obj, opts...)
}

func (c *indexingCache) IndexField(_ context.Context, obj client.Object, field string, extract client.IndexerFunc) error {
	c.indexes = append(c.indexes, index{obj: obj, field: field, extract: extract})
	return nil
}

// lockedInformer is a fake informer whose handlers the controllers may
// register from their goroutines while the test adds objects.
type lockedInformer struct {
	mu sync.Mutex
	*controllertest.FakeInformer
}

func (i *lockedInformer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.FakeInformer.AddEventHandler(h)
}

func (i *lockedInformer) AddEventHandlerWithOptions(h toolscache.ResourceEventHandler, o toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.FakeInformer.AddEventHandlerWithOptions(h, o)
}

func (i *lockedInformer) add(obj client.Object) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.Add(obj)
}

// lateClient is the manager's client, built once the controllers have
// registered their indexes.
type lateClient struct{ client.Client }

// TestNoGoroutineOutlivesTheManager starts the controllers and stops them:
// every goroutine they started ends.
func TestNoGoroutineOutlivesTheManager(t *testing.T) {
	baseline := goleak.IgnoreCurrent()
	store := memory.NewStore()
	cluster := fmt.Sprintf("leak-%d", runs.Add(1))
	p := startInProcess(t, store, cluster)
	// A change and a change of reachability go through the sources.
	other, err := store.Open(memory.Options{Identity: registry.Identity{ClusterSet: "set", Cluster: "other"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.PutExport(t.Context(), registry.ServiceKey{Namespace: "shop", Name: "web"}, registry.ServiceSpec{Type: registry.ClusterSetIP}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "the other cluster's export in the View", func() (bool, string) {
		return len(p.view.Keys("shop")) == 1, ""
	})
	p.stop()
	_ = other.Close()
	goleak.VerifyNone(t, baseline,
		// controller-runtime v0.23.3's priority queue may leave its
		// handleReadyItems goroutine blocked after ShutDown
		// (kubernetes-sigs/controller-runtime#3538, fixed by #3540).
		goleak.IgnoreAnyFunction("sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue.(*priorityqueue[...]).handleReadyItems.func1.1"))
}

// TestRegistryIsReadWhileTheCachesSync: the registry's first read does not
// wait for the manager's caches; the two take about as long.
func TestRegistryIsReadWhileTheCachesSync(t *testing.T) {
	gate := newCacheGate()
	// startGated waits until the View has read the registry.
	p := startGated(t, memory.NewStore(), fmt.Sprintf("gated-%d", runs.Add(1)), gate)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
	defer cancel()
	if p.mgr.GetCache().WaitForCacheSync(ctx) {
		t.Fatal("the caches synced before the gate opened")
	}
	gate.open()
}

// TestStopWhileTheCachesSync: a controller stopped while its caches cannot
// sync (its API server unreachable) stops. controller-runtime's manager
// does not return then, and spins (runManager); the run is a process of
// its own, so that the spinning goroutine ends with it.
func TestStopWhileTheCachesSync(t *testing.T) {
	inChild(t, stopWhileSyncingEnv, stopWhileSyncing, "the controller, stopped while its caches synced, had not stopped")
}

const stopWhileSyncingEnv = "MCSD_TEST_STOP_WHILE_SYNCING"

// inChild runs child in a process of its own: this test alone, run again
// with env set to 1, which must exit 0 within 30 s; late says what a
// process still running then means.
func inChild(t *testing.T, env string, child func(*testing.T), late string) {
	t.Helper()
	if os.Getenv(env) == "1" {
		child(t)
		return
	}
	test := t.Name()
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^"+test+"$", "-test.v")
	cmd.Env = append(os.Environ(), env+"=1")
	done := make(chan error, 1)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the child process of %s: %v\n%s", test, err, out.String())
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		err := <-done
		t.Fatalf("%s after 30 s (%v):\n%s", late, err, out.String())
	}
}

// stopWhileSyncing starts the controllers with caches that never sync,
// stops them, and waits for start to return.
func stopWhileSyncing(t *testing.T) {
	gate := newCacheGate()
	p := startGated(t, memory.NewStore(), fmt.Sprintf("stop-%d", runs.Add(1)), gate)
	stopped := make(chan struct{})
	go func() {
		p.stop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		// The test process ends here (the gate's cleanup would wait for
		// the manager), and the parent reports it.
		fmt.Println("start had not returned 10 s after the stop")
		os.Exit(3)
	}
}

// TestCachesThatDoNotSyncFailTheRun: caches that have not synced within
// the bound (Options.CacheSyncTimeout) end the run with errCacheSync. In a
// process of its own, as TestStopWhileTheCachesSync.
func TestCachesThatDoNotSyncFailTheRun(t *testing.T) {
	inChild(t, cachesNeverSyncEnv, cachesNeverSync, "the controller, its caches unsynced past their bound, was still running")
}

const cachesNeverSyncEnv = "MCSD_TEST_CACHES_NEVER_SYNC"

// cachesNeverSync starts the controllers with caches that never sync and a
// bound of 300 ms on their sync, and exits 0 once start returned
// errCacheSync, 3 otherwise: the manager, stopped before its caches
// synced, never returns, so neither do the test's cleanups.
func cachesNeverSync(t *testing.T) {
	gate := newCacheGate()
	gate.bound = 300 * time.Millisecond
	start := time.Now()
	p := startGated(t, memory.NewStore(), fmt.Sprintf("bound-%d", runs.Add(1)), gate)
	select {
	case err := <-p.ended:
		took := time.Since(start)
		want := "the caches have not synced in 300ms: no list or watch failed, they were slow"
		if !errors.Is(err, errCacheSync) || err.Error() != want || took < gate.bound {
			fmt.Printf("start returned %v after %s, want %q after 300 ms at least\n", err, took, want)
			os.Exit(3)
		}
		fmt.Printf("start returned after %s: %v\n", took, err)
		os.Exit(0)
	case <-time.After(10 * time.Second):
		fmt.Println("start had not returned 10 s after its caches' bound")
		os.Exit(3)
	}
}

// TestExportReachesAnotherManager carries an export from one cluster's
// controllers to another's through one in-memory registry, in one process.
func TestExportReachesAnotherManager(t *testing.T) {
	run := runs.Add(1)
	east, west := fmt.Sprintf("east-%d", run), fmt.Sprintf("west-%d", run)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.0.0.10", ClusterIPs: []string{"10.0.0.10"},
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			Ports:      []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}},
		},
	}
	se := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}}
	store := memory.NewStore()
	src := startInProcess(t, store, east, ns.DeepCopy(), svc, se)
	dst := startInProcess(t, store, west, ns.DeepCopy())

	src.add(t, se)
	si := &mcsv1beta1.ServiceImport{}
	took := poll.Until(t, 10*time.Second, "the ServiceImport in "+west, func() (bool, string) {
		err := dst.api.Get(t.Context(), client.ObjectKey{Namespace: "shop", Name: "web"}, si)
		if err != nil {
			return false, err.Error()
		}
		return len(si.Status.Clusters) == 1, fmt.Sprintf("clusters %v", si.Status.Clusters)
	})
	t.Logf("export in %s to import in %s: %s", east, west, took)
	if si.Spec.Type != mcsv1beta1.ClusterSetIP || len(si.Spec.Ports) != 1 || si.Spec.Ports[0].Port != 80 || si.Status.Clusters[0].Cluster != east {
		t.Errorf("ServiceImport = %+v %+v, want a ClusterSetIP import of port 80 from %s", si.Spec, si.Status, east)
	}
}
