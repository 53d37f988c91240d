// Package echo drops the watch events that only echo a controller's own
// writes. A reconcile that writes an object knows what it wrote; the event
// the write brings back would only reconcile the object again, to find it as
// written. At a cluster's start, when every import is written at once, those
// echoes brought most imports back two or three times (docs/design.md).
//
// Filter remembers, for a while (Remember), the resourceVersion of every
// object its Client wrote, and drops the one event that carries that
// version. An event that carries any other version (a write of someone
// else's, or a later one) passes. An event that comes while a write of its
// object is under way in a reconcile that Track follows is held until the
// write returns: dropped if it was the write's (or an earlier write's)
// echo; otherwise the reconcile is told (Missed) and requeues itself, since
// the event that would have brought it back was taken. Behind tells a
// reconcile that its cache does not show its own last write of an object
// yet; the event of that write then passes, and brings the reconcile back
// once the cache shows it. It also tells a reconcile that read the object
// before the event of that write came, when the event came while the
// reconcile ran: the reconcile looks again within Recheck.
//
// A dropped event is one at a version this controller wrote; the one way it
// can carry more is an informer's relist folding another writer's change,
// made between two of this controller's writes that do not lock the
// version, into one event at the second: a change that waits for the next
// event of that object. A reconcile that relies on an event of its own
// write to look again must requeue itself instead.
package echo

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
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
	// inflight counts the tracked writes under way by object, and held
	// the versions of the events of the object that came meanwhile.
	inflight map[objectKey]int
	held     map[objectKey][]string
	// awaited are the objects a reconcile found its cache behind on
	// (Behind): the event of their last write passes, to bring the
	// reconcile back as soon as the cache shows it.
	awaited map[types.UID]bool
	// came is, by object, the last remembered write whose event came, and
	// when in the order of events (arrivals).
	came map[types.UID]arrival
	// now is the clock; nil is time.Now.
	now func() time.Time
}

// objectKey names an object by its type, namespace and name: a created
// object has no UID until the write returns.
type objectKey struct {
	typ             reflect.Type
	namespace, name string
}

func keyOf(o client.Object) objectKey {
	return objectKey{typ: reflect.TypeOf(o), namespace: o.GetNamespace(), name: o.GetName()}
}

// version is one write: the version it made, and when.
type version struct {
	rv string
	at time.Time
}

// arrival is the event of a remembered write: the write's version, its
// place in the order of all Filters' arrivals, and when it came.
type arrival struct {
	rv  string
	seq uint64
	at  time.Time
}

// arrivals orders the events of remembered writes, of every Filter: a
// reconcile (Track) notes the last one before its reads.
var arrivals atomic.Uint64

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
// remembers, but for the last write of an object a reconcile awaits
// (Behind), and forgets the object on its deletion.
func (f *Filter) Predicate() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool { return !f.echo(e.Object) && !f.hold(e.Object) },
		UpdateFunc: func(e event.UpdateEvent) bool { return !f.echo(e.ObjectNew) && !f.hold(e.ObjectNew) },
		DeleteFunc: func(e event.DeleteEvent) bool {
			f.forget(e.Object)
			return true
		},
	}
}

// errPanicked stands for the outcome of a write that panicked.
var errPanicked = errors.New("write panicked")

// write makes the write call of o, noting it under way (begin) until it
// returns or panics (end).
func (f *Filter) write(ctx context.Context, o client.Object, call func() error) (err error) {
	tracked := f.begin(ctx, o)
	err = errPanicked
	defer func() { err = f.end(ctx, o, tracked, err) }()
	err = call()
	return err
}

// begin notes a write of o under way, when ctx is tracked (Track).
func (f *Filter) begin(ctx context.Context, o client.Object) bool {
	if missedFrom(ctx) == nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.inflight == nil {
		f.inflight, f.held = map[objectKey]int{}, map[objectKey][]string{}
	}
	f.inflight[keyOf(o)]++
	return true
}

// end notes the end of a write of o (err nil: it succeeded), begun if
// tracked. The events held meanwhile are dropped if they echo this
// controller's writes; the others, and the echo of a write a reconcile
// awaits (Behind), are reported to ctx's Missed.
func (f *Filter) end(ctx context.Context, o client.Object, tracked bool, err error) error {
	f.mu.Lock()
	if err == nil {
		f.wroteLocked(o)
	}
	foreign := 0
	if tracked {
		k := keyOf(o)
		if f.inflight[k]--; f.inflight[k] <= 0 {
			delete(f.inflight, k)
			for _, rv := range f.held[k] {
				echo := f.consumeLocked(o.GetUID(), rv)
				if f.caughtUpLocked(o.GetUID()) || !echo {
					foreign++
				}
			}
			delete(f.held, k)
		}
	}
	f.mu.Unlock()
	if foreign > 0 {
		missedFrom(ctx).n.Add(int32(foreign))
	}
	return err
}

// hold keeps back an event of o that came while a tracked write of o is
// under way, and reports whether it did.
func (f *Filter) hold(o client.Object) bool {
	if o == nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	k := keyOf(o)
	if f.inflight[k] == 0 {
		return false
	}
	f.held[k] = append(f.held[k], o.GetResourceVersion())
	return true
}

// wroteLocked remembers o's version. Callers hold f.mu.
func (f *Filter) wroteLocked(o client.Object) {
	uid, rv := o.GetUID(), o.GetResourceVersion()
	if uid == "" || rv == "" {
		return
	}
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
	for uid := range f.awaited {
		if len(f.m[uid]) == 0 {
			delete(f.awaited, uid)
		}
	}
	for uid, a := range f.came {
		if now.Sub(a.at) > Remember {
			delete(f.came, uid)
		}
	}
	f.pruned = now
}

// echo reports whether o is at a version Filter remembers (written within
// Remember) and no reconcile awaits it (Behind), and forgets it and the
// versions before it.
func (f *Filter) echo(o client.Object) bool {
	if o == nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	echo := f.consumeLocked(o.GetUID(), o.GetResourceVersion())
	return !f.caughtUpLocked(o.GetUID()) && echo
}

// caughtUpLocked reports whether a reconcile awaits uid's cache (Behind)
// and no write of uid is remembered any more: its cache shows the last
// one. Once none is remembered, the wait is forgotten, whether or not its
// event matched (it may have come after Remember). Callers hold f.mu, after
// consumeLocked.
func (f *Filter) caughtUpLocked(uid types.UID) bool {
	if len(f.m[uid]) > 0 {
		return false
	}
	awaited := f.awaited[uid]
	delete(f.awaited, uid)
	return awaited
}

// consumeLocked reports whether version rv of the object uid is one Filter
// remembers (written within Remember), and forgets it and the versions
// before it. Callers hold f.mu.
func (f *Filter) consumeLocked(uid types.UID, rv string) bool {
	v := f.m[uid]
	for i, w := range v {
		if w.rv != rv {
			continue
		}
		// Events come in version order: the ones before it will not.
		if rest := v[i+1:]; len(rest) > 0 {
			f.m[uid] = rest
		} else {
			delete(f.m, uid)
		}
		now := f.clock()
		if f.came == nil {
			f.came = map[types.UID]arrival{}
		}
		f.came[uid] = arrival{rv: rv, seq: arrivals.Add(1), at: now}
		return now.Sub(w.at) <= Remember
	}
	return false
}

// Behind reports whether o, as the reconcile of ctx read it from a cache,
// is older than the last write of it that Filter remembers. Either that
// write's event has not come, and o is at another version, an earlier
// write's included (the cache is updated before its events are delivered,
// so it may show a write whose event is still on its way when a later
// write was made); the event of that last write is then let through rather
// than dropped, so that the reconcile comes back as soon as the cache shows
// it. Or the event came while the reconcile ran (Track), after o may have
// been read, and o is not at its version; the reconcile is then told
// (Missed) and looks again within Recheck, since that event was dropped. A
// write made from o would conflict with the last write, or undo it.
func (f *Filter) Behind(ctx context.Context, o client.Object) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	uid, now := o.GetUID(), f.clock()
	if v := f.m[uid]; len(v) > 0 {
		last := v[len(v)-1]
		behind := last.rv != o.GetResourceVersion() && now.Sub(last.at) <= Remember
		if behind {
			if f.awaited == nil {
				f.awaited = map[types.UID]bool{}
			}
			f.awaited[uid] = true
		}
		return behind
	}
	m := missedFrom(ctx)
	a, ok := f.came[uid]
	if m == nil || !ok || a.seq <= m.mark || a.rv == o.GetResourceVersion() || now.Sub(a.at) > Remember {
		return false
	}
	m.n.Add(1)
	return true
}

func (f *Filter) forget(o client.Object) {
	if o == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.m, o.GetUID())
	delete(f.awaited, o.GetUID())
	delete(f.came, o.GetUID())
}

// writer is a client that tells its Filter what it wrote.
type writer struct {
	client.Client
	f *Filter
}

func (w *writer) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	return w.f.write(ctx, obj, func() error { return w.Client.Create(ctx, obj, opts...) })
}

func (w *writer) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	return w.f.write(ctx, obj, func() error { return w.Client.Update(ctx, obj, opts...) })
}

func (w *writer) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	return w.f.write(ctx, obj, func() error { return w.Client.Patch(ctx, obj, patch, opts...) })
}

func (w *writer) Status() client.SubResourceWriter {
	return w.SubResource("status")
}

func (w *writer) SubResource(name string) client.SubResourceClient {
	return &subClient{SubResourceClient: w.Client.SubResource(name), f: w.f}
}

// subClient is a subresource client whose writes tell its Filter.
type subClient struct {
	client.SubResourceClient
	f *Filter
}

func (s *subClient) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	return s.f.write(ctx, obj, func() error { return s.SubResourceClient.Update(ctx, obj, opts...) })
}

func (s *subClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	return s.f.write(ctx, obj, func() error { return s.SubResourceClient.Patch(ctx, obj, patch, opts...) })
}

// Recheck is how soon a reconcile that Missed an event looks again: the
// cache shows the change the event brought already.
const Recheck = 10 * time.Millisecond

// Missed counts the events that Filter held back during a reconcile's
// writes and that were not their echoes, and the objects Behind found read
// before the event of their last write came.
type Missed struct {
	n atomic.Int32
	// mark is the last arrival before the reconcile began.
	mark uint64
}

type missedKey struct{}

// Track returns ctx for one reconcile, whose writes hold back the events
// of the objects they write until they return (Filter), and its Missed.
func Track(ctx context.Context) (context.Context, *Missed) {
	m := &Missed{mark: arrivals.Load()}
	return context.WithValue(ctx, missedKey{}, m), m
}

func missedFrom(ctx context.Context) *Missed {
	m, _ := ctx.Value(missedKey{}).(*Missed)
	return m
}

// Requeue returns the reconcile's result, asking to look again within
// Recheck if it succeeded and an event was held back that was not its own.
func (m *Missed) Requeue(res reconcile.Result, err error) (reconcile.Result, error) {
	if err == nil && m.n.Load() > 0 && (res.RequeueAfter == 0 || res.RequeueAfter > Recheck) {
		res.RequeueAfter = Recheck
	}
	return res, err
}
