package kind_test

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache/informertest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllertest"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/mcsd-io/mcsd/internal/controller/kind"
)

var serviceGVK = corev1.SchemeGroupVersion.WithKind("Service")

func newQueue() workqueue.TypedRateLimitingInterface[reconcile.Request] {
	return workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
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
	src, err := kind.Source(t.Context(), c, &corev1.Service{}, &handler.EnqueueRequestForObject{},
		predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetName() != "dropped" }))
	if err != nil {
		t.Fatal(err)
	}
	q := newQueue()
	defer q.ShutDown()
	if err := src.Start(t.Context(), q); err != nil {
		t.Fatal(err)
	}
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
