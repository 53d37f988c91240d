package manager

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/mcsd-io/mcsd/internal/controller/kind"
	"github.com/mcsd-io/mcsd/internal/testutil/ctrltest"
	"github.com/mcsd-io/mcsd/internal/testutil/poll"
)

// runInformer runs an informer of obj's kind made by l, whose lists list
// answers, until the test ends.
func runInformer(t *testing.T, l *listErrors, obj runtime.Object, list func(context.Context) (runtime.Object, error)) toolscache.SharedIndexInformer {
	t.Helper()
	inf := l.newInformer(ctrltest.ListWatchFunc(list), obj, 0, toolscache.Indexers{})
	ctx, stop := context.WithCancel(t.Context())
	t.Cleanup(stop)
	go inf.RunWithContext(ctx)
	return inf
}

// failing answers every list with err.
func failing(err error) func(context.Context) (runtime.Object, error) {
	return func(context.Context) (runtime.Object, error) { return nil, err }
}

// waitErr waits until l's error says want.
func waitErr(t *testing.T, l *listErrors, want string) string {
	t.Helper()
	var got string
	poll.Until(t, 10*time.Second, "the error to say "+want, func() (bool, string) {
		got = l.err(3 * time.Second).Error()
		return strings.Contains(got, want), got
	})
	return got
}

// The error names the kinds that have not synced: with the last error of
// those that have not listed since, and a hint at RBAC only when the API
// server refused one; a kind whose first list has not returned, with no
// error, is named too. With none, it says the lists were slow.
func TestListErrorsNameWhatHasNotSynced(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "services"}, "", errors.New("no grant"))
	refused := errors.New("connection refused")

	var none listErrors
	if got, want := none.err(time.Second).Error(), "the caches have not synced in 1s: no list or watch failed, they were slow"; got != want {
		t.Errorf("no informers: %q, want %q", got, want)
	}

	var network listErrors
	runInformer(t, &network, &corev1.Service{}, failing(refused))
	// The EndpointSlices' first list fails, the next one lists: synced.
	var lists atomic.Int32
	slices := runInformer(t, &network, &discoveryv1.EndpointSlice{}, func(context.Context) (runtime.Object, error) {
		if lists.Add(1) == 1 {
			return nil, refused
		}
		return &discoveryv1.EndpointSliceList{ListMeta: metav1.ListMeta{ResourceVersion: "5"}}, nil
	})
	poll.Until(t, 10*time.Second, "the EndpointSlices synced after their failed list", func() (bool, string) {
		return slices.HasSynced(), fmt.Sprintf("%d lists", lists.Load())
	})
	if got, want := waitErr(t, &network, "refused"), "the caches have not synced in 3s: *v1.Service: failed to list *v1.Service: connection refused"; got != want {
		t.Errorf("a Service list refused by the network: %q, want %q", got, want)
	}

	var rbac listErrors
	runInformer(t, &rbac, &corev1.Service{}, failing(forbidden))
	err := waitErr(t, &rbac, "forbidden")
	for _, want := range []string{"the caches have not synced in 3s (is a grant of mcsd's RBAC missing?): ", "*v1.Service: ", "forbidden"} {
		if !strings.Contains(err, want) {
			t.Errorf("a Service list refused by RBAC: %q, want it to say %q", err, want)
		}
	}
	if !errors.Is(rbac.err(time.Second), errCacheSync) {
		t.Errorf("%v is not errCacheSync", rbac.err(time.Second))
	}

	// A list that does not return: no error to tell, the kind is named.
	var hung listErrors
	listing := make(chan struct{}, 1)
	runInformer(t, &hung, &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"}},
		func(ctx context.Context) (runtime.Object, error) {
			listing <- struct{}{}
			<-ctx.Done()
			return nil, ctx.Err()
		})
	namespaces := runInformer(t, &hung, &corev1.Namespace{}, func(context.Context) (runtime.Object, error) {
		return &corev1.NamespaceList{ListMeta: metav1.ListMeta{ResourceVersion: "7"}}, nil
	})
	<-listing
	poll.Until(t, 10*time.Second, "the Namespaces synced", func() (bool, string) { return namespaces.HasSynced(), "" })
	want := "the caches have not synced in 3s: *v1.PartialObjectMetadata (Node): its first list has not returned, and no list or watch of it failed"
	if got := waitErr(t, &hung, "Node"); got != want {
		t.Errorf("a Node list that does not return: %q, want %q", got, want)
	}
}

// ownWait is a cache's own wait for its sync, which answers true and
// counts its calls and those made before synced said so.
type ownWait struct {
	cache.Cache
	synced       func() bool
	calls, early atomic.Int32
}

func (w *ownWait) WaitForCacheSync(context.Context) bool {
	w.calls.Add(1)
	if !w.synced() {
		w.early.Add(1)
	}
	return true
}

// quickSync's wait returns once every informer has synced, and asks the
// cache's own wait only then; a wait whose ctx ends first returns false
// without asking it.
func TestQuickSyncWaitsForEveryInformer(t *testing.T) {
	var l listErrors
	runInformer(t, &l, &corev1.Namespace{}, func(context.Context) (runtime.Object, error) {
		return &corev1.NamespaceList{ListMeta: metav1.ListMeta{ResourceVersion: "2"}}, nil
	})
	release := make(chan struct{})
	runInformer(t, &l, &corev1.Service{}, func(ctx context.Context) (runtime.Object, error) {
		select {
		case <-release:
			return &corev1.ServiceList{ListMeta: metav1.ListMeta{ResourceVersion: "3"}}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	own := &ownWait{synced: l.synced}
	q := quickSync{Cache: own, synced: l.synced, poll: time.Millisecond}

	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if q.WaitForCacheSync(ctx) {
		t.Error("synced while the Services' list had not returned")
	}
	if n := own.calls.Load(); n != 0 {
		t.Errorf("the cache's own wait was asked %d times before the Services listed", n)
	}

	done := make(chan bool, 1)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		done <- q.WaitForCacheSync(ctx)
	}()
	close(release)
	if !<-done {
		t.Error("not synced within 10 s of every list's return")
	}
	if calls, early := own.calls.Load(), own.early.Load(); calls != 1 || early != 0 {
		t.Errorf("the cache's own wait was asked %d times, %d of them before every informer synced; want once, after", calls, early)
	}
}

// The manager's cache (newQuickSync) is controller-runtime's, as quickSync
// over the informers listErrors keeps, looked at every kind.SyncPoll.
func TestNewQuickSync(t *testing.T) {
	var l listErrors
	c, err := newQuickSync(&l)(&rest.Config{Host: "https://127.0.0.1:1"}, cache.Options{Scheme: Scheme})
	if err != nil {
		t.Fatal(err)
	}
	q, ok := c.(quickSync)
	if !ok {
		t.Fatalf("the manager's cache is a %T, want quickSync", c)
	}
	if q.poll != kind.SyncPoll || q.synced == nil {
		t.Errorf("quickSync looks every %s (synced set: %t), want every %s", q.poll, q.synced != nil, kind.SyncPoll)
	}
}
