package clusterset

import (
	"context"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// Source is the View as a controller-runtime source: from the moment the
// controller starts until it stops, it adds to the controller's workqueue
// the requests toRequests makes of each change, beginning, when the View has
// been read already, with a Reachability change (changes before the start
// reached no queue: every Service may need a look). The queue deduplicates
// requests that are not being processed yet.
//
// toRequests runs on the goroutine that delivers the registry's watch; it
// may read the View and the manager's cache, and must not block otherwise.
func (v *View) Source(toRequests func(context.Context, Change) []reconcile.Request) source.Source {
	return source.Func(func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		add := enqueuer(ctx, q, toRequests)
		// Subscribed before the replay: a change in between is added twice,
		// and the queue keeps one.
		context.AfterFunc(ctx, v.Subscribe(add))
		if v.HasSynced() {
			add(Change{Reachability: true})
		}
		return nil
	})
}
