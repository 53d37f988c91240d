// Package echo drops the watch events that only echo a controller's own
// writes. A reconcile that writes an object knows what it wrote; the event
// the write brings back would only reconcile the object again, to find it as
// written. At a cluster's start, when every import is written at once, those
// echoes doubled or tripled the reconciles (docs/design.md).
//
// Filter remembers the resourceVersion of every object its Client wrote and
// drops the one event that carries that version. An event that carries any
// other version (a write of someone else's, or a later one) passes, and so
// does every event when the write's response came after its event, so a
// dropped event is never one the reconciler has not seen the outcome of.
// A reconcile that relies on an event of its own write to look again must
// requeue itself instead.
package echo

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// maxPerObject is how many versions of one object Filter remembers: the
// writes of one reconcile (create, then a status patch, say) whose events
// have not come yet.
const maxPerObject = 4

// Filter remembers the versions an object was written at. The zero value is
// ready to use.
type Filter struct {
	mu sync.Mutex
	m  map[types.UID][]string
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
	if f.m == nil {
		f.m = map[types.UID][]string{}
	}
	v := append(f.m[uid], rv)
	if len(v) > maxPerObject {
		v = v[len(v)-maxPerObject:]
	}
	f.m[uid] = v
}

// echo reports whether o is at a version Filter remembers, and forgets it.
func (f *Filter) echo(o client.Object) bool {
	if o == nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	v := f.m[o.GetUID()]
	for i, rv := range v {
		if rv == o.GetResourceVersion() {
			// Events come in version order: the ones before it will not.
			if rest := v[i+1:]; len(rest) > 0 {
				f.m[o.GetUID()] = rest
			} else {
				delete(f.m, o.GetUID())
			}
			return true
		}
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

// size is how many objects f remembers versions of.
func (f *Filter) size() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.m)
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
