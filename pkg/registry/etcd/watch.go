package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/go-logr/logr"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/internal/connstate"
	"github.com/mcsd-io/mcsd/pkg/registry/internal/lifetime"
)

// errResync ends following the watch when the watch failed but etcd may
// still be readable: the next full read tells.
var errResync = errors.New("watch ended")

// errLoad wraps the failure of a read of the records of namespaces a
// scoped handler came to need (load).
var errLoad = errors.New("namespace not loaded")

// errResume ends following the watch when etcd may still hold every change
// after the last one taken in (the watch was not compacted away): a new
// watch from there resumes it, without reading the clusterset again.
var errResume = errors.New("watch ended")

// Watch delivers the clusterset's records to h until ctx is done or the
// backend is closed. It logs to the logger of ctx, or else of New's ctx.
// The watch also tells the backend what etcd holds of the cluster's own
// records, so that a put writes again what someone else deleted or changed.
func (b *Backend) Watch(ctx context.Context, h registry.Handler) error {
	return b.watch(ctx, h, b)
}

func (c *conn) watch(ctx context.Context, h registry.Handler, own ownObserver) error {
	ctx, release, err := lifetime.Bind(ctx, c.ctx)
	if err != nil {
		return err
	}
	defer release()

	log := c.log // the logger the backend was opened with
	if l, err := logr.FromContext(ctx); err == nil {
		log = l.WithValues(logValues(c.opts.Identity)...)
	}
	w := &watch{c: c, h: h, log: log, own: own}
	if scope, ok := h.(registry.Scoped); ok {
		w.scope, w.loaded = scope, map[string]bool{}
	}
	w.run(ctx)
	return lifetime.Ended(ctx, c.ctx)
}

// watch is one call of Watch.
type watch struct {
	c   *conn
	h   registry.Handler
	log logr.Logger
	// conn is the connection as h knows it, from the first read that
	// succeeds or fails.
	conn connstate.State
	// own hears of the own cluster's records; nil for a read-only Watcher.
	own ownObserver
	// members holds the live clusters: those with an alive record on a
	// lease; records count only on their cluster's lease.
	members map[string]member
	// records holds the last value of every export and endpoints key,
	// decoded, and whether it was delivered, so that a change of membership
	// can deliver or withdraw them. The values are those the handler gets:
	// the registry is held once, not again as etcd's bytes; a record that
	// a scoped handler does not need yet is held without its value
	// (pending).
	records map[string]*record
	// byCluster indexes records by cluster.
	byCluster map[string]map[string]bool
	// revs holds the revision of the last change of every key of the
	// clusterset, and rev the revision up to which every change was taken
	// in (the last event's): a resync reads the changes after rev, and looks for deletions
	// only when the number of keys says there were some. Nil until the
	// first full read.
	revs map[string]int64
	rev  int64
	// etcdCluster is the id of the etcd cluster the last full read came
	// from: a revision of another cluster says nothing of what this one
	// holds.
	etcdCluster uint64
	// scope is h when it needs some namespaces only (registry.Scoped), and
	// loaded the namespaces whose records are read, decoded and delivered.
	// The records of other namespaces are held as their keys and revisions
	// alone, their values neither read nor kept, until h needs them (load);
	// the own cluster's are read whatever their namespace, for the export
	// side.
	scope  registry.Scoped
	loaded map[string]bool
}

// member is a live cluster as its alive record says.
type member struct {
	lease clientv3.LeaseID
	// prev is the lease of the alive record before it moved to lease, as
	// a restarted controller moves its records to a new lease: records
	// still on it count until they are moved (or expire with it).
	prev clientv3.LeaseID
}

// record is the last value of an export or endpoints key.
type record struct {
	kind    keyKind
	cluster string
	svc     registry.ServiceKey
	lease   clientv3.LeaseID
	// export or endpoints is the value, decoded (by kind), nil while the
	// record is pending; err says why it could not be decoded.
	export    *registry.Export
	endpoints *registry.Endpoints
	err       error
	// delivered: the record was last delivered as a put, not refused.
	delivered bool
	// pending: the record's namespace is not loaded, and its value is not
	// held (load reads it when it is).
	pending bool
	// createRev is the key's creation: the export's Order.
	createRev int64
}

// run reads everything, follows changes, and starts again after any
// failure, until ctx is done.
//
// A registry that was connected is reported lost only when reads have kept
// failing for UnreachableAfter (two of them at least): a leader election
// leaves etcd unreadable for a second or two, and a report makes every
// importer write a status condition, then write it again to clear it.
func (w *watch) run(ctx context.Context) {
	delay := retryMin
	failures := 0
	var failingSince time.Time
	resume := false
	for ctx.Err() == nil {
		var (
			rev int64
			err error
		)
		if resume {
			// etcd still has the changes after w.rev, unless it compacted
			// them since (the new watch then ends at once, and a read
			// follows). A read first tells that etcd answers: a watch may
			// be created on a member that has no leader.
			rev = w.rev
			var resp *clientv3.GetResponse
			if resp, err = w.read(ctx, clientv3.WithCountOnly()); err == nil && !w.sameHistory(resp.Header) {
				// A watch from rev would wait for revisions to come, or
				// follow another history.
				rev, err = w.syncOtherHistory(ctx)
			}
		} else {
			rev, err = w.sync(ctx)
		}
		if err == nil {
			started := time.Now()
			// Reachable, and the failures forgotten, once the namespaces
			// needed meanwhile are loaded too: a load that keeps failing
			// is reported as a read that does.
			err = w.follow(ctx, rev, func() {
				failures, failingSince = 0, time.Time{}
				w.setConnected(true, nil)
			})
			if time.Since(started) > retryMax {
				delay = retryMin
			}
		}
		if ctx.Err() != nil {
			return
		}
		wait := delay
		resync := errors.Is(err, errResync) // the watch was compacted away; etcd was not read yet
		// A failed read is followed by a read of what changed, not by a
		// resumed watch: etcd may have been replaced meanwhile, and a
		// count of the keys tells deletions that no watch would replay.
		resume = errors.Is(err, errResume)
		if !resync && !resume {
			if failures++; failures == 1 {
				failingSince = time.Now()
			}
		}
		switch {
		case resume:
			w.log.Info("watch ended, resuming it", "reason", err.Error(), "revision", w.rev)
		case resync && errors.Is(err, errLoad):
			// One controller's read of a namespace: nothing to spread.
			w.log.Info("reading a namespace failed, reading the registry again", "reason", err.Error())
		case resync:
			w.log.Info("watch ended, reading all records again", "reason", err.Error())
			// Every controller's watch ends at once on a compaction:
			// spread their reads.
			wait += w.jitter()
		case !w.conn.Connected() || failures >= 2 && time.Since(failingSince) >= w.c.opts.UnreachableAfter:
			w.setConnected(false, err)
		default:
			w.log.Info("registry read failed, trying again before reporting it unreachable", "reason", err.Error())
		}
		if !lifetime.Sleep(ctx, wait) {
			return
		}
		delay = nextDelay(delay)
	}
}

// jitter is a random wait up to resyncSpread.
func (w *watch) jitter() time.Duration {
	if w.c.opts.ResyncJitter <= 0 {
		return 0
	}
	return rand.N(resyncSpread(w.c.opts.ResyncJitter, len(w.members), len(w.revs)))
}

// resyncSpread is how long the resyncs of the clusterset's controllers are
// spread over, when they all begin at once: at least minimum, and as long
// as the reads of members clusters, of keys keys each, take one after the
// other, up to maxResyncSpread. etcd scans every key for each read, and its
// reads slow down with every read beside them: at 100 clusters and 30,000
// keys, 100 reads begun within a second took 10 s each, and every
// controller was current after 13 s; spread out, each took about 55 ms
// (docs/performance.md).
func resyncSpread(minimum time.Duration, members, keys int) time.Duration {
	return min(max(minimum, time.Duration(members)*time.Duration(keys)*resyncReadPerKey), maxResyncSpread)
}

const (
	// resyncReadPerKey is etcd's time to scan one key for a read of what
	// changed, on the 2-CPU testbed: about 55 ms for 30,000 keys.
	resyncReadPerKey = 2 * time.Microsecond
	// maxResyncSpread bounds resyncSpread: a larger clusterset waits no
	// longer before its resyncs begin.
	maxResyncSpread = 30 * time.Second
)

func (w *watch) setConnected(connected bool, err error) {
	if errors.Is(err, rpctypes.ErrPermissionDenied) {
		err = fmt.Errorf("%w: %w (this identity needs read on %s; mcsd registry setup-auth grants it)", registry.ErrForbidden, err, w.c.keys.clusters())
	}
	w.conn.Report(w.log, w.h, connected, err)
}

// sync reads the clusterset and delivers it: the first time in full, as
// one full Update; after a watch ended, only what changed meanwhile.
// It returns the revision it read at.
func (w *watch) sync(ctx context.Context) (int64, error) {
	if w.revs == nil {
		return w.syncFull(ctx)
	}
	return w.syncChanges(ctx)
}

// syncFull delivers every record of the clusterset as one full Update (of
// the namespaces a scoped handler needs, and the own cluster's).
// It decodes each page of the read while etcd serves the next (but a
// scoped handler's first, which decides how the rest is read): at 30,000
// records, decoding takes as long as the reading. A scoped handler's read
// lists the keys without values, then reads the values it needs
// (values.go), unless its first page shows that it needs most of them
// (readScoped).
func (w *watch) syncFull(ctx context.Context) (int64, error) {
	w.members = map[string]member{}
	w.records = map[string]*record{}
	w.byCluster = map[string]map[string]bool{}
	if w.scope != nil {
		// Taken after the signal of any growth before it: a growth during
		// the read is loaded after it.
		select {
		case <-w.scope.NamespacesGrew():
		default:
		}
		w.loaded = w.scope.Namespaces()
		if w.loaded == nil {
			w.loaded = map[string]bool{}
		}
	}
	revs := map[string]int64{}
	type keyed struct {
		cluster string
		kv      *mvccpb.KeyValue
	}
	var alive, own []keyed
	var recs []*record
	take := func(kind keyKind, cluster string, svc registry.ServiceKey, kv *mvccpb.KeyValue) {
		switch kind {
		case kindUnknown:
			return
		case kindAlive:
			alive = append(alive, keyed{cluster, kv})
		case kindExport, kindEndpoints:
			recs = append(recs, w.putRecord(kind, cluster, svc, kv))
		}
		if cluster == w.c.opts.Identity.Cluster {
			own = append(own, keyed{cluster, kv})
		}
	}
	needed := rangeBuilder{page: int(w.c.opts.ResyncPageSize)}
	// keysOnly: the page holds keys alone, and the values needed are read
	// after (needed); otherwise values it does not need are not decoded.
	// It counts the other clusters' records, and those needed: the own
	// cluster's and the alive records are needed whatever the namespaces.
	takePage := func(kvs []*mvccpb.KeyValue, keysOnly bool) (others, othersNeeded int) {
		for _, kv := range kvs {
			key := string(kv.Key)
			revs[key] = kv.ModRevision
			kind, cluster, svc := w.c.keys.parse(key)
			need := w.valueNeeded(kind, cluster, svc)
			if (kind == kindExport || kind == kindEndpoints) && cluster != w.c.opts.Identity.Cluster {
				others++
				if need {
					othersNeeded++
				}
			}
			if keysOnly {
				if needed.add(key, need); need {
					continue // taken with its value, read next
				}
			}
			take(kind, cluster, svc, kv)
		}
		return others, othersNeeded
	}
	var (
		rev         int64
		etcdCluster uint64
		err         error
	)
	if w.scope == nil {
		rev, etcdCluster, err = w.readPages(ctx, w.c.keys.clusters(), w.c.keys.clustersEnd(), 0, false,
			func(kvs []*mvccpb.KeyValue) { takePage(kvs, false) })
	} else {
		rev, etcdCluster, err = w.readScoped(ctx, takePage)
	}
	if err == nil && len(needed.ranges) > 0 {
		var kvs []*mvccpb.KeyValue
		if kvs, err = w.readValues(ctx, rev, etcdCluster, needed.ranges); err == nil && len(kvs) != needed.keys() {
			// The same revision holds the same keys: etcd is not the one
			// listed.
			err = fmt.Errorf("%w: %d values read at revision %d for %d keys listed", errResync, len(kvs), rev, needed.keys())
		}
		for _, kv := range kvs {
			kind, cluster, svc := w.c.keys.parse(string(kv.Key))
			take(kind, cluster, svc, kv)
		}
	}
	if err != nil {
		// What was read is incomplete: the next sync reads in full.
		w.revs = nil
		return 0, fmt.Errorf("read clusterset: %w", err)
	}
	w.revs, w.rev, w.etcdCluster = revs, rev, etcdCluster
	u := registry.Update{Full: true}
	if w.scope != nil {
		u.Scoped, u.Namespaces = true, slices.Sorted(maps.Keys(w.loaded))
	}
	// Alive records first: membership decides whether the others count.
	for _, a := range alive {
		w.putAlive(&u, a.cluster, a.kv)
	}
	w.previousLeases(recs)
	for _, rec := range recs {
		w.evaluate(&u, rec, true)
	}
	for _, o := range own {
		w.observeOwn(o.cluster, string(o.kv.Key), o.kv)
	}
	if w.own != nil {
		w.own.observeOwnAbsent(w.holds, rev)
	}
	w.h.OnUpdate(u)
	return rev, nil
}

// readScoped reads the clusterset for a scoped handler, giving each page
// to take (keysOnly: without values), and returns the revision read at
// and the etcd cluster read. Its first page holds keys alone. When the
// handler needs the values of at least half of the other clusters' records
// in it (as a cluster that has every namespace does, in a clusterset with
// the same namespaces everywhere), the rest is read with values in plain
// pages, rather than listed and then read again; otherwise the rest is
// listed too, keys alone. The page is a sample: the first clusters by
// name (at 100 clusters × 5,000 Services, one cluster's records fill it),
// so a clusterset whose clusters have unlike namespaces may be read the
// other way than its whole would call for; each way reads every record.
func (w *watch) readScoped(ctx context.Context, take func(kvs []*mvccpb.KeyValue, keysOnly bool) (int, int)) (int64, uint64, error) {
	from, end := w.c.keys.clusters(), w.c.keys.clustersEnd()
	resp, err := w.readKey(ctx, from, w.pageOptions(end, true)...)
	if err != nil {
		return 0, 0, err
	}
	rev, etcdCluster := resp.Header.Revision, resp.Header.ClusterId
	others, needed := take(resp.Kvs, true)
	if !resp.More || len(resp.Kvs) == 0 {
		return rev, etcdCluster, nil
	}
	keysOnly := others == 0 || 2*needed < others
	from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	_, cluster, err := w.readPages(ctx, from, end, rev, keysOnly, func(kvs []*mvccpb.KeyValue) { take(kvs, keysOnly) })
	if err == nil && cluster != etcdCluster {
		err = fmt.Errorf("%w: the clusterset read from etcd cluster %x, then %x", errResync, etcdCluster, cluster)
	}
	return rev, etcdCluster, err
}

// syncChanges reads the keys of the clusterset changed after w.rev, with
// their values, and how many keys there are; only when that number says
// some keys are gone, it reads every key (without values) to find them. It
// delivers the difference as an incremental Update: after a compaction
// past their watches, or an outage, every controller of the clusterset
// reads at once, and the values of the whole clusterset would cost each of
// them the registry's size, on the wire and in decoding.
//
// The count comes first: etcd answers it from its index, so it tells
// within RequestTimeout that etcd answers, and fixes the revision. The read
// of what changed follows, in ranges of a page each (readChanged).
func (w *watch) syncChanges(ctx context.Context) (int64, error) {
	resp, err := w.readKey(ctx, w.c.keys.clusters(), clientv3.WithRange(w.c.keys.clustersEnd()),
		clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("count clusterset keys: %w", err)
	}
	rev := resp.Header.Revision
	if !w.sameHistory(resp.Header) {
		return w.syncOtherHistory(ctx)
	}
	changed, err := w.readChanged(ctx, rev)
	if err != nil {
		return 0, fmt.Errorf("read changed records: %w", err)
	}
	events := make([]*clientv3.Event, 0, len(changed))
	added := 0
	isChanged := make(map[string]bool, len(changed))
	for _, kv := range changed {
		isChanged[string(kv.Key)] = true
		held, ok := w.revs[string(kv.Key)]
		if ok && held == kv.ModRevision {
			continue
		}
		if !ok {
			added++
		}
		events = append(events, &clientv3.Event{Type: mvccpb.PUT, Kv: kv})
	}
	// In etcd's history as the watch holds it, every key unchanged since
	// w.rev is held at the revision held: more keys than that, or the
	// latest held change not there, is another history at a later
	// revision (a backup restored with its revisions bumped): its values
	// of the keys unchanged since w.rev are not those held.
	otherHistory := func() (int64, error) {
		w.log.Info("registry holds another history at a later revision (a restored backup), reading all records again", "revision", rev, "held", w.rev)
		return w.syncOtherHistory(ctx)
	}
	sample, err := w.latestHeld(ctx, rev, isChanged)
	if err != nil {
		return 0, err
	}
	if sample == latestOtherHistory || int64(len(w.revs)+added) < resp.Count {
		return otherHistory()
	}
	if sample == latestGone || int64(len(w.revs)+added) > resp.Count {
		// Some keys are gone: list them all to find which.
		listed, _, err := w.listKeys(ctx, rev)
		if err != nil {
			return 0, fmt.Errorf("read clusterset keys: %w", err)
		}
		found := make(map[string]bool, len(listed))
		for _, kv := range listed {
			key := string(kv.Key)
			if held, ok := w.revs[key]; !isChanged[key] && (!ok || held != kv.ModRevision) {
				return otherHistory()
			}
			found[key] = true
		}
		for key := range w.revs {
			if !found[key] {
				events = append(events, &clientv3.Event{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: []byte(key), ModRevision: rev}})
			}
		}
	}
	u := w.changes(events)
	w.rev = rev
	if w.own != nil {
		w.own.observeOwnAbsent(w.holds, rev)
	}
	if !u.Empty() {
		w.h.OnUpdate(u)
	}
	return rev, nil
}

// latest is what latestHeld found of the latest held key.
type latest int

const (
	latestAsHeld latest = iota // as held, or nothing held
	// latestGone: gone, as a deletion since w.rev would have it: only the
	// list of every key tells which keys went.
	latestGone
	latestOtherHistory // at another revision than held
)

// latestHeld reads, at revision rev, the held key of the latest revision
// that did not change since w.rev (one key, without its value).
func (w *watch) latestHeld(ctx context.Context, rev int64, changed map[string]bool) (latest, error) {
	var key string
	var at int64
	for k, r := range w.revs {
		if r > at && !changed[k] {
			key, at = k, r
		}
	}
	if key == "" {
		return latestAsHeld, nil
	}
	resp, err := w.readKey(ctx, key, clientv3.WithKeysOnly(), clientv3.WithRev(rev))
	switch {
	case err != nil:
		return 0, fmt.Errorf("read the latest key held: %w", err)
	case len(resp.Kvs) == 0:
		return latestGone, nil
	case resp.Kvs[0].ModRevision != at:
		return latestOtherHistory, nil
	}
	return latestAsHeld, nil
}

// syncOtherHistory reads everything again from an etcd whose history is
// not the one the watch holds. The revisions of the cluster's own writes
// belong to that other history: the own observer forgets them first.
func (w *watch) syncOtherHistory(ctx context.Context) (int64, error) {
	if w.own != nil {
		w.own.observeOtherHistory()
	}
	return w.syncFull(ctx)
}

// sameHistory reports whether h, a response header, comes from the etcd
// whose history the watch holds up to w.rev: the same cluster, at w.rev or
// later. Another cluster at the address, or one restored from a snapshot
// (whose revision went back), holds other changes than those after w.rev:
// everything is to be read again.
func (w *watch) sameHistory(h *etcdserverpb.ResponseHeader) bool {
	switch {
	case w.etcdCluster != 0 && h.ClusterId != w.etcdCluster:
		w.log.Info("another etcd cluster at the registry's address, reading all records again", "etcdCluster", h.ClusterId, "held", w.etcdCluster)
		return false
	case h.Revision < w.rev:
		w.log.Info("registry revision went back, reading all records again", "revision", h.Revision, "held", w.rev)
		return false
	}
	return true
}

// readChanged reads the keys changed after w.rev, with their values, at
// revision rev. etcd scans the whole range of a filtered read, whatever its
// limit, and holds every value of it at once: the read goes over the
// clusterset in ranges of about ResyncPageSize keys held (changeBounds),
// one request each, so that no request scans more than a page, however
// large the registry. A range with more changes than a page (keys new since
// the last read) is read on in plain pages and filtered here.
func (w *watch) readChanged(ctx context.Context, rev int64) ([]*mvccpb.KeyValue, error) {
	var changed []*mvccpb.KeyValue
	bounds := changeBounds(w.byCluster, w.c.keys.cluster, int(w.c.opts.ResyncPageSize))
	from, last := w.c.keys.clusters(), w.c.keys.clustersEnd()
	for i := 0; ; i++ {
		end := last
		if i < len(bounds) {
			end = bounds[i]
		}
		resp, err := w.readKey(ctx, from, clientv3.WithRange(end),
			clientv3.WithMinModRev(w.rev+1), clientv3.WithLimit(w.c.opts.ResyncPageSize), clientv3.WithRev(rev))
		if err != nil {
			return nil, err
		}
		changed = append(changed, resp.Kvs...)
		if resp.More && len(resp.Kvs) > 0 {
			_, _, err := w.readPages(ctx, string(resp.Kvs[len(resp.Kvs)-1].Key)+"\x00", end, rev, false, func(kvs []*mvccpb.KeyValue) {
				for _, kv := range kvs {
					if kv.ModRevision > w.rev {
						changed = append(changed, kv)
					}
				}
			})
			if err != nil {
				return nil, err
			}
		}
		if end == last {
			return changed, nil
		}
		from = end
	}
}

// changeBounds cuts the keys of a clusterset into ranges of about page
// keys each: it returns the keys that begin the ranges after the first, in
// order. byCluster holds each cluster's keys, and prefix gives the prefix of
// a cluster's keys. Clusters are kept whole, so that only a cluster of more
// than page keys has its keys sorted; the ranges together cover every key
// with the clusterset's prefix, held or not.
func changeBounds(byCluster map[string]map[string]bool, prefix func(cluster string) string, page int) []string {
	prefixes := make(map[string]string, len(byCluster))
	for cluster := range byCluster {
		prefixes[prefix(cluster)] = cluster
	}
	var bounds []string
	n := 0 // keys since the last bound
	for _, p := range slices.Sorted(maps.Keys(prefixes)) {
		keys := byCluster[prefixes[p]]
		if n > 0 && n+len(keys) > page {
			bounds, n = append(bounds, p), 0
		}
		if len(keys) <= page {
			n += len(keys)
			continue
		}
		sorted := slices.Sorted(maps.Keys(keys))
		for i := page; i < len(sorted); i += page {
			bounds = append(bounds, sorted[i])
		}
		n = (len(sorted)-1)%page + 1
	}
	return bounds
}

// holds reports whether the last read found key (kept in revs).
func (w *watch) holds(key string) bool {
	_, ok := w.revs[key]
	return ok
}

// observeOwn tells the own observer of kv, a key of cluster read in full.
func (w *watch) observeOwn(cluster, key string, kv *mvccpb.KeyValue) {
	if w.own != nil && cluster == w.c.opts.Identity.Cluster {
		w.own.observeOwn(key, kv, kv.ModRevision)
	}
}

// listKeys lists every key of the clusterset, without values, at revision
// rev (0: the latest), as readPages does, and returns them with the
// revision read at.
func (w *watch) listKeys(ctx context.Context, rev int64) ([]*mvccpb.KeyValue, int64, error) {
	var kvs []*mvccpb.KeyValue
	rev, _, err := w.readPages(ctx, w.c.keys.clusters(), w.c.keys.clustersEnd(), rev, true,
		func(page []*mvccpb.KeyValue) { kvs = append(kvs, page...) })
	if err != nil {
		return nil, 0, err
	}
	return kvs, rev, nil
}

// keysPerRecord is how many keys without values a page holds for each
// record a page of values holds: a key is some 60 bytes, a record's value
// some 600, so the replies are of a size (etcd still reads each value, to
// drop it). Fewer, larger pages cost etcd less in all: for each page, it
// visits every key from the page's first to the range's end, to count
// them.
const keysPerRecord = 10

// pageOptions are the options of a read of one page up to end: of
// ResyncPageSize records, or keysOnly of keysPerRecord times as many keys.
func (w *watch) pageOptions(end string, keysOnly bool) []clientv3.OpOption {
	if keysOnly {
		return []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(keysPerRecord * w.c.opts.ResyncPageSize), clientv3.WithKeysOnly()}
	}
	return []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(w.c.opts.ResyncPageSize)}
}

// readPages reads every key from from up to end at revision rev (0: the
// latest), in pages of ResyncPageSize keys (keysOnly: their keys alone, in
// pages of keysPerRecord times as many), each page a request of its own
// (with its own RequestTimeout), all at the revision of the first. It gives
// each page to page as it comes, and reads the next meanwhile. It returns
// the revision read at and the id of the etcd cluster read. A compaction
// between pages makes the read start again (errResync); pages given before
// an error are to be discarded.
func (w *watch) readPages(ctx context.Context, from, end string, rev int64, keysOnly bool, page func([]*mvccpb.KeyValue)) (int64, uint64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		kvs     []*mvccpb.KeyValue
		rev     int64
		cluster uint64
		err     error
		last    bool
	}
	results := make(chan result, 1)
	go func() {
		defer close(results)
		for {
			opts := w.pageOptions(end, keysOnly)
			if rev != 0 {
				opts = append(opts, clientv3.WithRev(rev))
			}
			r := result{}
			resp, err := w.readKey(ctx, from, opts...)
			if err != nil {
				r.err, r.last = err, true
			} else {
				if rev == 0 {
					rev = resp.Header.Revision
				}
				r.kvs, r.rev, r.cluster, r.last = resp.Kvs, rev, resp.Header.ClusterId, !resp.More || len(resp.Kvs) == 0
			}
			select {
			case results <- r:
			case <-ctx.Done():
				return
			}
			if r.last {
				return
			}
			from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
		}
	}()
	var (
		err     error
		at      int64
		cluster uint64
		done    bool
	)
	for r := range results {
		switch {
		case r.err != nil:
			err = r.err
		case err == nil:
			page(r.kvs)
			at, cluster, done = r.rev, r.cluster, r.last
		}
	}
	if err == nil && !done {
		err = ctx.Err() // the reader stopped before the last page
	}
	if err != nil {
		return 0, 0, err
	}
	return at, cluster, nil
}

// follow delivers the changes after rev, one Update per watch response,
// until the watch fails, etcd cannot be read, the watch falls behind, or
// ctx is done; and, when a scoped handler's namespaces grow, their records
// (load). It calls loaded once the namespaces a scoped handler needed
// before it began are loaded: the registry is read whole then.
//
// Every HealthInterval without a watch response, a linearizable read checks
// that etcd has a leader and a quorum, and asks the watch's member for its
// progress. A watch whose member is cut off from the others (a partition)
// gets no events, and etcd may not end it: a watch that is behind the
// revision a read saw and has not moved at all over two checks is started
// again (on another member, most likely). One check is not enough: etcd
// drops a progress request while the stream has a watch still catching up,
// and a healthy member may apply a little late.
func (w *watch) follow(ctx context.Context, rev int64, loaded func()) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wctx := clientv3.WithRequireLeader(ctx)
	// Watch blocks until etcd has created the watch; check health meanwhile.
	created := make(chan clientv3.WatchChan, 1)
	go func() {
		created <- w.c.cli.Watch(wctx, w.c.keys.clusters(), clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	}()
	var ch clientv3.WatchChan
	// reached is the revision the watch is known to have reached; due, the
	// one it was behind at the last check, and stuck how many checks in a
	// row it has been behind without moving.
	reached, due := rev, int64(0)
	var stuck int
	var reachedAtCheck int64
	health := time.NewTimer(w.c.opts.HealthInterval)
	defer health.Stop()
	var grew <-chan struct{}
	if w.scope != nil {
		grew = w.scope.NamespacesGrew()
		// A growth whose load failed before this watch began is loaded now.
		if err := w.deliverLoad(ctx); err != nil {
			return err
		}
	}
	loaded()
	for {
		select {
		case <-grew:
			if err := w.deliverLoad(ctx); err != nil {
				return err
			}
		case ch = <-created:
			created = nil
		case resp, ok := <-ch:
			if !ok {
				return fmt.Errorf("%w: channel closed", errResume)
			}
			if err := resp.Err(); err != nil {
				if resp.CompactRevision != 0 || errors.Is(err, rpctypes.ErrCompacted) {
					return fmt.Errorf("%w: %w", errResync, err)
				}
				// Canceled, or its member lost the leader: etcd still has
				// the changes since.
				return fmt.Errorf("%w: %w", errResume, err)
			}
			reached = max(reached, resp.Header.Revision)
			if u := w.changes(resp.Events); !u.Empty() {
				w.h.OnUpdate(u)
			}
			if resp.IsProgressNotify() {
				// Every change up to its revision has arrived: a watch
				// resumed, or a read of what changed, starts there.
				w.rev = max(w.rev, resp.Header.Revision)
			}
			health.Reset(w.c.opts.HealthInterval)
		case <-health.C:
			switch {
			case due > reached && reached == reachedAtCheck:
				stuck++
			default:
				stuck = 0
			}
			if stuck >= 2 {
				return fmt.Errorf("%w: the watch is stuck at revision %d, etcd is at %d or later", errResume, reached, due)
			}
			reachedAtCheck = reached
			resp, err := w.read(ctx, clientv3.WithCountOnly())
			if err != nil {
				return fmt.Errorf("health check: %w", err)
			}
			if !w.sameHistory(resp.Header) {
				// Another etcd at the address (restored, replaced): the
				// client followed it without ending the watch, which
				// would go on from a revision of the other history.
				return fmt.Errorf("%w: the registry's history changed under the watch", errResume)
			}
			due = 0
			if ch != nil && resp.Header.Revision > reached {
				// The watch's member answers with a progress notification
				// at its revision. The request goes to the watch's stream,
				// which the client finds by wctx's metadata (the
				// require-leader flag): a context without it would ask an
				// empty stream of its own.
				due = resp.Header.Revision
				pctx, cancel := context.WithTimeout(wctx, w.c.opts.HealthInterval)
				if err := w.c.cli.RequestProgress(pctx); err != nil {
					w.log.V(1).Info("watch progress request failed", "reason", err.Error())
				}
				cancel()
			}
			health.Reset(w.c.opts.HealthInterval)
		}
	}
}

// read reads the clusterset's key (linearizable) within RequestTimeout,
// trying each member's turn (eachMember).
func (w *watch) read(ctx context.Context, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	return w.readKey(ctx, w.c.keys.clusters(), opts...)
}

// readKey is read from key. A read at a revision etcd compacted since
// (the pages of one resync are read at the revision of the first) makes
// the resync start again (errResync).
func (w *watch) readKey(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	var resp *clientv3.GetResponse
	err := w.request(ctx, func(ctx context.Context) error {
		var err error
		resp, err = w.c.cli.Get(ctx, key, opts...)
		return err
	})
	return resp, err
}

// request makes the read f within RequestTimeout, trying each member's
// turn (eachMember). A read at a revision etcd compacted since makes the
// resync start again (errResync).
func (w *watch) request(ctx context.Context, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, w.c.opts.RequestTimeout)
	defer cancel()
	err := w.c.eachMember(ctx, f)
	if errors.Is(err, rpctypes.ErrCompacted) {
		return fmt.Errorf("%w: %w", errResync, err)
	}
	return err
}

// changes turns watch events into an Update. A key changed more than once
// in the batch counts with its last change only. A change of a cluster's
// alive record delivers or withdraws the cluster's records that it makes
// count or not.
func (w *watch) changes(events []*clientv3.Event) registry.Update {
	last := make(map[string]int, len(events))
	for i, ev := range events {
		last[string(ev.Kv.Key)] = i
	}
	var (
		u           registry.Update
		affected    = map[string]bool{} // clusters whose membership changed
		evaluated   = map[*record]bool{}
		ownCluster  = w.c.opts.Identity.Cluster
		recordsPuts []*record
	)
	for i, ev := range events {
		key := string(ev.Kv.Key)
		if last[key] != i {
			continue
		}
		kind, cluster, svc := w.c.keys.parse(key)
		if ev.Type == mvccpb.DELETE {
			delete(w.revs, key)
		} else {
			w.revs[key] = ev.Kv.ModRevision
		}
		w.rev = max(w.rev, ev.Kv.ModRevision)
		if w.own != nil && cluster == ownCluster && kind != kindUnknown {
			if ev.Type == mvccpb.DELETE {
				w.own.observeOwn(key, nil, ev.Kv.ModRevision)
			} else {
				w.own.observeOwn(key, ev.Kv, ev.Kv.ModRevision)
			}
		}
		switch {
		case kind == kindAlive && ev.Type == mvccpb.DELETE:
			if _, ok := w.members[cluster]; ok {
				delete(w.members, cluster)
				affected[cluster] = true
			}
			u.DeletedClusters = append(u.DeletedClusters, cluster)
		case kind == kindAlive:
			before, was := w.members[cluster]
			w.putAlive(&u, cluster, ev.Kv)
			if after, is := w.members[cluster]; was != is || before.lease != after.lease {
				affected[cluster] = true
			}
		case (kind == kindExport || kind == kindEndpoints) && ev.Type == mvccpb.DELETE:
			rec := w.records[key]
			w.deleteRecord(key)
			if rec != nil && rec.pending {
				continue // never delivered
			}
			id := registry.RecordID{Cluster: cluster, Service: svc}
			if kind == kindExport {
				u.DeletedExports = append(u.DeletedExports, id)
			} else {
				u.DeletedEndpoints = append(u.DeletedEndpoints, id)
			}
		case kind == kindExport || kind == kindEndpoints:
			recordsPuts = append(recordsPuts, w.putRecord(kind, cluster, svc, ev.Kv))
		default:
			w.log.V(1).Info("ignoring unknown key", "key", key)
		}
	}
	// Membership first, so that the records put in the batch are judged
	// by the batch's membership.
	written := make(map[*record]bool, len(recordsPuts))
	for _, rec := range recordsPuts {
		written[rec] = true
	}
	for cluster := range affected {
		for key := range w.byCluster[cluster] {
			rec := w.records[key]
			evaluated[rec] = true
			w.evaluate(&u, rec, written[rec])
		}
	}
	for _, rec := range recordsPuts {
		if !evaluated[rec] {
			w.evaluate(&u, rec, true)
		}
	}
	return u
}

// putAlive takes in an alive record: its cluster is a member while the
// record is on a lease.
func (w *watch) putAlive(u *registry.Update, cluster string, kv *mvccpb.KeyValue) {
	lease := clientv3.LeaseID(kv.Lease)
	if lease == clientv3.NoLease {
		if _, ok := w.members[cluster]; ok {
			delete(w.members, cluster)
			u.DeletedClusters = append(u.DeletedClusters, cluster)
		}
		w.log.V(1).Info("ignoring alive record without a lease", "key", string(kv.Key))
		return
	}
	m := member{lease: lease}
	if old, ok := w.members[cluster]; ok {
		m.prev = old.prev
		if old.lease != lease {
			m.prev = old.lease
		}
	}
	w.members[cluster] = m
	c := registry.Cluster{ID: cluster}
	var v aliveValue
	if err := json.Unmarshal(kv.Value, &v); err == nil {
		c.Since = v.Since
		c.TTL = time.Duration(v.TTLSeconds) * time.Second
	}
	u.Clusters = append(u.Clusters, c)
}

// previousLeases gives, after a full read, each member whose records (recs,
// the read's) are on one lease other than its alive record's that lease as
// its previous one. A controller restarted with another TTL writes its alive
// record on its new lease first, then moves its records in transactions: a
// read between finds them on the old lease, which lives (etcd deletes a
// lease's keys when it expires). A watch that followed the move counts them
// on that lease (putAlive); a watch that reads the clusterset then must
// count the same records. Records of one member on two other leases (a
// second move begun before the first ended) are left to count as their
// move comes.
func (w *watch) previousLeases(recs []*record) {
	other := map[string]clientv3.LeaseID{}
	for _, rec := range recs {
		m, ok := w.members[rec.cluster]
		if !ok || rec.lease == m.lease || rec.lease == clientv3.NoLease {
			continue
		}
		if l, seen := other[rec.cluster]; seen && l != rec.lease {
			other[rec.cluster] = clientv3.NoLease
			continue
		}
		other[rec.cluster] = rec.lease
	}
	for cluster, lease := range other {
		if lease != clientv3.NoLease {
			m := w.members[cluster]
			m.prev = lease
			w.members[cluster] = m
		}
	}
}

// putRecord stores the last value of an export or endpoints key; of a
// namespace a scoped handler does not need, the key alone (pending).
func (w *watch) putRecord(kind keyKind, cluster string, svc registry.ServiceKey, kv *mvccpb.KeyValue) *record {
	key := string(kv.Key)
	rec := w.records[key]
	if rec == nil {
		rec = &record{kind: kind, cluster: cluster, svc: svc}
		w.records[key] = rec
		if w.byCluster[cluster] == nil {
			w.byCluster[cluster] = map[string]bool{}
		}
		w.byCluster[cluster][key] = true
	}
	rec.lease = clientv3.LeaseID(kv.Lease)
	rec.export, rec.endpoints, rec.err = nil, nil, nil
	rec.createRev = kv.CreateRevision
	rec.pending = !w.valueNeeded(kind, cluster, svc)
	if !rec.pending {
		rec.err = w.decode(rec, kv.Value)
	}
	return rec
}

// valueNeeded reports whether the watch reads and decodes the value of a
// key of kind, cluster and svc: every key the handler is delivered, and
// the alive records; a scoped handler is delivered the own cluster's
// records and those of the namespaces loaded.
func (w *watch) valueNeeded(kind keyKind, cluster string, svc registry.ServiceKey) bool {
	switch kind {
	case kindAlive:
		return true
	case kindExport, kindEndpoints:
		return w.scope == nil || cluster == w.c.opts.Identity.Cluster || w.loaded[svc.Namespace]
	}
	return false
}

// deliverLoad loads the namespaces the handler came to need (load) and
// delivers them.
func (w *watch) deliverLoad(ctx context.Context) error {
	u, err := w.load(ctx)
	if err != nil {
		return fmt.Errorf("read the records of namespaces now needed: %w", err)
	}
	if !u.Empty() {
		w.h.OnUpdate(u)
	}
	return nil
}

// load reads and decodes, for delivery, the records of the namespaces the
// handler came to need since the last full read or load, with those
// namespaces in Update.Namespaces. The values are read at the revision the
// watch has taken in every change up to (w.rev), in ranges of the keys it
// holds there. A namespace is rare news: the records are gone through
// once. When the read fails, nothing is loaded and the error is returned:
// the next load, after the watch starts again, tries anew.
func (w *watch) load(ctx context.Context) (registry.Update, error) {
	var fresh []string
	for ns := range w.scope.Namespaces() {
		if !w.loaded[ns] {
			fresh = append(fresh, ns)
		}
	}
	if len(fresh) == 0 {
		return registry.Update{}, nil
	}
	slices.Sort(fresh)
	var keys []string
	for key, rec := range w.records {
		if rec.pending && slices.Contains(fresh, rec.svc.Namespace) {
			keys = append(keys, key)
		}
	}
	slices.Sort(keys)
	b := rangeBuilder{page: int(w.c.opts.ResyncPageSize)}
	for i, key := range keys {
		if i > 0 && parent(key) != parent(keys[i-1]) {
			b.add("", false) // other keys lie between
		}
		b.add(key, true)
	}
	kvs, err := w.readValues(ctx, w.rev, w.etcdCluster, b.ranges)
	if err != nil {
		return registry.Update{}, fmt.Errorf("%w: %w", errLoad, err)
	}
	read := make(map[string]*mvccpb.KeyValue, len(kvs))
	for _, kv := range kvs {
		read[string(kv.Key)] = kv
	}
	for _, key := range keys {
		if kv := read[key]; kv == nil || kv.ModRevision != w.revs[key] {
			w.revs = nil // the next sync reads everything
			return registry.Update{}, fmt.Errorf("%w: %w: key %s at revision %d is not as the watch holds it", errLoad, errResync, key, w.rev)
		}
	}
	u := registry.Update{Scoped: true, Namespaces: fresh}
	for _, ns := range fresh {
		w.loaded[ns] = true
	}
	for _, key := range keys {
		rec := w.records[key]
		w.putRecord(rec.kind, rec.cluster, rec.svc, read[key])
		w.evaluate(&u, rec, true)
	}
	return u, nil
}

func (w *watch) deleteRecord(key string) {
	rec := w.records[key]
	if rec == nil {
		return
	}
	delete(w.records, key)
	delete(w.byCluster[rec.cluster], key)
	if len(w.byCluster[rec.cluster]) == 0 {
		delete(w.byCluster, rec.cluster)
	}
}

// evaluate adds rec to u as a put, or as refused. Unless written (the record
// itself was put), it adds rec only when its standing changed: a change of
// its cluster's membership either makes it count or not.
func (w *watch) evaluate(u *registry.Update, rec *record, written bool) {
	if rec.pending {
		return // not needed: not delivered, not refused
	}
	m, ok := w.members[rec.cluster]
	member := ok && (rec.lease == m.lease || (m.prev != clientv3.NoLease && rec.lease == m.prev))
	if !written && member == rec.delivered {
		return
	}
	id := registry.RecordID{Cluster: rec.cluster, Service: rec.svc}
	rk := registry.KindExport
	if rec.kind == kindEndpoints {
		rk = registry.KindEndpoints
	}
	if !member {
		msg := "no live cluster " + rec.cluster + " in the registry (no alive record on a lease)"
		if ok {
			msg = "the record is not on the lease of cluster " + rec.cluster + "'s alive record"
		}
		rec.delivered = false
		u.Rejected = append(u.Rejected, registry.Rejection{Kind: rk, Record: id, Reason: registry.RejectNotMember, Message: msg})
		return
	}
	if rec.err != nil {
		rec.delivered = false
		u.Rejected = append(u.Rejected, registry.Reject(rk, id, rec.err))
		return
	}
	if rec.kind == kindExport {
		u.Exports = append(u.Exports, *rec.export)
	} else {
		u.Endpoints = append(u.Endpoints, *rec.endpoints)
	}
	rec.delivered = true
}

// decode reads value, the value of rec's key, into rec, or returns why it
// cannot be read.
func (w *watch) decode(rec *record, value []byte) error {
	if len(value) > registry.MaxRecordBytes {
		return &registry.RejectedError{Reason: registry.RejectTooLarge,
			Err: fmt.Errorf("%d bytes, more than %d", len(value), registry.MaxRecordBytes)}
	}
	switch rec.kind {
	case kindExport:
		var v exportValue
		if err := json.Unmarshal(value, &v); err != nil {
			return &registry.RejectedError{Reason: registry.RejectUnreadable, Err: err}
		}
		rec.export = &registry.Export{Cluster: rec.cluster, Service: rec.svc, Spec: v.Spec, Order: rec.createRev}
	case kindEndpoints:
		var v endpointsValue
		if err := json.Unmarshal(value, &v); err != nil {
			return &registry.RejectedError{Reason: registry.RejectUnreadable, Err: err}
		}
		rec.endpoints = &registry.Endpoints{Cluster: rec.cluster, Service: rec.svc, Groups: v.Groups, Updated: v.Updated}
	}
	return nil
}
