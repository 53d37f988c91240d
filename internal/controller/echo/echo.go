// Package echo drops the watch events that only echo a controller's own
// writes. A reconcile that writes an object knows what it wrote; the event
// the write brings back would only reconcile the object again, to find it as
// written. At a cluster's start, when every import is written at once, those
// echoes brought most imports back two or three times (docs/design.md).
//
// Filter remembers, for a while (Remember), the resourceVersion of every
// object its Client wrote, and drops the one event that carries that
// version. An event that carries any other version (a write of someone
// else's, or a later one) passes, and so does an event that came before the
// write's response. A dropped event is one at a version this controller
// wrote; the one way it can carry more is an informer's relist folding
// another writer's change, made between two of this controller's writes
// that do not lock the version, into one event at the second: a change that
// waits for the next event of that object. A reconcile that relies on an
// event of its own write to look again must requeue itself instead.
package echo

import (
	"context"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// maxPerObject is how many versions of one object Filter remembers: the
// writes of one reconcile (create, then a status patch, say) whose events
// have not come yet.
const maxPerObject = 4

// Remember is how long Filter remembers a write: its event comes within
// milliseconds, or came before the write's response (and passed), or never
// comes (a write that changed nothing).
const Remember = 10 * time.Second

// Filter remembers the versions an object was written at. The zero value is
// ready to use.
type Filter struct {
	mu     sync.Mutex
	m      map[types.UID][]version
	pruned time.Time
	// now is the clock; nil is time.Now.
	now func() time.Time
}

// version is one write: the version it made, and when.
type version struct {
	rv string
	at time.Time
}

func (f *Filter) clock() time.Time {
	if f.now != nil {
		return f.now()
	}
	return time.Now()
}

// Client returns c, remembering the version of every object it creates,
// updates or patches (its status included).
func (f *Filter) Client(c client.Client) client.Client {
	return &writer{Client: c, f: f}
}

// Predicate drops the create and update events that carry a version Filter
// remembers, and forgets the object on its deletion.
func (f *Filter) Predicate() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool { return !f.echo(e.Object) },
		UpdateFunc: func(e event.UpdateEvent) bool { return !f.echo(e.ObjectNew) },
		DeleteFunc: func(e event.DeleteEvent) bool {
			f.forget(e.Object)
			return true
		},
	}
}

// wrote remembers o's version.
func (f *Filter) wrote(o client.Object) {
	uid, rv := o.GetUID(), o.GetResourceVersion()
	if uid == "" || rv == "" {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.clock()
	if f.m == nil {
		f.m = map[types.UID][]version{}
	}
	if now.Sub(f.pruned) > Remember {
		f.prune(now)
	}
	v := append(f.m[uid], version{rv: rv, at: now})
	if len(v) > maxPerObject {
		v = v[len(v)-maxPerObject:]
	}
	f.m[uid] = v
}

// prune forgets the writes older than Remember. Callers hold f.mu.
func (f *Filter) prune(now time.Time) {
	for uid, v := range f.m {
		v = slices.DeleteFunc(v, func(w version) bool { return now.Sub(w.at) > Remember })
		if len(v) == 0 {
			delete(f.m, uid)
			continue
		}
		f.m[uid] = v
	}
	f.pruned = now
}

// echo reports whether o is at a version Filter remembers (written within
// Remember), and forgets it and the versions before it.
func (f *Filter) echo(o client.Object) bool {
	if o == nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	uid := o.GetUID()
	v := f.m[uid]
	for i, w := range v {
		if w.rv != o.GetResourceVersion() {
			continue
		}
		// Events come in version order: the ones before it will not.
		if rest := v[i+1:]; len(rest) > 0 {
			f.m[uid] = rest
		} else {
			delete(f.m, uid)
		}
		return f.clock().Sub(w.at) <= Remember
	}
	return false
}

func (f *Filter) forget(o client.Object) {
	if o == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.m, o.GetUID())
}

// writer is a client that tells its Filter what it wrote.
type writer struct {
	client.Client
	f *Filter
}

func (w *writer) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	return w.done(obj, w.Client.Create(ctx, obj, opts...))
}

func (w *writer) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	return w.done(obj, w.Client.Update(ctx, obj, opts...))
}

func (w *writer) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	return w.done(obj, w.Client.Patch(ctx, obj, patch, opts...))
}

func (w *writer) Status() client.SubResourceWriter {
	return w.SubResource("status")
}

func (w *writer) SubResource(name string) client.SubResourceClient {
	return &subClient{SubResourceClient: w.Client.SubResource(name), f: w.f}
}

func (w *writer) done(obj client.Object, err error) error {
	if err == nil {
		w.f.wrote(obj)
	}
	return err
}

// subClient is a subresource client whose writes tell its Filter.
type subClient struct {
	client.SubResourceClient
	f *Filter
}

func (s *subClient) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	err := s.SubResourceClient.Update(ctx, obj, opts...)
	if err == nil {
		s.f.wrote(obj)
	}
	return err
}

func (s *subClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	err := s.SubResourceClient.Patch(ctx, obj, patch, opts...)
	if err == nil {
		s.f.wrote(obj)
	}
	return err
}
