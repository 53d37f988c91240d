package clusterset

import (
	"context"
	"sync"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// subscribers is a set of functions told of each T, safe for concurrent
// use; the zero value is ready.
type subscribers[T any] struct {
	mu   sync.Mutex
	m    map[int]func(T)
	next int
}

// add adds f until the returned function is called.
func (s *subscribers[T]) add(f func(T)) (remove func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[int]func(T){}
	}
	id := s.next
	s.next++
	s.m[id] = f
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.m, id)
	}
}

// list returns the current subscribers, to call without the lock.
func (s *subscribers[T]) list() []func(T) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]func(T), 0, len(s.m))
	for _, f := range s.m {
		out = append(out, f)
	}
	return out
}

// enqueuer returns a subscriber that adds to q the requests toRequests
// makes of each T, until ctx ends (the controller stopped; removing the
// subscriber follows).
func enqueuer[T any](ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request], toRequests func(context.Context, T) []reconcile.Request) func(T) {
	return func(t T) {
		if ctx.Err() != nil {
			return
		}
		for _, req := range toRequests(ctx, t) {
			q.Add(req)
		}
	}
}
