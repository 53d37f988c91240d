package memory

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

var (
	_ registry.Registry        = (*Registry)(nil)
	_ registry.ReadOnlyWatcher = (*Watcher)(nil)
)

// Options configure Open.
type Options struct {
	Identity registry.Identity
	// TTL is how long the cluster's records outlive its last open Registry.
	// Default DefaultTTL.
	TTL time.Duration
}

// Registry is a Store opened for one cluster of one clusterset.
type Registry struct {
	Watcher
}

// Open opens s for opts.Identity: the cluster is live from now until its
// TTL after the last of its Registries is closed.
func (s *Store) Open(opts Options) (*Registry, error) {
	if err := opts.Identity.Validate(); err != nil {
		return nil, fmt.Errorf("memory registry options: %w", err)
	}
	if opts.TTL <= 0 {
		opts.TTL = DefaultTTL
	}
	r := &Registry{Watcher: Watcher{s: s, id: opts.Identity, closed: make(chan struct{})}}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.join(s.set(opts.Identity.ClusterSet), opts.Identity, opts.TTL)
	return r, nil
}

// PutExport implements registry.Publisher.
func (r *Registry) PutExport(ctx context.Context, key registry.ServiceKey, spec registry.ServiceSpec) error {
	return r.write(ctx, key, func(cs *clusterSet, id registry.RecordID) { r.s.putExport(cs, id, spec) })
}

// PutEndpoints implements registry.Publisher.
func (r *Registry) PutEndpoints(ctx context.Context, key registry.ServiceKey, groups []registry.EndpointGroup) error {
	return r.write(ctx, key, func(cs *clusterSet, id registry.RecordID) { cs.putEndpoints(id, groups) })
}

// DeleteExport implements registry.Publisher.
func (r *Registry) DeleteExport(ctx context.Context, key registry.ServiceKey) error {
	return r.write(ctx, key, (*clusterSet).deleteExport)
}

// Exported implements registry.Publisher.
func (r *Registry) Exported(ctx context.Context) ([]registry.ServiceKey, error) {
	if err := alive(ctx, r.closed); err != nil {
		return nil, err
	}
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	return r.s.set(r.id.ClusterSet).exported(r.id.Cluster), nil
}

// write runs f on this cluster's record of key, with the store locked.
func (r *Registry) write(ctx context.Context, key registry.ServiceKey, f func(*clusterSet, registry.RecordID)) error {
	if err := alive(ctx, r.closed); err != nil {
		return err
	}
	if err := validate(key); err != nil {
		return err
	}
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	f(r.s.set(r.id.ClusterSet), registry.RecordID{Cluster: r.id.Cluster, Service: key})
	return nil
}

// Backend implements registry.Registry.
func (r *Registry) Backend() string { return Name }

// Close implements registry.Registry. It leaves the cluster's records, which
// expire after the TTL unless the cluster opens the store again.
func (r *Registry) Close() error {
	r.once.Do(func() {
		close(r.closed)
		r.s.mu.Lock()
		defer r.s.mu.Unlock()
		r.s.leave(r.s.set(r.id.ClusterSet), r.id)
	})
	return nil
}

// Watcher reads one clusterset of a Store without being a member of it.
type Watcher struct {
	s      *Store
	id     registry.Identity
	closed chan struct{}
	once   sync.Once
}

// Watcher opens a read-only watcher of clusterSet; Close ends its watches.
func (s *Store) Watcher(clusterSet string) *Watcher {
	return &Watcher{s: s, id: registry.Identity{ClusterSet: clusterSet}, closed: make(chan struct{})}
}

// Close ends the watcher's watches.
func (w *Watcher) Close() error {
	w.once.Do(func() { close(w.closed) })
	return nil
}

// Watch implements registry.Watcher: a full Update of the clusterset, the
// registry reported reachable, then every change as it is made, until ctx
// ends or the backend is closed.
func (w *Watcher) Watch(ctx context.Context, h registry.Handler) error {
	if err := alive(ctx, w.closed); err != nil {
		return err
	}
	wt := &watch{ready: make(chan struct{}, 1)}
	w.s.mu.Lock()
	cs := w.s.set(w.id.ClusterSet)
	wt.queue(cs.full())
	cs.watches[wt] = struct{}{}
	w.s.mu.Unlock()
	defer func() {
		w.s.mu.Lock()
		delete(cs.watches, wt)
		w.s.mu.Unlock()
	}()

	connected := false
	for {
		select {
		case <-ctx.Done():
			return alive(ctx, w.closed)
		case <-w.closed:
			return registry.ErrClosed
		case <-wt.ready:
		}
		for _, u := range wt.take() {
			h.OnUpdate(u)
		}
		if !connected {
			connected = true
			h.OnConnection(true, nil)
		}
	}
}

// watch is one call of Watch: the updates made and not delivered yet.
type watch struct {
	mu      sync.Mutex
	pending []registry.Update
	ready   chan struct{} // holds a token while pending is not empty
}

func (w *watch) queue(u registry.Update) {
	w.mu.Lock()
	w.pending = append(w.pending, u)
	w.mu.Unlock()
	select {
	case w.ready <- struct{}{}:
	default:
	}
}

func (w *watch) take() []registry.Update {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.pending
	w.pending = nil
	return out
}
