package kind

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// SyncPoll is how often WaitForSync looks at the informer and the handler.
const SyncPoll = 5 * time.Millisecond

// Source is obj's events from c, given to h through the predicates, as a
// source for a controller's builder (WatchesRawSource). It is synced, and
// the controller's workers start, once c's informer of obj has listed and
// the handler has been given every object of that list. For metadata
// alone, obj is a metav1.PartialObjectMetadata with its kind set.
func Source(ctx context.Context, c cache.Cache, obj client.Object, h handler.EventHandler, preds ...predicate.Predicate) (source.SyncingSource, error) {
	inf, err := c.GetInformer(ctx, obj, cache.BlockUntilSynced(false))
	if err != nil {
		return nil, fmt.Errorf("informer of %T: %w", obj, err)
	}
	k := &kind{informer: &registering{Informer: inf}, name: kindName(obj)}
	k.Informer = source.Informer{Informer: k.informer, Handler: h, Predicates: preds}
	return k, nil
}

// kind is source.Informer, which gives the informer's events to the
// handler, and a WaitForSync of its own.
type kind struct {
	source.Informer
	informer *registering
	name     string
}

// WaitForSync returns once the informer has listed and the handler has
// been given that list. A cancelled ctx (the manager stopping) is no
// error, as with source.Kind.
func (k *kind) WaitForSync(ctx context.Context) error {
	err := wait.PollUntilContextCancel(ctx, SyncPoll, true, func(context.Context) (bool, error) {
		return k.informer.handlerSynced(), nil
	})
	if err != nil && !errors.Is(ctx.Err(), context.Canceled) {
		return fmt.Errorf("wait for the cache of %s: %w", k, err)
	}
	return nil
}

// String names the source in controller-runtime's logs.
func (k *kind) String() string { return "kind source: " + k.name }

// kindName is obj's type, and its kind when obj is metadata alone.
func kindName(obj client.Object) string {
	if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
		return fmt.Sprintf("%T (%s)", obj, m.Kind)
	}
	return fmt.Sprintf("%T", obj)
}

// registering is an informer that keeps the registration of the handler
// source.Informer adds, to know when the handler has been given the list.
type registering struct {
	cache.Informer
	mu  sync.Mutex
	reg toolscache.ResourceEventHandlerRegistration
}

func (r *registering) AddEventHandlerWithOptions(h toolscache.ResourceEventHandler, opts toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	reg, err := r.Informer.AddEventHandlerWithOptions(h, opts)
	if err == nil {
		r.mu.Lock()
		r.reg = reg
		r.mu.Unlock()
	}
	return reg, err
}

// handlerSynced is whether the handler has been given the informer's list
// (which the informer has then made).
func (r *registering) handlerSynced() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reg != nil && r.reg.HasSynced()
}

var _ source.TypedSyncingSource[reconcile.Request] = (*kind)(nil)

// Watch is one kind's events and what turns them into requests.
type Watch struct {
	// Object is the kind: a typed object, or a metav1.PartialObjectMetadata
	// with its kind set for metadata alone.
	Object     client.Object
	Handler    handler.EventHandler
	Predicates []predicate.Predicate
}

// Add gives b a Source of each watch, from c.
func Add(ctx context.Context, b *builder.Builder, c cache.Cache, watches ...Watch) error {
	for _, w := range watches {
		src, err := Source(ctx, c, w.Object, w.Handler, w.Predicates...)
		if err != nil {
			return err
		}
		b.WatchesRawSource(src)
	}
	return nil
}
