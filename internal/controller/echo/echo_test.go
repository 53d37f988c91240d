package echo

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/testutil/ctrltest"
)

func TestFilterDropsTheEchoesOfItsWrites(t *testing.T) {
	ctx := context.Background()
	api := fake.NewClientBuilder().WithScheme(ctrltest.Scheme(t)).WithStatusSubresource(&mcsv1beta1.ServiceImport{}).Build()
	var f Filter
	c, p := f.Client(api), f.Predicate()
	created := func(o client.Object) bool { return p.Create(event.CreateEvent{Object: o}) }
	updated := func(o client.Object) bool { return p.Update(event.UpdateEvent{ObjectOld: o, ObjectNew: o}) }

	// Created, then its status patched, before either event came.
	si := &mcsv1beta1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "uid-1"}}
	if err := c.Create(ctx, si); err != nil {
		t.Fatal(err)
	}
	atCreate := si.DeepCopy()
	base := si.DeepCopy()
	si.Status.Clusters = []mcsv1beta1.ClusterStatus{{Cluster: "east"}}
	if err := c.Status().Patch(ctx, si, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	if created(atCreate) {
		t.Error("the creation's event passed")
	}
	if updated(si) {
		t.Error("the status patch's event passed")
	}
	// The same versions again (a resync, say) pass: each echo is dropped once.
	if !updated(si) {
		t.Error("an event at a version already echoed was dropped")
	}

	// Someone else's write passes; so does the write that follows it, if
	// its event came first.
	other := si.DeepCopy()
	other.Labels = map[string]string{"by": "hand"}
	if err := api.Update(ctx, other); err != nil {
		t.Fatal(err)
	}
	if !updated(other) {
		t.Error("another writer's event was dropped")
	}
	own := other.DeepCopy()
	own.Labels = nil
	if err := c.Update(ctx, own); err != nil {
		t.Fatal(err)
	}
	if !p.Delete(event.DeleteEvent{Object: own}) {
		t.Error("a deletion was dropped")
	}
	if f.size() != 0 {
		t.Errorf("%d objects remembered after their deletion", f.size())
	}

	// A write that fails is not remembered.
	again := &mcsv1beta1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "uid-2"}}
	if err := c.Create(ctx, again); err == nil {
		t.Fatal("created a ServiceImport twice")
	}
	if f.size() != 0 {
		t.Errorf("a failed write is remembered")
	}
}

func TestFilterRemembersAFewVersionsPerObject(t *testing.T) {
	var f Filter
	o := &corev1.Service{ObjectMeta: metav1.ObjectMeta{UID: "u"}}
	for _, rv := range []string{"1", "2", "3", "4", "5", "6"} {
		o.ResourceVersion = rv
		f.wrote(o)
	}
	if got := len(f.m["u"]); got != maxPerObject {
		t.Fatalf("%d versions remembered, want %d", got, maxPerObject)
	}
	// Version 4's event drops it and the earlier ones still remembered.
	o.ResourceVersion = "4"
	if !f.echo(o) {
		t.Fatal("version 4 not an echo")
	}
	o.ResourceVersion = "3"
	if f.echo(o) {
		t.Error("version 3 an echo after version 4's")
	}
	o.ResourceVersion = "6"
	if !f.echo(o) {
		t.Error("version 6 not an echo")
	}
	if f.size() != 0 {
		t.Errorf("%d objects remembered after their last echo", f.size())
	}
}

// TestFilterForgetsOldWrites: a write whose event never came (it changed
// nothing) or came first is forgotten after Remember, and does not drop a
// later event at its version (a relist, say).
func TestFilterForgetsOldWrites(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	f := Filter{now: func() time.Time { return now }}
	o := &corev1.Service{ObjectMeta: metav1.ObjectMeta{UID: "u", ResourceVersion: "7"}}
	f.wrote(o)
	now = now.Add(Remember + time.Second)
	if f.echo(o) {
		t.Error("an event dropped for a write older than Remember")
	}
	other := &corev1.Service{ObjectMeta: metav1.ObjectMeta{UID: "v", ResourceVersion: "8"}}
	f.wrote(o)
	f.wrote(other)
	now = now.Add(Remember + time.Second)
	f.wrote(other) // prunes
	if f.size() != 1 {
		t.Errorf("%d objects remembered, want 1 (the old write of the other pruned)", f.size())
	}
}

// versions are one Service (UID u) at each of the resource versions rvs.
func versions(rvs ...string) []*corev1.Service {
	out := make([]*corev1.Service, len(rvs))
	for i, rv := range rvs {
		out[i] = &corev1.Service{ObjectMeta: metav1.ObjectMeta{UID: "u", ResourceVersion: rv}}
	}
	return out
}

// wrote remembers o's version, as a write of f's client does.
func (f *Filter) wrote(o client.Object) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.wroteLocked(o)
}

// size is how many objects f remembers versions of.
func (f *Filter) size() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.m)
}

// During a tracked reconcile's write, the object's events are held: the
// write's own echo, even when it comes before the response, is dropped;
// another writer's event is reported to the reconcile, which requeues.
func TestFilterHoldsEventsDuringWrites(t *testing.T) {
	var f Filter
	p := f.Predicate()
	var during func(o client.Object) // an event the API server sends while the write is under way
	api := fake.NewClientBuilder().WithScheme(ctrltest.Scheme(t)).WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.CreateOption) error {
			err := c.Create(ctx, o, opts...)
			during(o)
			return err
		},
		Update: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.UpdateOption) error {
			err := c.Update(ctx, o, opts...)
			during(o)
			return err
		},
	}).Build()
	c := f.Client(api)

	// The creation's echo comes before the response: held, then dropped.
	ctx, missed := Track(context.Background())
	var passed []string
	during = func(o client.Object) {
		if p.Create(event.CreateEvent{Object: o.DeepCopyObject().(client.Object)}) {
			passed = append(passed, "create "+o.GetResourceVersion())
		}
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "u1"}}
	if err := c.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	if res, _ := missed.Requeue(reconcile.Result{}, nil); len(passed) != 0 || res.RequeueAfter != 0 {
		t.Errorf("the early echo of a create: passed %v, requeue %v; want dropped, no requeue", passed, res.RequeueAfter)
	}

	// Another writer's change comes while an update is under way: held,
	// and the reconcile told to look again.
	ctx, missed = Track(context.Background())
	during = func(o client.Object) {
		other := o.DeepCopyObject().(client.Object)
		other.SetResourceVersion("999")
		if p.Update(event.UpdateEvent{ObjectOld: other, ObjectNew: other}) {
			passed = append(passed, "update 999")
		}
	}
	svc.Labels = map[string]string{"a": "b"}
	if err := c.Update(ctx, svc); err != nil {
		t.Fatal(err)
	}
	if res, _ := missed.Requeue(reconcile.Result{}, nil); len(passed) != 0 || res.RequeueAfter != Recheck {
		t.Errorf("another writer's event during an update: passed %v, requeue %v; want held, requeue after %v", passed, res.RequeueAfter, Recheck)
	}

	// An untracked write holds nothing: its early echo passes.
	during = func(o client.Object) {
		if p.Update(event.UpdateEvent{ObjectOld: o, ObjectNew: o.DeepCopyObject().(client.Object)}) {
			passed = append(passed, "update "+o.GetResourceVersion())
		}
	}
	svc.Labels = map[string]string{"a": "c"}
	if err := c.Update(context.Background(), svc); err != nil {
		t.Fatal(err)
	}
	if len(passed) != 1 {
		t.Errorf("an untracked write's early echo: passed %v, want it passed", passed)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.inflight) != 0 || len(f.held) != 0 {
		t.Errorf("writes still under way after they returned: %v, held %v", f.inflight, f.held)
	}
}

// Behind: an object the cache shows at another version than a remembered
// write of it is behind that write, until the write's event came.
func TestFilterTellsACacheBehindItsWrites(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	f := Filter{now: func() time.Time { return now }}
	written := &corev1.Service{ObjectMeta: metav1.ObjectMeta{UID: "u", ResourceVersion: "5"}}
	cached := written.DeepCopy()
	cached.ResourceVersion = "4"
	if f.Behind(context.Background(), cached) {
		t.Error("behind a write never made")
	}
	f.wrote(written)
	if !f.Behind(context.Background(), cached) {
		t.Error("the cache at version 4 is not behind the write at 5")
	}
	if f.Behind(context.Background(), written) {
		t.Error("the cache at the written version is behind")
	}
	// The event of the write a reconcile found the cache behind passes
	// (TestFilterLetsTheAwaitedWriteThrough).
	if f.echo(written) || f.Behind(context.Background(), cached) {
		t.Error("still behind once the write's event came, or that event was dropped")
	}
	// Two writes, the first one's event not delivered yet: a cache at the
	// first is behind the second.
	f.wrote(written)
	second := written.DeepCopy()
	second.ResourceVersion = "6"
	f.wrote(second)
	if !f.Behind(context.Background(), written) {
		t.Error("the cache at the first of two writes is not behind the second")
	}
	if f.Behind(context.Background(), second) {
		t.Error("the cache at the last write is behind")
	}
	if !f.echo(written) || !f.Behind(context.Background(), written) || f.echo(second) || f.Behind(context.Background(), second) {
		t.Error("the events of the two writes, in order, do not bring the cache level")
	}
	f.wrote(written)
	now = now.Add(Remember + time.Second)
	if f.Behind(context.Background(), cached) {
		t.Error("behind a write older than Remember (its event never came)")
	}
}

// A reconcile that found its cache behind its last write of an object is
// brought back by that write's event, which an echo filter would otherwise
// drop; the events of earlier writes, and of writes no one awaits, are
// still dropped.
func TestFilterLetsTheAwaitedWriteThrough(t *testing.T) {
	f := Filter{}
	v := versions("5", "6", "7")
	first, second, third := v[0], v[1], v[2]
	f.wrote(first)
	f.wrote(second)
	if !f.Behind(context.Background(), first) {
		t.Fatal("the cache at the first of two writes is not behind the second")
	}
	if !f.echo(first) {
		t.Error("the event of the first write passed: the cache is still behind")
	}
	if f.echo(second) {
		t.Error("the event of the awaited write was dropped: nothing brings the reconcile back")
	}
	f.wrote(third)
	if !f.echo(third) {
		t.Error("the event of a write no reconcile awaits passed")
	}

	// The same when the awaited write's event comes while the object is
	// written again: the reconcile is told (Missed) rather than the event
	// passed.
	f = Filter{}
	f.wrote(first)
	f.wrote(second)
	if !f.Behind(context.Background(), first) {
		t.Fatal("not behind")
	}
	ctx, missed := Track(context.Background())
	_ = f.write(ctx, third, func() error {
		if f.Predicate().Update(event.UpdateEvent{ObjectOld: first, ObjectNew: second}) {
			t.Error("an event during the write passed instead of being held")
		}
		return nil
	})
	if res, _ := missed.Requeue(reconcile.Result{}, nil); res.RequeueAfter != Recheck {
		t.Errorf("requeue after %v, want %v: the held event of the awaited write was taken for an echo", res.RequeueAfter, Recheck)
	}
}

// A wait (Behind) whose write's event comes only after Remember is
// forgotten with that event: it does not let the echo of a later write of
// the object, which no reconcile awaits, pass.
func TestFilterForgetsAWaitWhoseEventCameLate(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	f := Filter{now: func() time.Time { return now }}
	at := func(d time.Duration) { now = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).Add(d) }
	other := &corev1.Service{ObjectMeta: metav1.ObjectMeta{UID: "v", ResourceVersion: "1"}}
	f.wrote(other) // the first write prunes
	at(5 * time.Second)
	written := &corev1.Service{ObjectMeta: metav1.ObjectMeta{UID: "u", ResourceVersion: "5"}}
	cached := written.DeepCopy()
	cached.ResourceVersion = "4"
	f.wrote(written)
	if !f.Behind(context.Background(), cached) {
		t.Fatal("the cache at version 4 is not behind the write at 5")
	}
	// Another object's write prunes while the awaited write is still
	// remembered, so that the next prune is Remember away.
	at(11 * time.Second)
	f.wrote(other)
	at(16 * time.Second)
	if f.echo(written) {
		t.Error("the event of a write older than Remember was dropped")
	}
	at(17 * time.Second)
	later := written.DeepCopy()
	later.ResourceVersion = "6"
	f.wrote(later)
	if !f.echo(later) {
		t.Error("the echo of a write no reconcile awaits passed: the late event left its wait behind")
	}
}

// A reconcile that read an object from its cache before the event of this
// controller's last write of it came, the event coming while the reconcile
// ran, is behind too: that event was dropped, so the reconcile is told to
// look again (Missed). One that began after the event is not, nor is one
// that read the object at the written version.
func TestFilterTellsAReadBeforeTheEventCame(t *testing.T) {
	f := Filter{}
	v := versions("4", "5", "6")
	cached, written, newer := v[0], v[1], v[2]
	f.wrote(written)
	// The reconcile begins and reads the object at 4; then the write's
	// event comes and is dropped.
	ctx, missed := Track(context.Background())
	if !f.echo(written) {
		t.Fatal("the event of the write passed")
	}
	if f.Behind(ctx, written) {
		t.Error("behind at the written version")
	}
	if !f.Behind(ctx, cached) {
		t.Error("not behind at version 4, read before the event of the write at 5 came")
	}
	if res, _ := missed.Requeue(reconcile.Result{}, nil); res.RequeueAfter != Recheck {
		t.Errorf("requeue after %v, want %v", res.RequeueAfter, Recheck)
	}
	// A reconcile that began after the event: the cache it reads shows the
	// write, or another writer's later version.
	later, laterMissed := Track(context.Background())
	if f.Behind(later, written) || f.Behind(later, newer) {
		t.Error("behind in a reconcile that began after the event came")
	}
	if res, _ := laterMissed.Requeue(reconcile.Result{}, nil); res.RequeueAfter != 0 {
		t.Errorf("a reconcile that began after the event requeues after %v", res.RequeueAfter)
	}
	// Without Track, Behind cannot tell when the object was read.
	if f.Behind(context.Background(), cached) {
		t.Error("behind in an untracked context")
	}
}
