package memory

import (
	"context"
	"errors"
	"fmt"
	"iter"
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
	// Stamp is the clock that stamps the cluster's endpoints when they are
	// put (Endpoints.Updated). Default time.Now. Tests set it to publish
	// endpoints stamped at a time of their choosing, or unstamped (a clock
	// that returns the zero time), as a Cloud Map instance registered without
	// the stamp is read.
	Stamp func() time.Time
}

// Registry is a Store opened for one cluster of one clusterset.
type Registry struct {
	Watcher
	stamp func() time.Time
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
	if opts.Stamp == nil {
		opts.Stamp = time.Now
	}
	r := &Registry{Watcher: Watcher{s: s, id: opts.Identity, closed: make(chan struct{})}, stamp: opts.Stamp}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.join(s.set(opts.Identity.ClusterSet), opts.Identity, opts.TTL); err != nil {
		return nil, err
	}
	return r, nil
}

// PutExport implements registry.Publisher.
func (r *Registry) PutExport(ctx context.Context, key registry.ServiceKey, spec registry.ServiceSpec) error {
	return r.write(ctx, key, func(cs *clusterSet, id registry.RecordID) {
		var u registry.Update
		if r.s.putExport(cs, id, spec, &u); !u.Empty() {
			cs.deliver(u)
		}
	})
}

// PutEndpoints implements registry.Publisher.
func (r *Registry) PutEndpoints(ctx context.Context, key registry.ServiceKey, groups []registry.EndpointGroup) error {
	return r.write(ctx, key, func(cs *clusterSet, id registry.RecordID) {
		var u registry.Update
		if cs.putEndpoints(id, groups, r.stamp(), &u); !u.Empty() {
			cs.deliver(u)
		}
	})
}

// Publish implements registry.Publisher: watchers get the export and its
// endpoints in one update.
func (r *Registry) Publish(ctx context.Context, key registry.ServiceKey, spec registry.ServiceSpec, groups []registry.EndpointGroup) error {
	return r.write(ctx, key, func(cs *clusterSet, id registry.RecordID) {
		var u registry.Update
		r.s.putExport(cs, id, spec, &u)
		cs.putEndpoints(id, groups, r.stamp(), &u)
		if !u.Empty() {
			cs.deliver(u)
		}
	})
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
	// down is why the watcher's watches cannot read the registry, nil while
	// they can (Disconnect, Reconnect). s.mu guards it.
	down error
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
	wt := &watch{owner: w, ready: make(chan struct{}, 1)}
	w.s.mu.Lock()
	cs := w.s.set(w.id.ClusterSet)
	if w.down != nil {
		wt.queueConnection(false, w.down)
	} else {
		wt.queueFull(cs)
	}
	cs.watches[wt] = struct{}{}
	w.s.mu.Unlock()
	defer func() {
		w.s.mu.Lock()
		delete(cs.watches, wt)
		w.s.mu.Unlock()
	}()

	for {
		select {
		case <-ctx.Done():
			return alive(ctx, w.closed)
		case <-w.closed:
			return registry.ErrClosed
		case <-wt.ready:
		}
		for _, deliver := range wt.take() {
			deliver(h)
		}
	}
}

// Disconnect simulates, for tests, the loss of the watcher's connection to
// the registry: its watches report OnConnection(false, err) and deliver no
// change until Reconnect, while the store goes on taking every cluster's
// writes. A nil err stands for a generic connection error.
func (w *Watcher) Disconnect(err error) {
	if err == nil {
		err = errors.New("memory registry: disconnected")
	}
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	w.down = err
	for wt := range w.own() {
		wt.queueConnection(false, err)
	}
}

// Reconnect ends what Disconnect began, as the etcd backend recovers: each
// watch delivers a full Update of the clusterset as it is now, then reports
// OnConnection(true, nil).
func (w *Watcher) Reconnect() {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	if w.down == nil {
		return
	}
	w.down = nil
	cs := w.s.set(w.id.ClusterSet)
	for wt := range w.own() {
		wt.queueFull(cs)
	}
}

// own yields the watcher's watches. s.mu is held.
func (w *Watcher) own() iter.Seq[*watch] {
	return func(yield func(*watch) bool) {
		for wt := range w.s.set(w.id.ClusterSet).watches {
			if wt.owner == w && !yield(wt) {
				return
			}
		}
	}
}

// watch is one call of Watch: the updates and connection reports made and
// not delivered yet, each a call of the handler.
type watch struct {
	owner   *Watcher
	mu      sync.Mutex
	pending []func(registry.Handler)
	ready   chan struct{} // holds a token while pending is not empty
}

func (w *watch) queue(deliver func(registry.Handler)) {
	w.mu.Lock()
	w.pending = append(w.pending, deliver)
	w.mu.Unlock()
	select {
	case w.ready <- struct{}{}:
	default:
	}
}

// queueUpdate queues u unless the watch's watcher is disconnected. s.mu is
// held.
func (w *watch) queueUpdate(u registry.Update) {
	if w.owner.down == nil {
		w.queue(func(h registry.Handler) { h.OnUpdate(u) })
	}
}

// queueFull queues the whole state of cs, then the report that the registry
// is reachable, as a watch begins. s.mu is held.
func (w *watch) queueFull(cs *clusterSet) {
	w.queueUpdate(cs.full())
	w.queueConnection(true, nil)
}

func (w *watch) queueConnection(connected bool, err error) {
	w.queue(func(h registry.Handler) { h.OnConnection(connected, err) })
}

func (w *watch) take() []func(registry.Handler) {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.pending
	w.pending = nil
	return out
}

// Snapshot returns, for tests, what the store holds of clusterSet: its
// records and live clusters as one full Update, the first that a watch of it
// would deliver.
func (s *Store) Snapshot(clusterSet string) registry.Update {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.set(clusterSet).full()
}
