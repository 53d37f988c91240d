package clusterset

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

// TestSource: the View's changes reach the queue as requests, deduplicated
// by the queue, from the start of the source (with a Reachability change
// when the View was read before) until its context ends; the View never
// waits for a reader.
func TestSource(t *testing.T) {
	a := registry.ServiceKey{Namespace: "shop", Name: "a"}
	b := registry.ServiceKey{Namespace: "shop", Name: "b"}
	v := NewView()
	v.OnUpdate(registry.Update{Full: true, Exports: []registry.Export{{Cluster: "east", Service: a, Spec: registry.ServiceSpec{Type: registry.ClusterSetIP}}}})

	reachability := 0
	toRequests := func(_ context.Context, c Change) []reconcile.Request {
		if c.Reachability {
			reachability++
			var reqs []reconcile.Request
			for _, k := range v.Keys("") {
				reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: k.Namespace, Name: k.Name}})
			}
			return reqs
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: c.Service.Namespace, Name: c.Service.Name}}}
	}
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := v.Source(toRequests).Start(ctx, q); err != nil {
		t.Fatal(err)
	}
	// Nobody reads the queue: the View goes on all the same.
	for i := range 100 {
		v.OnUpdate(registry.Update{Exports: []registry.Export{{Cluster: "east", Service: b, Spec: registry.ServiceSpec{Type: registry.ClusterSetIP}, Order: int64(i)}}})
	}
	v.OnConnection(true, nil)
	v.OnConnection(true, nil) // no change of reachability
	v.OnConnection(false, errors.New("down"))

	var got []string
	for q.Len() > 0 {
		req, _ := q.Get()
		got = append(got, req.String())
		q.Done(req)
	}
	if d := cmp.Diff([]string{"shop/a", "shop/b"}, got); d != "" {
		t.Errorf("requests (-want +got):\n%s", d)
	}
	// At the start (the View was read), on the connection, on its loss.
	if reachability != 3 {
		t.Errorf("%d changes of reachability, want 3", reachability)
	}

	cancel()
	v.OnUpdate(registry.Update{Exports: []registry.Export{{Cluster: "west", Service: b}}})
	if n := q.Len(); n != 0 {
		t.Errorf("%d requests after the source stopped, want 0", n)
	}
}
