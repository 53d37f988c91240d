package clusterset

import (
	"slices"
	"testing"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

// TestHasSyncedFor: which namespaces the View holds in full, step by step,
// and the Namespace changes that tell of those it comes to hold.
func TestHasSyncedFor(t *testing.T) {
	v := NewScopedView()
	var told []string
	v.Subscribe(func(c Change) {
		if c.Namespace != "" {
			told = append(told, c.Namespace)
		}
	})
	steps := []struct {
		name   string
		update *registry.Update
		held   string // namespaces among a, b, c held in full, in order
		told   []string
	}{
		{name: "before the first read", held: ""},
		{name: "a scoped full read of a", update: &registry.Update{Full: true, Scoped: true, Namespaces: []string{"a"}}, held: "a"},
		{name: "an update that completes no namespace", update: &registry.Update{Scoped: true}, held: "a"},
		{name: "b loaded", update: &registry.Update{Scoped: true, Namespaces: []string{"b"}}, held: "ab", told: []string{"b"}},
		{name: "b loaded again: no news", update: &registry.Update{Scoped: true, Namespaces: []string{"b"}}, held: "ab"},
		{name: "a scoped full read again, with c", update: &registry.Update{Full: true, Scoped: true, Namespaces: []string{"a", "b", "c"}}, held: "abc", told: []string{"c"}},
		{name: "an unscoped full read holds every namespace", update: &registry.Update{Full: true}, held: "abc"},
	}
	for _, s := range steps {
		told = nil
		if s.update != nil {
			v.OnUpdate(*s.update)
		}
		held := ""
		for _, ns := range []string{"a", "b", "c"} {
			if v.HasSyncedFor(ns) {
				held += ns
			}
		}
		if held != s.held || !slices.Equal(told, s.told) {
			t.Errorf("%s: holds %q in full and told %q, want %q and %q", s.name, held, told, s.held, s.told)
		}
	}
	if !v.HasSyncedFor("anything") {
		t.Errorf("after an unscoped full read, HasSyncedFor(anything) = false")
	}
}

// TestScopedViewNeeds: Need grows the set a backend reads (Namespaces) and
// signals it, once however often it grew before it was taken in; needing a
// namespace again is no growth.
func TestScopedViewNeeds(t *testing.T) {
	v := NewScopedView()
	v.Need("a", "")
	v.Need("b")
	select {
	case <-v.NamespacesGrew():
	default:
		t.Fatal("no signal after the set grew")
	}
	select {
	case <-v.NamespacesGrew():
		t.Fatal("a second signal for growth already signalled")
	default:
	}
	v.Need("a")
	select {
	case <-v.NamespacesGrew():
		t.Fatal("a signal for a namespace needed already")
	default:
	}
	got := v.Namespaces()
	if len(got) != 2 || !got["a"] || !got["b"] {
		t.Fatalf("Namespaces() = %v, want a and b", got)
	}
	got["c"] = true // a copy: the View's set is its own
	if v.Namespaces()["c"] {
		t.Fatal("Namespaces() returned the View's own set")
	}
}
