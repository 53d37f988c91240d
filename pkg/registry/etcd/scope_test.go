package etcd_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/registrytest"
)

// held lists the records v holds as "kind/cluster/namespace/name", sorted.
func held(v *registrytest.View) string {
	var out []string
	for id := range v.Exports {
		out = append(out, fmt.Sprintf("export/%s/%s", id.Cluster, id.Service))
	}
	for id := range v.Endpoints {
		out = append(out, fmt.Sprintf("endpoints/%s/%s", id.Cluster, id.Service))
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

// TestScopedWatch: a handler that needs some namespaces (registry.Scoped)
// is delivered their records alone, and the own cluster's whatever their
// namespace; a namespace it comes to need is delivered whole, with the
// changes made to it meanwhile, and said complete (Update.Namespaces).
func TestScopedWatch(t *testing.T) {
	srv, _ := startWithClient(t)
	url := srv.ClientURL()
	a := open(t, url, registry.Identity{ClusterSet: "set1", Cluster: "a"})
	c := open(t, url, registry.Identity{ClusterSet: "set1", Cluster: "c"})
	in := registry.ServiceKey{Namespace: "in", Name: "web"}
	out := registry.ServiceKey{Namespace: "out", Name: "web"}
	gone := registry.ServiceKey{Namespace: "out", Name: "gone"}
	own := registry.ServiceKey{Namespace: "elsewhere", Name: "own"}
	for _, key := range []registry.ServiceKey{in, out, gone} {
		must(t, a.PutExport(t.Context(), key, spec))
		must(t, a.PutEndpoints(t.Context(), key, groups))
	}
	must(t, c.PutExport(t.Context(), own, spec))

	r := registrytest.StartScopedWatch(t, c, "in", "empty")
	first := r.Next(t, 10*time.Second)
	if u := first.Update; u == nil || !u.Full || !u.Scoped || !slices.Equal(u.Namespaces, []string{"empty", "in"}) {
		t.Fatalf("first call %s, want a full scoped update of namespaces [empty in]", first)
	}
	if got, want := held(r.View()), "endpoints/a/in/web export/a/in/web export/c/elsewhere/own"; got != want {
		t.Fatalf("first read holds %q, want %q", got, want)
	}

	// Changes in a namespace not needed deliver nothing; in one needed,
	// they do.
	must(t, a.PutExport(t.Context(), out, spec2))
	must(t, a.DeleteExport(t.Context(), gone))
	must(t, a.PutExport(t.Context(), in, spec2))
	r.WaitFor(t, 10*time.Second, "the change in namespace in", func(e registrytest.Event, v *registrytest.View) bool {
		if u := e.Update; u != nil && (len(u.Namespaces) > 0 || strings.Contains(held(v), "/out/")) {
			t.Fatalf("delivered %s before namespace out was needed", e)
		}
		return v.Exports[registry.RecordID{Cluster: "a", Service: in}].Spec.Ports[0].Port == 81
	})

	// Needed now: delivered whole, as it is now, in one update.
	r.Need("out")
	e := r.WaitFor(t, 10*time.Second, "namespace out", func(e registrytest.Event, _ *registrytest.View) bool {
		return e.Update != nil && len(e.Update.Namespaces) > 0
	})
	if u := e[len(e)-1].Update; u.Full || !u.Scoped || !slices.Equal(u.Namespaces, []string{"out"}) {
		t.Fatalf("namespace out came as %+v, want an incremental scoped update of [out]", *u)
	}
	want := "endpoints/a/in/web endpoints/a/out/web export/a/in/web export/a/out/web export/c/elsewhere/own"
	if got := held(r.View()); got != want {
		t.Fatalf("after namespace out was needed, holds %q, want %q", got, want)
	}
	if got := r.View().Exports[registry.RecordID{Cluster: "a", Service: out}].Spec.Ports[0].Port; got != 81 {
		t.Fatalf("out/web's export has port %d, want its last value 81", got)
	}
	if got := r.View().Endpoints[registry.RecordID{Cluster: "a", Service: out}].Groups; len(got) != 1 {
		t.Fatalf("out/web's endpoints hold %d groups, want 1", len(got))
	}

	// From now on its changes come as they happen.
	must(t, a.DeleteExport(t.Context(), out))
	r.WaitFor(t, 10*time.Second, "out/web withdrawn", func(_ registrytest.Event, v *registrytest.View) bool {
		_, ok := v.Exports[registry.RecordID{Cluster: "a", Service: out}]
		return !ok
	})
	r.Need("out", "in") // nothing new: nothing delivered
	r.Quiet(t, 300*time.Millisecond, "needing what was needed already", func(e registrytest.Event) bool {
		return e.Update != nil && len(e.Update.Namespaces) > 0
	})
}

// TestUnscopedWatch: a handler that is not registry.Scoped is delivered
// every namespace, and the updates say nothing of namespaces.
func TestUnscopedWatch(t *testing.T) {
	srv, _ := startWithClient(t)
	a := open(t, srv.ClientURL(), registry.Identity{ClusterSet: "set1", Cluster: "a"})
	must(t, a.PutExport(t.Context(), web, spec))
	r := registrytest.StartWatch(t, a)
	first := r.Next(t, 10*time.Second)
	if u := first.Update; u == nil || !u.Full || u.Scoped || u.Namespaces != nil || len(u.Exports) != 1 {
		t.Fatalf("first call %s, want a full unscoped update with the export", first)
	}
}
