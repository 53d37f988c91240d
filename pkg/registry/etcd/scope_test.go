package etcd_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/etcd"
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

// publish puts an export and endpoints of each Service of keys in b.
func publish(t *testing.T, b *etcd.Backend, keys ...registry.ServiceKey) {
	t.Helper()
	for _, key := range keys {
		must(t, b.PutExport(t.Context(), key, spec))
		must(t, b.PutEndpoints(t.Context(), key, groups))
	}
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
	publish(t, a, in, out, gone)
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

// scopedReader starts a scoped watch of cluster set1 that needs
// namespaces, through a client that records what it reads.
func scopedReader(t *testing.T, url string, healthInterval time.Duration, namespaces ...string) (*registrytest.ScopedRecorder, *recordingKV, *clientv3.Client) {
	t.Helper()
	cli := client(t, url)
	kv := &recordingKV{KV: cli.KV}
	cli.KV = kv
	w, err := etcd.NewWatcherFromClient(t.Context(), cli, etcd.Options{Identity: registry.Identity{ClusterSet: "set1", Cluster: "reader"},
		Prefix: prefix, ResyncPageSize: 2, HealthInterval: healthInterval})
	must(t, err)
	t.Cleanup(func() { _ = w.Close() })
	return registrytest.StartScopedWatch(t, w, namespaces...), kv, cli
}

// valuesOf lists the keys of namespace ns among keys, sorted.
func valuesOf(keys []string, ns string) []string {
	var out []string
	for _, key := range keys {
		if strings.Contains(key, "/"+ns+"/") {
			out = append(out, key)
		}
	}
	slices.Sort(out)
	return out
}

// TestScopedReadReadsNeededValues: a scoped watch receives the values of
// the records it delivers alone: its first read lists the other keys
// without values, and a namespace needed later has the values of its
// records read then, as they are by then.
func TestScopedReadReadsNeededValues(t *testing.T) {
	t.Parallel()
	srv, _ := startWithClient(t)
	a := open(t, srv.ClientURL(), registry.Identity{ClusterSet: "set1", Cluster: "a"})
	in := registry.ServiceKey{Namespace: "in", Name: "web"}
	out := registry.ServiceKey{Namespace: "out", Name: "web"}
	out2 := registry.ServiceKey{Namespace: "out", Name: "api"}
	publish(t, a, in, out, out2)

	r, kv, _ := scopedReader(t, srv.ClientURL(), 0, "in")
	r.WaitFor(t, 10*time.Second, "namespace in", func(_ registrytest.Event, v *registrytest.View) bool {
		return len(v.Exports) == 1 && len(v.Endpoints) == 1
	})
	read := kv.valuesRead()
	if got := valuesOf(read, "out"); len(got) > 0 {
		t.Errorf("the first read received the values of %v, of a namespace not needed", got)
	}
	if got := valuesOf(read, "in"); len(got) != 2 {
		t.Errorf("the first read received the values of %v in namespace in, want its 2 records'", got)
	}

	must(t, a.PutExport(t.Context(), out, spec2)) // while not needed
	r.Need("out")
	r.WaitFor(t, 10*time.Second, "namespace out, as it is now", func(_ registrytest.Event, v *registrytest.View) bool {
		e, ok := v.Exports[registry.RecordID{Cluster: "a", Service: out}]
		_, api := v.Endpoints[registry.RecordID{Cluster: "a", Service: out2}]
		return ok && e.Spec.Ports[0].Port == 81 && api && len(v.Exports) == 3 && len(v.Endpoints) == 3
	})
	if got := valuesOf(kv.valuesRead(), "out"); len(got) != 4 {
		t.Errorf("namespace out needed: received the values of %v, want its 4 records'", got)
	}
}

// TestScopedReadOfEveryNamespaceReadsOnce: a scoped watch that needs the
// values of most keys of its first page (a cluster that has every
// namespace) reads the rest of the clusterset with values, in plain pages,
// rather than listing every key and reading the values again; one that
// needs few lists the keys alone. Either way the handler gets every record
// it needs, each value received once.
func TestScopedReadOfEveryNamespaceReadsOnce(t *testing.T) {
	t.Parallel()
	srv, _ := startWithClient(t)
	a := open(t, srv.ClientURL(), registry.Identity{ClusterSet: "set1", Cluster: "a"})
	var keys []registry.ServiceKey
	for i := range 15 {
		keys = append(keys, registry.ServiceKey{Namespace: []string{"in", "out"}[i%2], Name: fmt.Sprintf("web-%02d", i)})
	}
	publish(t, a, append(keys, registry.ServiceKey{Namespace: "few", Name: "web"})...)

	for _, tc := range []struct {
		name       string
		namespaces []string
		records    int  // exports and endpoints the handler gets
		values     bool // the pages after the first carry values
	}{
		{"every namespace", []string{"few", "in", "out"}, 32, true},
		{"a namespace of one Service", []string{"few"}, 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, kv, _ := scopedReader(t, srv.ClientURL(), 0, tc.namespaces...)
			r.WaitFor(t, 10*time.Second, "every record needed", func(_ registrytest.Event, v *registrytest.View) bool {
				return len(v.Exports)+len(v.Endpoints) == tc.records
			})
			// The clusterset is 33 keys (an alive record, 16 exports, 16
			// endpoints); the reader's pages hold 2 records or 20 keys.
			keysOnly, withValues := pagesRead(kv)
			if tc.values && (keysOnly != 1 || withValues != 7) {
				t.Errorf("read %d pages of keys and %d of values, want the first page of keys (20) and the 13 keys after it in 7 pages of values", keysOnly, withValues)
			}
			if !tc.values && (keysOnly != 2 || withValues != 0) {
				t.Errorf("read %d pages of keys and %d of values, want the 33 keys in 2 pages of keys", keysOnly, withValues)
			}
			read := kv.valuesRead()
			if dup := len(read) - len(slices.Compact(slices.Sorted(slices.Values(read)))); dup > 0 {
				t.Errorf("%d values received twice: %v", dup, read)
			}
		})
	}
}

// pagesRead counts the ranges kv read, keys alone or with values (not the
// reads of one key, nor counts).
func pagesRead(kv *recordingKV) (keysOnly, withValues int) {
	for _, rd := range kv.snapshot() {
		switch {
		case rd.oneKey || rd.countOnly:
		case rd.keysOnly:
			keysOnly++
		default:
			withValues++
		}
	}
	return keysOnly, withValues
}

// TestScopedReadCountsOtherClusters: the first page decides by the other
// clusters' records alone. A cluster whose own records come first and
// fill the page (needed whatever the namespaces) still lists the rest,
// keys alone; and records not needed, read with values because the page
// called for it, are held as keys and loaded once needed, as they are
// then.
func TestScopedReadCountsOtherClusters(t *testing.T) {
	t.Parallel()
	services := func(ns string, n int) []registry.ServiceKey {
		var keys []registry.ServiceKey
		for i := range n {
			keys = append(keys, registry.ServiceKey{Namespace: ns, Name: fmt.Sprintf("web-%02d", i)})
		}
		return keys
	}
	size := func(v *registrytest.View) int { return len(v.Exports) + len(v.Endpoints) }

	t.Run("own records first", func(t *testing.T) {
		srv, _ := startWithClient(t)
		// "reader" is the scoped reader's own cluster: its 21 keys come
		// first, and fill the first page (20 keys).
		publish(t, open(t, srv.ClientURL(), registry.Identity{ClusterSet: "set1", Cluster: "reader"}), services("in", 10)...)
		publish(t, open(t, srv.ClientURL(), registry.Identity{ClusterSet: "set1", Cluster: "zz"}), services("out", 20)...)
		r, kv, _ := scopedReader(t, srv.ClientURL(), 0, "in")
		r.WaitFor(t, 10*time.Second, "namespace in", func(_ registrytest.Event, v *registrytest.View) bool { return size(v) == 20 })
		if got := valuesOf(kv.valuesRead(), "out"); len(got) > 0 {
			t.Errorf("received the values of %d records of namespace out, not needed", len(got))
		}
		if k, v := pagesRead(kv); v != 0 {
			t.Errorf("read %d pages of keys and %d of values, want keys alone", k, v)
		}
		r.Need("out")
		r.WaitFor(t, 10*time.Second, "namespace out", func(_ registrytest.Event, v *registrytest.View) bool { return size(v) == 60 })
	})

	t.Run("read with values, loaded later", func(t *testing.T) {
		srv, _ := startWithClient(t)
		in := services("in", 15)
		few := services("few", 5)
		publish(t, open(t, srv.ClientURL(), registry.Identity{ClusterSet: "set1", Cluster: "a"}), in...)
		b := open(t, srv.ClientURL(), registry.Identity{ClusterSet: "set1", Cluster: "b"})
		publish(t, b, append(few, in[0])...)
		r, kv, _ := scopedReader(t, srv.ClientURL(), 0, "in")
		r.WaitFor(t, 10*time.Second, "namespace in", func(_ registrytest.Event, v *registrytest.View) bool { return size(v) == 32 })
		if _, v := pagesRead(kv); v == 0 {
			t.Fatal("no page read with values: the first page, all of namespace in, called for them")
		}
		if got := held(r.View()); strings.Contains(got, "/few/") {
			t.Errorf("delivered records of namespace few, not needed: %s", got)
		}
		must(t, b.PutExport(t.Context(), few[0], spec2))
		r.Need("few")
		r.WaitFor(t, 10*time.Second, "namespace few, as it is now", func(_ registrytest.Event, v *registrytest.View) bool {
			e, ok := v.Exports[registry.RecordID{Cluster: "b", Service: few[0]}]
			return ok && e.Spec.Ports[0].Port == 81 && size(v) == 42
		})
	})
}

// TestScopedLoadAfterCompaction: a namespace needed once etcd compacted
// past the revision the watch has reached is read at a later one: the
// watch reads what changed, then the namespace.
func TestScopedLoadAfterCompaction(t *testing.T) {
	t.Parallel()
	srv, _ := startWithClient(t)
	a := open(t, srv.ClientURL(), registry.Identity{ClusterSet: "set1", Cluster: "a"})
	out := registry.ServiceKey{Namespace: "out", Name: "web"}
	must(t, a.PutExport(t.Context(), web, spec))
	must(t, a.PutExport(t.Context(), out, spec))

	// No health check moves the watch's revision on meanwhile.
	r, kv, cli := scopedReader(t, srv.ClientURL(), time.Minute, web.Namespace)
	r.WaitFor(t, 10*time.Second, "the first read", func(_ registrytest.Event, v *registrytest.View) bool { return len(v.Exports) == 1 })
	compactAll(t, cli) // a change elsewhere, then a compaction at its revision
	before := len(kv.snapshot())
	r.Need("out")
	r.WaitFor(t, 10*time.Second, "namespace out", func(_ registrytest.Event, v *registrytest.View) bool { return len(v.Exports) == 2 })
	counted := false
	for _, rd := range kv.snapshot()[before:] {
		counted = counted || (rd.countOnly && !rd.oneKey)
	}
	if !counted {
		t.Errorf("namespace out was read without the watch reading what changed first: the revision it reached was not compacted?")
	}
}

// TestScopedLoadFailureReported: a namespace whose records cannot be read
// while the rest of the registry can is reported as the registry being
// unreadable once that lasted UnreachableAfter, and the watch does not say
// it reachable while that lasts; once the read succeeds, the namespace
// comes and the registry is reachable again.
func TestScopedLoadFailureReported(t *testing.T) {
	t.Parallel()
	srv, _ := startWithClient(t)
	a := open(t, srv.ClientURL(), registry.Identity{ClusterSet: "set1", Cluster: "a"})
	out := registry.ServiceKey{Namespace: "out", Name: "web"}
	publish(t, a, web, out)

	cli := client(t, srv.ClientURL())
	kv := &recordingKV{KV: cli.KV}
	cli.KV = kv
	w, err := etcd.NewWatcherFromClient(t.Context(), cli, etcd.Options{Identity: registry.Identity{ClusterSet: "set1", Cluster: "reader"},
		Prefix: prefix, HealthInterval: 200 * time.Millisecond, UnreachableAfter: 600 * time.Millisecond})
	must(t, err)
	t.Cleanup(func() { _ = w.Close() })
	r := registrytest.StartScopedWatch(t, w, web.Namespace)
	r.WaitFor(t, 10*time.Second, "the first read, then the registry said reachable", func(e registrytest.Event, v *registrytest.View) bool {
		return len(v.Exports) == 1 && e.Update == nil && e.Connected
	})

	kv.refuse.Store(true)
	r.Need(out.Namespace)
	events := r.WaitFor(t, 20*time.Second, "the registry reported unreachable", func(e registrytest.Event, _ *registrytest.View) bool {
		return e.Update == nil && !e.Connected
	})
	if last := events[len(events)-1]; !strings.Contains(fmt.Sprint(last.Err), "too many operations") {
		t.Errorf("reported %v, want the read's error", last.Err)
	}
	// The retries read what changed, successfully, and fail to load: the
	// registry is not said reachable in between.
	r.Quiet(t, 2*time.Second, "the watch said the registry reachable while namespace out could not be read", func(e registrytest.Event) bool {
		return e.Update == nil && e.Connected
	})

	kv.refuse.Store(false)
	r.WaitFor(t, 20*time.Second, "namespace out, and the registry reachable", func(_ registrytest.Event, v *registrytest.View) bool {
		return len(v.Exports) == 2 && v.Connected
	})
}
