package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/etcd"
	"github.com/mcsd-io/mcsd/pkg/registry/etcd/embedded"
	"github.com/mcsd-io/mcsd/pkg/registry/registrytest"
)

// rangeRead is one Get a watcher made.
type rangeRead struct {
	key, end  string // the range read
	countOnly bool
	keysOnly  bool
	minModRev int64
	oneKey    bool  // no range end: a single key
	rev       int64 // the revision asked for (0: the latest)
	keys      int   // keys returned
	more      bool
	readAt    int64 // the response's revision
}

// recordingKV records the Gets that pass through it, and the keys whose
// values its Gets and transactions received. While refuse is set, it
// refuses every transaction, as an etcd whose --max-txn-ops is below a
// read's ranges would.
type recordingKV struct {
	clientv3.KV
	mu     sync.Mutex
	reads  []rangeRead
	values []string
	refuse atomic.Bool
}

func (k *recordingKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	resp, err := k.KV.Get(ctx, key, opts...)
	if err == nil {
		op := clientv3.OpGet(key, opts...)
		k.mu.Lock()
		k.reads = append(k.reads, rangeRead{key: key, end: string(op.RangeBytes()), countOnly: op.IsCountOnly(), keysOnly: op.IsKeysOnly(), minModRev: op.MinModRev(), oneKey: len(op.RangeBytes()) == 0, rev: op.Rev(), keys: len(resp.Kvs), more: resp.More, readAt: resp.Header.Revision})
		k.mu.Unlock()
		k.received(resp.Kvs)
	}
	return resp, err
}

func (k *recordingKV) Txn(ctx context.Context) clientv3.Txn {
	return &recordingTxn{Txn: k.KV.Txn(ctx), kv: k}
}

// received records the keys of kvs that came with a value.
func (k *recordingKV) received(kvs []*mvccpb.KeyValue) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, kv := range kvs {
		if len(kv.Value) > 0 {
			k.values = append(k.values, string(kv.Key))
		}
	}
}

// valuesRead are the keys whose values were received so far.
func (k *recordingKV) valuesRead() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.values...)
}

// recordingTxn records the values its ranges received.
type recordingTxn struct {
	clientv3.Txn
	kv *recordingKV
}

func (t *recordingTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	t.Txn = t.Txn.Then(ops...)
	return t
}

func (t *recordingTxn) Commit() (*clientv3.TxnResponse, error) {
	if t.kv.refuse.Load() {
		return nil, errors.New("too many operations in txn request (refused by the test)")
	}
	resp, err := t.Txn.Commit()
	if err == nil {
		for _, r := range resp.Responses {
			if rr := r.GetResponseRange(); rr != nil {
				t.kv.received(rr.Kvs)
			}
		}
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
	opts := func(o *etcd.Options) {
		o.HealthInterval = 300 * time.Millisecond
		o.RequestTimeout = time.Second
		o.UnreachableAfter = 30 * time.Second
	}
	srv, restart, a, b := startRestartablePair(t, opts)
	must(t, a.PutExport(t.Context(), web, spec))
	rec, id := watchUntilExported(t, b)

	srv.Close()
	restart()
	mustEventually(t, "a's put after the restart", func() error { return a.PutExport(t.Context(), web, spec2) })
	events := rec.WaitFor(t, 30*time.Second, "a's change after the restart", func(_ registrytest.Event, v *registrytest.View) bool {
		return cmp.Equal(v.Exports[id].Spec, spec2)
	})
	for _, e := range events {
		if e.Update == nil && !e.Connected {
			t.Errorf("a restart shorter than UnreachableAfter was reported: %s", e)
		}
		if u := e.Update; u != nil && (u.Full || len(u.Endpoints) > 0 || len(u.DeletedExports) > 0 || len(u.DeletedEndpoints) > 0) {
			t.Errorf("a restart that changed one export delivered more: %s", e)
		}
	}
}

// deafWatcher passes etcd's watches on, and can make them deaf (their
// responses dropped, as a member cut off from the others leaves them) and
// then end them, as a leader change ends them (and, after compactAll, a
// compaction).
type deafWatcher struct {
	clientv3.Watcher
	mu      sync.Mutex
	deaf    bool
	cancels []context.CancelFunc
}

func (d *deafWatcher) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	ctx, cancel := context.WithCancel(ctx)
	d.mu.Lock()
	d.cancels = append(d.cancels, cancel)
	d.mu.Unlock()
	in := d.Watcher.Watch(ctx, key, opts...)
	out := make(chan clientv3.WatchResponse)
	go func() {
		defer close(out)
		for resp := range in {
			// A response read after end() (it arrived while deaf, and
			// this goroutine lagged) is dropped too: end() cancels ctx
			// before it makes the watcher hear again, under d.mu.
			d.mu.Lock()
			deaf := d.deaf || ctx.Err() != nil
			d.mu.Unlock()
			if deaf {
				continue
			}
			select {
			case out <- resp:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

func (d *deafWatcher) setDeaf() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.deaf = true
}

// compactAll writes a key outside the clusterset and compacts etcd at that
// write's revision: a watch of the clusterset from before it can no longer
// resume, and its client must read what changed.
func compactAll(t *testing.T, cli *clientv3.Client) {
	t.Helper()
	resp, err := cli.Put(t.Context(), "/elsewhere", "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(t.Context(), resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
}

// end ends every watch; the next ones hear again.
func (d *deafWatcher) end() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.cancels {
		c()
	}
	d.cancels, d.deaf = nil, false
}

// deafSetup is cluster a with services exports, and cluster b watching
// them through a client whose reads are recorded and whose watches can be
// made deaf and ended.
type deafSetup struct {
	srv     *embedded.Server
	a, b    *etcd.Backend
	kv      *recordingKV
	watcher *deafWatcher
	rec     *registrytest.Recorder
	raw     *clientv3.Client
}

// deafServices is how many Services a exports in a deafSetup.
const deafServices = 20

// deafService is a's export number i in a deafSetup, and deafID its record.
func deafService(i int) registry.ServiceKey {
	return registry.ServiceKey{Namespace: "shop", Name: fmt.Sprintf("web-%d", i)}
}

func deafID(i int) registry.RecordID { return registry.RecordID{Cluster: "a", Service: deafService(i)} }

func startDeaf(t *testing.T) deafSetup {
	t.Helper()
	const services = deafServices
	svc := deafService
	srv := startServer(t, filepath.Join(t.TempDir(), "etcd"), "")
	d := deafSetup{srv: srv, a: open(t, srv.ClientURL(), registry.Identity{ClusterSet: "set1", Cluster: "a"})}
	for i := range services {
		must(t, d.a.Publish(t.Context(), svc(i), spec, []registry.EndpointGroup{{AddressType: "IPv4",
			Endpoints: []registry.Endpoint{{Addresses: []string{fmt.Sprintf("10.0.0.%d", i+1)}, Ready: true, Serving: true}}}}))
	}
	cli := client(t, srv.ClientURL())
	d.kv, d.watcher = &recordingKV{KV: cli.KV}, &deafWatcher{Watcher: cli.Watcher}
	cli.KV, cli.Watcher = d.kv, d.watcher
	ctx := logr.NewContext(t.Context(), testr.NewWithOptions(t, testr.Options{Verbosity: 1}))
	var err error
	d.b, err = etcd.NewFromClient(ctx, cli, etcd.Options{Identity: registry.Identity{ClusterSet: "set1", Cluster: "b"},
		Prefix: prefix, ResyncPageSize: 8, ResyncJitter: -1, HealthInterval: time.Minute})
	must(t, err)
	t.Cleanup(func() { _ = d.b.Close() })
	d.rec = registrytest.StartWatch(t, d.b)
	d.rec.WaitFor(t, 10*time.Second, "every record", func(_ registrytest.Event, v *registrytest.View) bool {
		return len(v.Exports) == services && len(v.Endpoints) == services
	})
	d.raw = client(t, srv.ClientURL())
	return d
}

// changeWhileDeaf makes b's watch deaf, and a change one export, withdraw
// another and publish a new one.
func (d deafSetup) changeWhileDeaf(t *testing.T) {
	t.Helper()
	d.watcher.setDeaf()
	must(t, d.a.PutExport(t.Context(), deafService(0), spec2))
	must(t, d.a.DeleteExport(t.Context(), deafService(1)))
	must(t, d.a.PutExport(t.Context(), deafService(deafServices), spec))
}

// resyncWait bounds the wait for what a watch ended by the test reads
// again: it waits its retry delay first, which doubles with each end that
// follows another closely, up to retryMax (5 s); one such wait took 8.2 s
// of a former bound of 10 s in a run of every package at once.
const resyncWait = 30 * time.Second

// waitForDeafChanges waits until b's watch delivered changeWhileDeaf's
// changes, and returns the events until then.
func (d deafSetup) waitForDeafChanges(t *testing.T) []registrytest.Event {
	t.Helper()
	return d.rec.WaitFor(t, resyncWait, "the changes made while the watch was deaf", func(_ registrytest.Event, v *registrytest.View) bool {
		_, gone := v.Exports[deafID(1)]
		_, added := v.Exports[deafID(deafServices)]
		return cmp.Equal(v.Exports[deafID(0)].Spec, spec2) && !gone && added
	})
}

// A watch that ended while etcd still has the changes since (its member
// was cut off from the others, it was stuck) is resumed from the last
// change taken in: the changes arrive as events, and nothing of the
// clusterset is read again.
func TestEndedWatchResumes(t *testing.T) {
	t.Parallel()
	d := startDeaf(t)
	d.changeWhileDeaf(t)
	before := len(d.kv.snapshot())
	d.watcher.end()
	events := d.waitForDeafChanges(t)
	for _, e := range events {
		if u := e.Update; u != nil && u.Full {
			t.Errorf("the resumed watch delivered a full update: %s", e)
		}
		if e.Update == nil && !e.Connected {
			t.Errorf("the resumed watch reported an outage: %s", e)
		}
	}
	for _, r := range d.kv.snapshot()[before:] {
		if !r.oneKey || !r.countOnly {
			t.Errorf("the resumed watch read %+v; want no read but a count of one key", r)
		}
	}
}

// A watch that ended while etcd went back (another etcd, or one restored
// from a snapshot, at a lower revision) is not resumed, which would wait
// for revisions to come: the clusterset is read again in full.
func TestEndedWatchOnAnEtcdThatWentBackReadsAll(t *testing.T) {
	t.Parallel()
	d := startDeaf(t)
	d.watcher.setDeaf()
	url := d.srv.ClientURL()
	must(t, d.a.Close())
	d.srv.Close()
	startServer(t, filepath.Join(t.TempDir(), "etcd"), url)
	other := open(t, url, registry.Identity{ClusterSet: "set1", Cluster: "c"})
	must(t, other.PutExport(t.Context(), web, spec))
	d.watcher.end()
	d.rec.WaitFor(t, 20*time.Second, "the other etcd's clusterset", func(_ registrytest.Event, v *registrytest.View) bool {
		_, ok := v.Exports[registry.RecordID{Cluster: "c", Service: web}]
		return ok && len(v.Exports) == 1
	})
}

// After its watch was compacted away, a backend reads the keys of the
// clusterset and their revisions, and the values of the changed keys only;
// it delivers what changed as an incremental update, and mends its own
// alive record, deleted meanwhile.
func TestResyncReadsOnlyWhatChanged(t *testing.T) {
	t.Parallel()
	const services = deafServices
	svc, id := deafService, deafID
	d := startDeaf(t)
	a, kv, watcher, rec, raw := d.a, d.kv, d.watcher, d.rec, d.raw

	// While b's watch hears nothing: a changes one export, withdraws
	// another, publishes a new one; b's alive record is deleted.
	d.changeWhileDeaf(t)
	alive := prefix + "/set1/clusters/b/alive"
	if _, err := raw.Delete(t.Context(), alive); err != nil {
		t.Fatal(err)
	}
	before := len(kv.snapshot())
	compactAll(t, raw)
	watcher.end()
	events := d.waitForDeafChanges(t)
	for _, e := range events {
		if u := e.Update; u != nil && (u.Full || len(u.Exports) != 2 || len(u.Endpoints) > 0 ||
			len(u.DeletedExports) != 1 || len(u.DeletedEndpoints) != 1) {
			t.Errorf("the resync delivered %s; want the two exports put and one Service's records deleted", e)
		}
		if e.Update == nil && !e.Connected {
			t.Errorf("the resync reported an outage: %s", e)
		}
	}
	poll.Until(t, 10*time.Second, "b's alive record written again", func() (bool, string) {
		resp, err := raw.Get(t.Context(), alive)
		return err == nil && len(resp.Kvs) == 1, fmt.Sprint(err)
	})

	// The reads of the resync: the values of the keys changed since (a's
	// two exports), in ranges of a page of keys each, the number of keys,
	// and, since that says some are gone, every key without values, in
	// pages of ten times ResyncPageSize: the 40 keys in one.
	var listed, listings, valued, counts int
	for _, r := range kv.snapshot()[before:] {
		switch {
		case r.countOnly && !r.oneKey:
			counts++
		case r.countOnly || r.oneKey:
		case r.keysOnly:
			listed += r.keys
			listings++
			if r.keys > 10*8 {
				t.Errorf("a page of keys held %d, more than ten times ResyncPageSize", r.keys)
			}
		default:
			valued += r.keys
			if r.minModRev == 0 {
				t.Errorf("the resync read values of every key: %+v", r)
			}
		}
	}
	// a's alive, 20 - 1 + 1 exports, 20 - 1 endpoints (b's alive is gone).
	if want := 1 + services + (services - 1); listed < want {
		t.Errorf("the resync listed %d keys, want %d at least", listed, want)
	}
	if listings != 1 {
		t.Errorf("the resync listed the keys in %d pages, want 1 (pages of 80 keys)", listings)
	}
	if valued != 2 || counts != 1 {
		t.Errorf("the resync read %d values and counted the keys %d times, want 2 (the changed exports) and once", valued, counts)
	}
	// Each read of what changed scanned a page of the keys held (8) at
	// most, and a's alive record: a's 40 records take five of them.
	if scans := filteredScans(t, raw, kv.snapshot()[before:]); len(scans) < 5 || slices.Max(scans) > 8+1 {
		t.Errorf("the reads of what changed scanned %v keys; want a page of keys each, and the clusterset in 5 at least", scans)
	}

	// Every export changes, none is deleted: each range of a page of keys
	// has its changes in one read, and no key is listed.
	watcher.setDeaf()
	for i := range services {
		must(t, a.PutExport(t.Context(), svc(i), spec2))
	}
	before = len(kv.snapshot())
	compactAll(t, raw)
	watcher.end()
	events = rec.WaitFor(t, resyncWait, "every export changed", func(_ registrytest.Event, v *registrytest.View) bool {
		return cmp.Equal(v.Exports[id(services-1)].Spec, spec2)
	})
	for _, e := range events {
		if u := e.Update; u != nil && (u.Full || len(u.Exports) > 0 && len(u.Exports) != services-1 || len(u.Endpoints) > 0) {
			t.Errorf("the resync delivered %s; want the %d exports changed (web-0 was already)", e, services-1)
		}
	}
	if plain, listed := plainReads(kv.snapshot()[before:]); plain != 0 || listed != 0 {
		t.Errorf("the resync read %d values in plain pages and listed %d keys; want none", plain, listed)
	}

	// As many keys gone as new ones: the count alone does not move, the
	// new keys say that some are gone.
	watcher.setDeaf()
	must(t, a.DeleteExport(t.Context(), svc(2)))
	must(t, a.Publish(t.Context(), svc(services+1), spec, nil))
	compactAll(t, raw)
	watcher.end()
	events = rec.WaitFor(t, resyncWait, "web-2 gone, web-21 new", func(_ registrytest.Event, v *registrytest.View) bool {
		_, gone := v.Exports[id(2)]
		_, added := v.Exports[id(services+1)]
		return !gone && added
	})
	for _, e := range events {
		if u := e.Update; u != nil && len(u.DeletedExports) > 0 && (len(u.DeletedExports) != 1 || u.DeletedExports[0] != id(2)) {
			t.Errorf("the resync deleted %v, want web-2's export alone", u.DeletedExports)
		}
	}
}

// A range of the read of what changed that holds more changes than a page
// (a new cluster's keys: the ranges are cut by the keys held) is read on
// in plain pages after its first page of changes: etcd would scan the
// whole range again for each further filtered page.
func TestResyncReadsAPageOfChangesFilteredThenPlainPages(t *testing.T) {
	t.Parallel()
	d := startDeaf(t)
	svc, kv, watcher, rec, raw := deafService, d.kv, d.watcher, d.rec, d.raw
	watcher.setDeaf()
	c := open(t, d.srv.ClientURL(), registry.Identity{ClusterSet: "set1", Cluster: "c"})
	for i := range 10 {
		must(t, c.Publish(t.Context(), svc(i), spec, nil))
	}
	before := len(kv.snapshot())
	compactAll(t, raw)
	watcher.end()
	rec.WaitFor(t, resyncWait, "c's exports", func(_ registrytest.Event, v *registrytest.View) bool {
		_, ok := v.Exports[registry.RecordID{Cluster: "c", Service: svc(9)}]
		return ok
	})
	// The last range holds a's last 8 records, b's alive record and c's 21
	// keys, 8 of which are read filtered.
	if plain, listed := plainReads(kv.snapshot()[before:]); plain != 13 || listed != 0 {
		t.Errorf("the resync read %d values in plain pages and listed %d keys; want the rest of the last range (13: 21 keys new, 8 of them read filtered), none listed", plain, listed)
	}
}

// filteredScans counts, for each read of what changed among reads, the
// keys of its range at its revision: the keys etcd scanned for it.
func filteredScans(t *testing.T, cli *clientv3.Client, reads []rangeRead) []int {
	t.Helper()
	var scans []int
	for _, r := range reads {
		if r.minModRev == 0 || r.countOnly {
			continue
		}
		resp, err := cli.Get(t.Context(), r.key, clientv3.WithRange(r.end), clientv3.WithRev(r.rev), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		scans = append(scans, int(resp.Count))
	}
	return scans
}

// plainReads sums the values read in plain pages among reads (not
// filtered, not a count), and the keys listed without values.
func plainReads(reads []rangeRead) (plain, listed int) {
	for _, r := range reads {
		switch {
		case r.countOnly || r.oneKey || r.minModRev != 0:
		case r.keysOnly:
			listed += r.keys
		default:
			plain += r.keys
		}
	}
	return plain, listed
}

// watchUntilExported starts b's watch and waits until it holds cluster a's
// export of web, whose record id it returns.
func watchUntilExported(t *testing.T, b registry.Watcher) (*registrytest.Recorder, registry.RecordID) {
	t.Helper()
	rec := registrytest.StartWatch(t, b)
	id := registry.RecordID{Cluster: "a", Service: web}
	rec.WaitFor(t, 10*time.Second, "a's export", func(_ registrytest.Event, v *registrytest.View) bool {
		_, ok := v.Exports[id]
		return ok
	})
	return rec, id
}
