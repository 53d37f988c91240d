package echo

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"
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

// size is how many objects f remembers versions of.
func (f *Filter) size() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.m)
}
