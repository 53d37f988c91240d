package etcd_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/etcd"
	"github.com/mcsd-io/mcsd/pkg/registry/registrytest"
)

// rangeRead is one Get a watcher made.
type rangeRead struct {
	countOnly bool
	oneKey    bool  // no range end: a single key
	rev       int64 // the revision asked for (0: the latest)
	keys      int   // keys returned
	more      bool
	readAt    int64 // the response's revision
}

// recordingKV records the Gets that pass through it.
type recordingKV struct {
	clientv3.KV
	mu    sync.Mutex
	reads []rangeRead
}

func (k *recordingKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	resp, err := k.KV.Get(ctx, key, opts...)
	if err == nil {
		op := clientv3.OpGet(key, opts...)
		k.mu.Lock()
		k.reads = append(k.reads, rangeRead{countOnly: op.IsCountOnly(), oneKey: len(op.RangeBytes()) == 0, rev: op.Rev(), keys: len(resp.Kvs), more: resp.More, readAt: resp.Header.Revision})
		k.mu.Unlock()
	}
	return resp, err
}

func (k *recordingKV) snapshot() []rangeRead {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]rangeRead(nil), k.reads...)
}

// A full read of the clusterset comes in pages of ResyncPageSize keys, all
// at the revision of the first, and delivers every record; the idle health
// check reads one key, whatever the registry holds.
func TestResyncReadsInPages(t *testing.T) {
	t.Parallel()
	srv := startServer(t, filepath.Join(t.TempDir(), "etcd"), "")
	a := open(t, srv.ClientURL(), registry.Identity{ClusterSet: "set1", Cluster: "a"})
	const services = 10
	for i := range services {
		must(t, a.PutExport(t.Context(), registry.ServiceKey{Namespace: "shop", Name: fmt.Sprintf("web-%d", i)}, spec))
	}

	cli := client(t, srv.ClientURL())
	kv := &recordingKV{KV: cli.KV}
	cli.KV = kv
	ctx := logr.NewContext(t.Context(), testr.NewWithOptions(t, testr.Options{Verbosity: 1}))
	w, err := etcd.NewWatcherFromClient(ctx, cli, etcd.Options{Identity: registry.Identity{ClusterSet: "set1", Cluster: "reader"},
		Prefix: prefix, ResyncPageSize: 3, HealthInterval: 200 * time.Millisecond})
	must(t, err)
	t.Cleanup(func() { _ = w.Close() })
	rec := registrytest.StartWatch(t, w)
	rec.WaitFor(t, 10*time.Second, "every export", func(_ registrytest.Event, v *registrytest.View) bool {
		return len(v.Exports) == services
	})

	var pages []rangeRead
	for _, r := range kv.snapshot() {
		if !r.countOnly {
			pages = append(pages, r)
		}
	}
	// alive + 10 exports: 11 keys, pages of 3.
	if len(pages) < 4 {
		t.Fatalf("the full read took %d reads (%+v), want pages of 3 keys", len(pages), pages)
	}
	total := 0
	for i, p := range pages[:4] {
		total += p.keys
		if p.keys > 3 {
			t.Errorf("page %d returned %d keys, more than ResyncPageSize", i, p.keys)
		}
		if i > 0 && p.rev != pages[0].readAt {
			t.Errorf("page %d read at revision %d, not the first page's %d", i, p.rev, pages[0].readAt)
		}
		if want := i < 3; p.more != want {
			t.Errorf("page %d: more = %v, want %v", i, p.more, want)
		}
	}
	if total != services+1 {
		t.Errorf("the pages held %d keys, want %d", total, services+1)
	}

	// Idle: health checks only, each a count of one key.
	before := len(kv.snapshot())
	poll.Until(t, 10*time.Second, "three health checks", func() (bool, string) {
		n := len(kv.snapshot()) - before
		return n >= 3, fmt.Sprintf("%d reads", n)
	})
	for _, r := range kv.snapshot()[before:] {
		if !r.countOnly || !r.oneKey {
			t.Errorf("an idle watcher read %+v; want count-only health checks of one key", r)
		}
	}
}

// An outage shorter than UnreachableAfter is not reported: the watch reads
// the clusterset again when etcd is back, and no OnConnection(false) is
// delivered, so no import writes a condition it then clears.
func TestShortOutageIsNotReported(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "etcd")
	srv := startServer(t, dir, "")
	url := srv.ClientURL()
	opts := func(o *etcd.Options) {
		o.HealthInterval = 300 * time.Millisecond
		o.RequestTimeout = time.Second
		o.UnreachableAfter = 30 * time.Second
	}
	a := open(t, url, registry.Identity{ClusterSet: "set1", Cluster: "a"}, opts)
	b := open(t, url, registry.Identity{ClusterSet: "set1", Cluster: "b"}, opts)
	must(t, a.PutExport(t.Context(), web, spec))
	rec := registrytest.StartWatch(t, b)
	id := registry.RecordID{Cluster: "a", Service: web}
	rec.WaitFor(t, 10*time.Second, "a's export", func(_ registrytest.Event, v *registrytest.View) bool {
		_, ok := v.Exports[id]
		return ok
	})

	srv.Close()
	startServer(t, dir, url)
	var full bool
	events := rec.WaitFor(t, 30*time.Second, "a full read after the restart", func(e registrytest.Event, _ *registrytest.View) bool {
		full = full || (e.Update != nil && e.Update.Full)
		return full
	})
	must(t, a.PutExport(t.Context(), web, spec2))
	events = append(events, rec.WaitFor(t, 10*time.Second, "a's change after the restart", func(_ registrytest.Event, v *registrytest.View) bool {
		return cmp.Equal(v.Exports[id].Spec, spec2)
	})...)
	for _, e := range events {
		if e.Update == nil && !e.Connected {
			t.Errorf("a restart shorter than UnreachableAfter was reported: %s", e)
		}
	}
}
