package clusterset

import (
	"context"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

// TestLocal: Local tells its source of a Service whose endpoints changed
// or went, not of the same endpoints set again, and only while the
// controller runs; a nil Local holds nothing.
func TestLocal(t *testing.T) {
	key := registry.ServiceKey{Namespace: "shop", Name: "web"}
	groups := func(addrs ...string) []registry.EndpointGroup {
		g := registry.EndpointGroup{AddressType: discoveryv1.AddressTypeIPv4}
		for _, a := range addrs {
			g.Endpoints = append(g.Endpoints, registry.Endpoint{Addresses: []string{a}, Ready: true})
		}
		return []registry.EndpointGroup{g}
	}
	spec := registry.ServiceSpec{Type: registry.ClusterSetIP, Ports: []registry.Port{{Name: "http", Protocol: "TCP", Port: 80}}}
	l := NewLocal()
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	ctx, cancel := context.WithCancel(context.Background())
	src := l.Source(func(_ context.Context, k registry.ServiceKey) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: k.Namespace, Name: k.Name}}}
	})
	if err := src.Start(ctx, q); err != nil {
		t.Fatal(err)
	}
	told := func() int {
		n := q.Len()
		for range n {
			req, _ := q.Get()
			q.Done(req)
			q.Forget(req)
		}
		return n
	}

	l.Set(key, spec, groups("10.1.0.1"))
	if n := told(); n != 1 {
		t.Errorf("first set: %d requests, want 1", n)
	}
	l.Set(key, spec, groups("10.1.0.1"))
	if n := told(); n != 0 {
		t.Errorf("same endpoints again: %d requests, want 0", n)
	}
	if rec, ok := l.Endpoints("east", key, spec); !ok || rec.Cluster != "east" || rec.Service != key || len(rec.Groups) != 1 || !rec.Updated.IsZero() {
		t.Errorf("Endpoints = %+v, %t", rec, ok)
	}
	// Built for another spec (a port renamed): not for this one's export.
	renamed := spec
	renamed.Ports = []registry.Port{{Name: "web", Protocol: "TCP", Port: 80}}
	if _, ok := l.Endpoints("east", key, renamed); ok {
		t.Error("endpoints built for one spec given for another")
	}
	l.Set(key, renamed, groups("10.1.0.1"))
	if n := told(); n != 1 {
		t.Errorf("same endpoints, another spec: %d requests, want 1", n)
	}
	l.Set(key, spec, nil)
	if n := told(); n != 1 {
		t.Errorf("endpoints withheld: %d requests, want 1", n)
	}
	if rec, ok := l.Endpoints("east", key, spec); !ok || len(rec.Groups) != 0 {
		t.Errorf("withheld: Endpoints = %+v, %t; want held, with no groups", rec, ok)
	}
	l.Delete(key)
	l.Delete(key)
	if n := told(); n != 1 {
		t.Errorf("deleted twice: %d requests, want 1", n)
	}
	if _, ok := l.Endpoints("east", key, spec); ok {
		t.Error("deleted, still held")
	}
	cancel()
	l.Set(key, spec, groups("10.1.0.2"))
	if n := told(); n != 0 {
		t.Errorf("after the controller stopped: %d requests, want 0", n)
	}

	var none *Local
	none.Set(key, spec, groups("10.1.0.1"))
	none.Delete(key)
	if _, ok := none.Endpoints("east", key, spec); ok {
		t.Error("a nil Local holds endpoints")
	}
}
