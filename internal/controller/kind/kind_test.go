package kind_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache/informertest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllertest"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/mcsd-io/mcsd/internal/controller/kind"
	"github.com/mcsd-io/mcsd/internal/testutil/ctrltest"
	"github.com/mcsd-io/mcsd/internal/testutil/poll"
)

var serviceGVK = corev1.SchemeGroupVersion.WithKind("Service")

func newQueue() workqueue.TypedRateLimitingInterface[reconcile.Request] {
	return workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
}

// started is a source of c's Services, started with a new queue.
func started(t *testing.T, c cache.Cache, h handler.EventHandler, preds ...predicate.Predicate) (source.SyncingSource, workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	t.Helper()
	src, err := kind.Source(t.Context(), c, &corev1.Service{}, h, preds...)
	if err != nil {
		t.Fatal(err)
	}
	q := newQueue()
	t.Cleanup(q.ShutDown)
	if err := src.Start(t.Context(), q); err != nil {
		t.Fatal(err)
	}
	return src, q
}

// The informer exists once the source does, before the controller starts:
// the manager's cache starts it with the others. The source names its kind.
func TestSourceCreatesItsInformerAtOnce(t *testing.T) {
	c := &informertest.FakeInformers{Scheme: scheme.Scheme}
	src, err := kind.Source(t.Context(), c, &corev1.Service{}, &handler.EnqueueRequestForObject{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.InformersByGVK[serviceGVK]; !ok {
		t.Fatalf("no Service informer after Source; informers: %v", c.InformersByGVK)
	}
	if got, want := fmt.Sprint(src), "kind source: *v1.Service"; got != want {
		t.Errorf("the source is named %q, want %q", got, want)
	}
}

// Events reach the handler through the predicates.
func TestSourceGivesEventsThroughPredicates(t *testing.T) {
	c := &informertest.FakeInformers{Scheme: scheme.Scheme}
	_, q := started(t, c, &handler.EnqueueRequestForObject{},
		predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetName() != "dropped" }))
	fi := c.InformersByGVK[serviceGVK].(*controllertest.FakeInformer)
	fi.Add(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "dropped"}})
	fi.Add(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}})
	if q.Len() != 1 {
		t.Fatalf("%d requests queued, want 1", q.Len())
	}
	if got, _ := q.Get(); got.NamespacedName != (types.NamespacedName{Namespace: "shop", Name: "web"}) {
		t.Errorf("queued %v, want shop/web", got)
	}
}

// WaitForSync is done once the handler the source added has been given the
// informer's list: not before the source started, nor before the informer
// listed. With a context past its deadline it looks once; a cancelled one
// (the manager stopping) is no error.
func TestWaitForSyncWaitsForTheHandler(t *testing.T) {
	c := &informertest.FakeInformers{Scheme: scheme.Scheme}
	src, err := kind.Source(t.Context(), c, &corev1.Service{}, &handler.EnqueueRequestForObject{})
	if err != nil {
		t.Fatal(err)
	}
	fi := c.InformersByGVK[serviceGVK].(*controllertest.FakeInformer)
	done, cancel := context.WithTimeout(t.Context(), 0)
	defer cancel()

	setSynced(fi, true)
	if err := src.WaitForSync(done); err == nil {
		t.Error("synced before the source started: no handler was given the list")
	}
	q := newQueue()
	defer q.ShutDown()
	if err := src.Start(t.Context(), q); err != nil {
		t.Fatal(err)
	}
	setSynced(fi, false)
	if err := src.WaitForSync(done); err == nil {
		t.Error("synced before the informer listed")
	}
	stopped, stop := context.WithCancel(t.Context())
	stop()
	if err := src.WaitForSync(stopped); err != nil {
		t.Errorf("the manager stopping before the sync: %v, want no error", err)
	}
	setSynced(fi, true)
	if err := src.WaitForSync(done); err != nil {
		t.Errorf("not synced once the handler had the list: %v", err)
	}
	if err := src.WaitForSync(t.Context()); err != nil {
		t.Errorf("WaitForSync: %v", err)
	}
}

func setSynced(fi *controllertest.FakeInformer, synced bool) {
	fi.SyncedLock.Lock()
	defer fi.SyncedLock.Unlock()
	fi.Synced = synced
}

// With client-go's own informer, WaitForSync waits for the handler, not
// only for the informer's list: while the handler is held on the list's
// first object, the informer has synced but the source has not; once the
// handler is let go, the source syncs with every object of the list queued.
func TestWaitForSyncWithARealInformer(t *testing.T) {
	const n = 50
	list := &corev1.ServiceList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}
	for i := range n {
		list.Items = append(list.Items, corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: fmt.Sprintf("web-%d", i), ResourceVersion: "1"}})
	}
	inf := toolscache.NewSharedIndexInformer(ctrltest.ListWatch(list), &corev1.Service{}, 0, toolscache.Indexers{})
	c := &informertest.FakeInformers{Scheme: scheme.Scheme, InformersByGVK: map[schema.GroupVersionKind]toolscache.SharedIndexInformer{serviceGVK: inf}}
	release := make(chan struct{})
	letGo := sync.OnceFunc(func() { close(release) })
	t.Cleanup(letGo) // the handler's goroutine ends, whatever fails
	h := handler.Funcs{CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		<-release
		q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(e.Object)})
	}}
	src, q := started(t, c, h)
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	go inf.Run(ctx.Done())
	poll.Until(t, 10*time.Second, "the informer listed", func() (bool, string) { return inf.HasSynced(), "" })

	held, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if err := src.WaitForSync(held); err == nil {
		t.Fatalf("synced with the handler held on the list's first object (%d of %d queued)", q.Len(), n)
	}
	letGo()
	if err := src.WaitForSync(t.Context()); err != nil {
		t.Fatalf("WaitForSync: %v", err)
	}
	if q.Len() != n {
		t.Errorf("synced with %d of the list's %d objects queued", q.Len(), n)
	}
}
