package cloudmap

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	sd "github.com/aws/aws-sdk-go-v2/service/servicediscovery"
	"github.com/go-logr/logr"

	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/internal/connstate"
	"github.com/mcsd-io/mcsd/pkg/registry/internal/lifetime"
)

// Watch delivers the clusterset's records to h until ctx is done or the
// backend is closed: first a full Update after a sweep that reads
// everything, then the changes the change feed finds every PollInterval,
// and those of a sweep every SweepInterval. A poll that fails reports the
// connection lost and changes nothing; the next poll starts from what was
// read before. What it reads of the cluster's own records is checked
// against what the backend wrote (see guard).
func (b *Backend) Watch(ctx context.Context, h registry.Handler) error {
	return b.watch(ctx, &guard{h: h, b: b})
}

func (r *reader) watch(ctx context.Context, h registry.Handler) error {
	ctx, release, err := lifetime.Bind(ctx, r.ctx)
	if err != nil {
		return err
	}
	defer release()

	w := &watcher{
		b:         r,
		h:         h,
		log:       logr.FromContextOrDiscard(ctx).WithValues("clusterSet", r.opts.Identity.ClusterSet),
		services:  map[string]*serviceCache{},
		records:   map[string]instance{},
		unseen:    map[string]time.Time{},
		unsettled: map[string]*unsettled{},
		beats:     map[string]*beat{},
		ops:       map[string]*feedOp{},
	}
	for {
		// Polls start every PollInterval, however long one takes: a
		// change waits half an interval on average, plus one poll.
		start := time.Now()
		err := w.poll(ctx)
		if ctx.Err() != nil {
			break
		}
		w.setConnected(err == nil, err)
		if !lifetime.Sleep(ctx, max(r.opts.PollInterval-time.Since(start), r.opts.PollInterval/10)) {
			break
		}
	}
	return lifetime.Ended(ctx, r.ctx)
}

// watcher is one call of Watch.
type watcher struct {
	b   *reader
	h   registry.Handler
	log logr.Logger
	// conn is the connection as h knows it, from the first poll that ends.
	conn connstate.State

	// services caches what was read of each Cloud Map service that can
	// hold exports, by id.
	services map[string]*serviceCache
	// records caches the service records of the records services, by
	// recordRef.
	records map[string]instance
	// unseen holds the records an operation named that GetInstance did not
	// find, and were not held, by recordRef, with when they were first not
	// found: Cloud Map answers InstanceNotFound for an instance "recently
	// registered" whose information has not propagated yet. Each is read
	// again at every poll for propagation.
	unseen map[string]time.Time
	// unsettled holds the services whose last read did not show what an
	// operation the feed listed did (an instance registered and not read,
	// or deregistered and still read, or registered again and read with
	// the attributes from before: DiscoverInstances answers from data that
	// propagates after the operation), by service id. Each is read again
	// at every poll for propagation after its last operation listed.
	unsettled map[string]*unsettled
	// beats are the heartbeats read, by cluster.
	beats       map[string]*beat
	beatsReadAt time.Time

	// ops are the operations the change feed listed in its last window,
	// by id; feedFrom is when its next window starts on the local clock,
	// zero before the feed is primed; feedLatest, once Cloud Map's time is
	// known, where it starts on Cloud Map's clock: the latest operation
	// known when the last successful poll listed.
	ops        map[string]*feedOp
	feedFrom   time.Time
	feedLatest time.Time
	// sweptAt is when the last sweep started, zero before the first.
	sweptAt time.Time
	// recordsMoved: the feed found a records service under a new id, or a
	// new one; its next read of records reads them all.
	recordsMoved bool
	// delivered is what the handler has; nil before the full Update.
	delivered *snapshot
}

// serviceCache is what was last read of one Cloud Map service.
type serviceCache struct {
	svc  service
	read bool
	// revision is the service's instances revision when it was read, -1
	// when unknown: a sweep then reads the service again.
	revision  int64
	instances []instance
	// added is when the watcher learned of the service.
	added time.Time
	// listed holds when the operations of the service listed in the last
	// propagation were (noteListed), whatever their instance.
	listed []time.Time
}

// feedOp is an instance operation the change feed listed.
type feedOp struct {
	target opTarget
	// handled is set once the service it names was read.
	handled bool
	// based: was and rev hold what the watcher had read of the instance
	// and its service when the operation was first listed (noteBaseline),
	// kept for the polls that list it again after a failed one.
	based bool
	was   map[string]string
	rev   int64
}

// beat is what a watcher knows of one cluster's heartbeat.
type beat struct {
	ms int64
	// since is the heartbeat's MCSD_SINCE, 0 when it has none.
	since int64
	// ttl is the cluster's own TTL.
	ttl time.Duration
	// firstSeen and changedAt are local times: when the heartbeat was first
	// read, and when it was last seen to change (zero before that).
	firstSeen time.Time
	changedAt time.Time
}

// alive reports whether the heartbeat is younger than the cluster's TTL.
// Once a change has been seen, its age is measured on the local clock only,
// so that clock skew between clusters does not matter; before that, by the
// time it holds, and never for longer than the TTL after it was first read.
func (hb *beat) alive(now time.Time) bool {
	ttl := hb.ttl
	if !hb.changedAt.IsZero() {
		return now.Sub(hb.changedAt) <= ttl
	}
	return now.Sub(hb.firstSeen) <= ttl && now.Sub(time.UnixMilli(hb.ms)) <= ttl
}

func (w *watcher) setConnected(connected bool, err error) {
	w.conn.Report(w.log, w.h, connected, forbidden(err))
}

// staleBeat is how long after its last heartbeat a cluster's heartbeat
// service is deleted, with CleanupEmpty: each is listed by every watcher of
// every clusterset of the system namespace at each read of the heartbeats,
// and clusters come and go (a CI cluster a day, say). The cluster makes it
// again if it ever starts again, and then deletes its records left behind
// (watchers ignore them meanwhile: no heartbeat).
const staleBeat = 24 * time.Hour

// beatCleaner is a handler that deletes the heartbeat services of clusters
// long gone (guard, with CleanupEmpty).
type beatCleaner interface {
	deleteStaleBeat(ctx context.Context, svc service)
}

// pollObserver is a handler told when a poll begins its reads, and, before
// it delivers them, of the Services whose reads do not show yet what the
// operations listed did (watcher.unsettled) (guard).
type pollObserver interface {
	pollStarted()
	pollUnsettled(keys map[registry.ServiceKey]bool)
}

// poll reads what changed and delivers it: the change feed's news, and
// everything when a sweep is due. The first poll primes the feed, then
// sweeps.
func (w *watcher) poll(ctx context.Context) error {
	b := w.b
	if po, ok := w.h.(pollObserver); ok {
		po.pollStarted()
	}
	feedCtx := withPurpose(ctx, purposeFeed)
	if w.feedFrom.IsZero() {
		if err := w.primeFeed(feedCtx); err != nil {
			return err
		}
	} else if err := w.pollFeed(feedCtx); err != nil {
		return err
	}
	if w.sweptAt.IsZero() || b.now().Sub(w.sweptAt) >= b.opts.SweepInterval {
		start := b.now()
		if err := w.sweep(withPurpose(ctx, purposeSweep)); err != nil {
			return err
		}
		w.sweptAt = start
	}
	// Heartbeats change every TTL/3: reading them as often (the shortest
	// TTL of the clusterset's) keeps every live cluster alive, whatever
	// the feed misses, at one call per 100 clusters. The feed reads them at
	// once for a new cluster only.
	if now := b.now(); now.Sub(w.beatsReadAt) >= w.beatsEvery(now) {
		if err := w.readHeartbeats(feedCtx); err != nil {
			return err
		}
	}
	if po, ok := w.h.(pollObserver); ok {
		po.pollUnsettled(w.unsettledKeys())
	}
	next := w.snapshot()
	var u registry.Update
	if w.delivered == nil {
		u = next.full()
	} else {
		u = w.delivered.diff(next)
	}
	w.delivered = next
	if !u.Empty() {
		w.h.OnUpdate(u)
	}
	return nil
}

// sweep lists the namespaces and services, forgets those that are gone,
// reads every service whose revision moved, and reads the heartbeats and
// the service records.
func (w *watcher) sweep(ctx context.Context) error {
	b := w.b
	start := b.now()
	nss, err := listNamespaces(ctx, b.api)
	if err != nil {
		return err
	}
	listedNS, listedSvc := map[string]bool{}, map[string]bool{}
	inView := map[string]service{}
	for _, ns := range nss {
		listedNS[ns.ID] = true
		b.dir.addNamespace(ns)
		system := ns.Name == b.opts.SystemNamespace
		if !system && (!ns.usable() || !validName(ns.Name)) {
			continue
		}
		svcs, err := listServices(ctx, b.api, ns)
		if isAccessDenied(err) {
			w.log.V(1).Info("skipping namespace the policy does not grant", "namespace", ns.Name)
			continue
		}
		if err != nil {
			return err
		}
		for _, svc := range svcs {
			listedSvc[svc.ID] = true
			b.dir.addService(svc)
			switch {
			case system && isRecordsName(svc.Name):
				b.noteRecordsService(svc) // read whole below
			case !system && validName(svc.Name):
				inView[svc.ID] = svc
			}
		}
	}
	b.dir.retain(start, listedNS, listedSvc)
	for id, c := range w.services {
		if _, ok := inView[id]; !ok && c.added.Before(start) {
			delete(w.services, id)
		}
	}
	for id, svc := range inView {
		if w.services[id] == nil {
			w.services[id] = &serviceCache{svc: svc, revision: -1, added: start}
		}
	}
	if err := w.readServices(ctx, slices.Sorted(maps.Keys(w.services)), true); err != nil {
		return err
	}
	if err := w.readAllRecords(ctx); err != nil {
		return err
	}
	return w.readHeartbeats(ctx)
}

// readServices reads the services ids, a few at a time; with checkRevision,
// only those whose revision moved since they were read.
func (w *watcher) readServices(ctx context.Context, ids []string, checkRevision bool) error {
	var caches []*serviceCache
	for _, id := range ids {
		if c := w.services[id]; c != nil {
			caches = append(caches, c)
		}
	}
	return w.b.each(ctx, len(caches), func(ctx context.Context, i int) error {
		c := caches[i]
		err := w.read(ctx, c, checkRevision)
		if isAccessDenied(err) {
			// Keep what was read before: an error deletes nothing.
			w.log.V(1).Info("skipping service the policy does not grant", "namespace", c.svc.NS.Name, "name", c.svc.Name)
			return nil
		}
		return err
	})
}

// read refreshes c; with checkRevision, only when the service's revision
// moved. A service that no longer exists reads as empty.
func (w *watcher) read(ctx context.Context, c *serviceCache, checkRevision bool) error {
	b := w.b
	svc := c.svc
	revision := int64(-1)
	if checkRevision {
		rev, err := b.api.DiscoverInstancesRevision(ctx, &sd.DiscoverInstancesRevisionInput{
			NamespaceName: aws.String(svc.NS.HTTPName),
			ServiceName:   aws.String(svc.Name),
		})
		if isNotFound(err) {
			c.read, c.revision, c.instances = true, -1, nil
			return nil
		}
		if err != nil {
			return fmt.Errorf("discover instances revision of %s/%s: %w", svc.NS.Name, svc.Name, err)
		}
		revision = aws.ToInt64(rev.InstancesRevision)
		if c.read && c.revision == revision {
			return nil
		}
	}
	// The revision is read before the instances: a change in between
	// moves it again, and the next sweep reads the instances again. Without
	// a check, the revision DiscoverInstances returns is kept, so that the
	// next sweep reads the service only if it changed since.
	query := map[string]string{attrClusterSetID: b.opts.Identity.ClusterSet}
	insts, rev, err := b.discoverRevision(ctx, svc, query)
	if isNotFound(err) {
		insts, err = nil, nil
	}
	if err != nil {
		return err
	}
	if !checkRevision {
		revision = rev
	}
	c.read, c.revision, c.instances = true, revision, insts
	return nil
}

// recordRef is the key of a service record in watcher.records: its records
// service's id and its instance id.
func recordRef(service, instance string) string { return service + "/" + instance }

// readAllRecords reads every service record of the records services.
func (w *watcher) readAllRecords(ctx context.Context) error {
	b := w.b
	read := map[string]instance{}
	for _, svc := range b.recordsServices() {
		insts, err := b.discover(ctx, svc, map[string]string{attrClusterSetID: b.opts.Identity.ClusterSet})
		if isNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("read service records: %w", err)
		}
		for _, in := range insts {
			read[recordRef(svc.ID, in.ID)] = in
		}
	}
	w.records = read
	return nil
}

// unsettled is a service whose reads do not show yet what operations did.
type unsettled struct {
	// expect is what is still to be read, by instance.
	expect map[string]wanted
}

// wanted is what the listed operations make of one instance.
type wanted struct {
	// present: registered (else deregistered).
	present bool
	// was is, for a registration of an instance that the watcher had read
	// present when the operation was first listed (registered again, its
	// attributes changed), the attributes read then: a read with the same
	// may be from before the registration propagated. Nil otherwise.
	was map[string]string
	// attrs are, for a registration of the backend's own, the attributes
	// it wrote: a read shows it when it has them (was is not needed).
	attrs map[string]string
	// rev is the service's instances revision read when the operation was
	// first listed, -1 if unknown: a read at an older one is older data.
	rev int64
	// ambiguous: more than one operation on the instance awaited at once
	// (registered twice, or registered and deregistered, their order
	// unknown): no read tells which one it shows, so it is read again
	// until its wait ends. The backend's own operations are ordered by
	// at instead.
	ambiguous bool
	// at is when the backend's own operation was sent; zero for another's.
	at time.Time
	// since is when its last operation was listed: it is read again until
	// propagation after.
	since time.Time
}

// noteBaseline records in op, when it is first listed, what the watcher
// had read of its service and instance, and counts the operation in the
// service's (noteListed).
func (w *watcher) noteBaseline(op *feedOp, now time.Time) {
	if op.based {
		return
	}
	op.based, op.rev = true, -1
	c := w.services[op.target.service]
	if c == nil {
		return
	}
	c.noteListed(now)
	if !c.read {
		return
	}
	op.rev = c.revision
	if op.target.deregister || op.target.attrs != nil {
		return // what the backend wrote itself is known (wanted.attrs)
	}
	for _, in := range c.instances {
		if in.ID == op.target.instance {
			op.was = maps.Clone(in.Attrs)
			if op.was == nil {
				op.was = map[string]string{}
			}
			return
		}
	}
}

// noteListed counts an operation of the service listed at now, and
// forgets those listed longer than propagation ago.
func (c *serviceCache) noteListed(now time.Time) {
	c.listed = append(c.recentlyListed(now), now)
}

// recentlyListed returns when the operations of the service listed less
// than propagation before now were.
func (c *serviceCache) recentlyListed(now time.Time) []time.Time {
	c.listed = slices.DeleteFunc(c.listed, func(at time.Time) bool { return now.Sub(at) > propagation })
	return c.listed
}

// expectInstance records in expect, by service and instance, what op,
// listed at now, makes of its instance. Two operations of one window on
// one instance make it ambiguous.
func expectInstance(expect map[string]map[string]wanted, op *feedOp, now time.Time) {
	t := op.target
	if t.instance == "" {
		return
	}
	m := expect[t.service]
	if m == nil {
		m = map[string]wanted{}
		expect[t.service] = m
	}
	want := wanted{present: !t.deregister, rev: op.rev, since: now, at: t.at}
	if want.present {
		want.was, want.attrs = op.was, t.attrs
	}
	if prev, ok := m[t.instance]; ok {
		want = later(prev, want)
	}
	m[t.instance] = want
}

// later is what two operations on one instance, a and b, awaited at once,
// make of it: the later of the backend's own, else ambiguous.
func later(a, b wanted) wanted {
	if a.at.IsZero() || b.at.IsZero() || a.ambiguous || b.ambiguous {
		b.ambiguous = true
		return b
	}
	since := a.since
	if b.since.After(since) {
		since = b.since
	}
	if a.at.After(b.at) {
		b = a
	}
	b.since = since
	return b
}

// unsettledServices returns the services to read again (watcher.unsettled),
// and forgets the instances awaited for longer than propagation (the
// services left with none). The operations of this poll, in expect, take
// their place in what is expected: an instance awaited from before that
// one of them names again is ambiguous.
func (w *watcher) unsettledServices(expect map[string]map[string]wanted) []string {
	now := w.b.now()
	var out []string
	for id, u := range w.unsettled {
		m := expect[id]
		for inst, want := range u.expect {
			if now.Sub(want.since) > propagation {
				continue
			}
			if m == nil {
				m = map[string]wanted{}
				expect[id] = m
			}
			if fresh, ok := m[inst]; ok {
				m[inst] = later(want, fresh)
				continue
			}
			m[inst] = want
		}
		if m == nil {
			delete(w.unsettled, id)
			continue
		}
		out = append(out, id)
	}
	return out
}

// settle compares what was read of each service with what expect says of
// its instances: an instance the read does not show yet stays awaited (its
// service read again at the next polls), and a service with none left is
// settled. A registration of an instance read present before shows by
// other attributes than those read then, or, when it is the one operation
// listed of its service for propagation, by a later revision (which any
// other operation, of this clusterset or not, may have moved).
func (w *watcher) settle(expect map[string]map[string]wanted) {
	now := w.b.now()
	for id, m := range expect {
		c := w.services[id]
		if c == nil || !c.read {
			delete(w.unsettled, id)
			continue
		}
		read := make(map[string]map[string]string, len(c.instances))
		for _, in := range c.instances {
			read[in.ID] = in.Attrs
		}
		single := len(m) == 1 && len(c.recentlyListed(now)) == 1
		missing := map[string]wanted{}
		for inst, want := range m {
			attrs, ok := read[inst]
			shown := !want.ambiguous && ok == want.present
			older := c.revision >= 0 && want.rev >= 0 && c.revision < want.rev
			passed := single && c.revision >= 0 && want.rev >= 0 && c.revision > want.rev
			switch {
			case !shown:
			case older:
				shown = false // data from before the operation
			case want.attrs != nil:
				shown = holds(attrs, want.attrs)
			case want.was != nil && maps.Equal(attrs, want.was) && !passed:
				shown = false // maybe the attributes from before
			}
			if !shown {
				missing[inst] = want
			}
		}
		if len(missing) == 0 {
			delete(w.unsettled, id)
			continue
		}
		w.unsettled[id] = &unsettled{expect: missing}
	}
}

// holds reports whether attrs has every attribute of want, with its value.
func holds(attrs, want map[string]string) bool {
	for k, v := range want {
		if got, ok := attrs[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// ownerPrefixes are the owner prefixes of the clusterset's clusters whose
// heartbeats the watcher read: the instances mcsd writes for them start
// with one (endpointInstanceID).
func (w *watcher) ownerPrefixes() prefixSet {
	out := make(prefixSet, len(w.beats))
	for cluster := range w.beats {
		out[ownerPrefix(registry.Identity{ClusterSet: w.b.opts.Identity.ClusterSet, Cluster: cluster})] = true
	}
	return out
}

// prefixSet is a set of owner prefixes.
type prefixSet map[string]bool

// has reports whether instance id starts with a prefix of s.
func (s prefixSet) has(id string) bool {
	prefix, _, ok := strings.Cut(id, ".")
	return ok && s[prefix]
}

// unsettledKeys are the Services whose reads do not show yet an operation
// of the backend's own (the guard does not judge those); nil when none.
// Only another's operations awaited, or one of them on an instance the
// backend wrote too (ambiguous: someone else deleted or rewrote it, say),
// leave the guard to judge: a repair of a read that was only stale writes
// again what is there.
func (w *watcher) unsettledKeys() map[registry.ServiceKey]bool {
	var keys map[registry.ServiceKey]bool
	for id, u := range w.unsettled {
		c := w.services[id]
		if c == nil || !u.ownAwaited() {
			continue
		}
		if keys == nil {
			keys = map[registry.ServiceKey]bool{}
		}
		keys[registry.ServiceKey{Namespace: c.svc.NS.Name, Name: c.svc.Name}] = true
	}
	return keys
}

// ownAwaited reports whether u awaits an operation of the backend's own
// alone on an instance.
func (u *unsettled) ownAwaited() bool {
	for _, want := range u.expect {
		if !want.at.IsZero() && !want.ambiguous {
			return true
		}
	}
	return false
}

// unseenRecords returns the records to look for again (watcher.unseen),
// and forgets those looked for longer than propagation.
func (w *watcher) unseenRecords() []string {
	now := w.b.now()
	var out []string
	for ref, since := range w.unseen {
		if now.Sub(since) > propagation {
			delete(w.unseen, ref)
			continue
		}
		out = append(out, ref)
	}
	return out
}

// readRecords reads the service records refs (recordRef), a few at a time;
// one that is not there is deleted (or, when not held and registered, as
// registered says, looked for again at the next polls: watcher.unseen).
func (w *watcher) readRecords(ctx context.Context, refs []string, registered map[string]bool) error {
	b := w.b
	var mu sync.Mutex
	return b.each(ctx, len(refs), func(ctx context.Context, i int) error {
		ref := refs[i]
		svc, id, _ := strings.Cut(ref, "/")
		out, err := b.api.GetInstance(ctx, &sd.GetInstanceInput{ServiceId: aws.String(svc), InstanceId: aws.String(id)})
		mu.Lock()
		defer mu.Unlock()
		if !isNotFound(err) {
			delete(w.unseen, ref)
		}
		switch {
		case isNotFound(err):
			if _, held := w.records[ref]; !held && registered[ref] {
				if _, ok := w.unseen[ref]; !ok {
					w.unseen[ref] = b.now()
				}
			}
			delete(w.records, ref)
		case err != nil:
			return fmt.Errorf("get service record %s: %w", id, err)
		case out.Instance == nil || out.Instance.Attributes[attrClusterSetID] != b.opts.Identity.ClusterSet:
			delete(w.records, ref)
		default:
			w.records[ref] = instance{ID: id, Attrs: out.Instance.Attributes}
		}
		return nil
	})
}

// beatsEvery is how often the heartbeats are read: a third of the
// shortest TTL of this reader's and of the clusters alive at now (a
// cluster long gone does not make every read of the heartbeats sooner).
func (w *watcher) beatsEvery(now time.Time) time.Duration {
	every := w.b.opts.heartbeatInterval()
	for _, hb := range w.beats {
		if hb.alive(now) {
			every = min(every, hb.ttl/3)
		}
	}
	return every
}

// readHeartbeats reads the clusterset's heartbeats: the descriptions of the
// heartbeat services of the system namespace, one ListServices per 100
// clusters. Until the system namespace is known (a sweep lists it, the feed
// finds it with the first record written there), no mcsd cluster is alive.
func (w *watcher) readHeartbeats(ctx context.Context) error {
	b := w.b
	now := b.now()
	ns, ok := b.dir.namespaceNamed(b.opts.SystemNamespace)
	if !ok {
		w.beatsReadAt = now
		return nil
	}
	beats, err := w.listHeartbeats(ctx, ns)
	if err == nil && len(beats) == 0 && len(w.beats) > 0 {
		// None where clusters were alive: the namespace may have been
		// deleted and created again under a new id. Look it up by name.
		var found bool
		if ns, found, err = b.findNamespace(ctx, b.opts.SystemNamespace); err == nil && found {
			beats, err = w.listHeartbeats(ctx, ns)
		}
	}
	if err != nil {
		return fmt.Errorf("read heartbeats: %w", err)
	}
	w.beatsReadAt = now
	// A heartbeat service that disappears (its namespace deleted, say) is
	// not a death: the cluster expires when its last heartbeat does. Once
	// it has, the cluster is forgotten.
	listed := make(map[string]bool, len(beats))
	for _, hb := range beats {
		listed[hb.Cluster] = true
	}
	for c, hb := range w.beats {
		if !listed[c] && !hb.alive(now) {
			delete(w.beats, c)
		}
	}
	for _, hb := range beats {
		ttl := b.opts.TTL
		if hb.TTL > 0 {
			ttl = time.Duration(hb.TTL) * time.Millisecond
		}
		seen := w.beats[hb.Cluster]
		switch {
		case seen == nil:
			w.beats[hb.Cluster] = &beat{ms: hb.At, since: hb.Since, ttl: ttl, firstSeen: now}
		case seen.ms != hb.At:
			seen.ms = hb.At
			seen.since = hb.Since
			seen.ttl = ttl
			seen.changedAt = now
		}
	}
	return nil
}

// listHeartbeats lists the services of the system namespace ns and returns
// the heartbeats of the clusterset among them.
func (w *watcher) listHeartbeats(ctx context.Context, ns namespace) ([]heartbeat, error) {
	b := w.b
	svcs, err := listServices(ctx, b.api, ns)
	if isNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []heartbeat
	for _, svc := range svcs {
		b.dir.addService(svc)
		if b.noteRecordsService(svc) {
			// A records service made since the last read of the
			// records (another cluster's records filled the ones
			// before it), or made again: read whole.
			w.recordsMoved = true
		}
		hb, ok := decodeHeartbeat(svc.Desc)
		if ok && strings.HasPrefix(svc.Name, beatServicePrefix) && hb.ClusterSet == b.opts.Identity.ClusterSet {
			out = append(out, hb)
		}
		if c, clean := w.h.(beatCleaner); clean && ok && strings.HasPrefix(svc.Name, beatServicePrefix) &&
			b.now().Sub(time.UnixMilli(hb.At)) > staleBeat {
			c.deleteStaleBeat(ctx, svc)
		}
	}
	return out, nil
}

// newCluster reports whether the services ids or the service records
// recordIDs (recordRef), as just read, hold a record of an mcsd cluster whose heartbeat
// the watcher has not read, or a service record of one whose heartbeat
// expired: a cluster that has just started (again), whose records are
// delivered once its heartbeat is read.
func (w *watcher) newCluster(ids, recordIDs []string) bool {
	cluster := func(in instance) string {
		if in.Attrs[attrRecord] == "" || in.Attrs[attrClusterSetID] != w.b.opts.Identity.ClusterSet {
			return ""
		}
		return in.Attrs[attrClusterID]
	}
	unknown := func(in instance) bool {
		c := cluster(in)
		return c != "" && w.beats[c] == nil
	}
	for _, id := range ids {
		if c := w.services[id]; c != nil && slices.ContainsFunc(c.instances, unknown) {
			return true
		}
	}
	// A service record just written by a cluster whose heartbeat expired:
	// the cluster has started again (its other records may be old ones,
	// read with the services they are in, which is no news).
	now := w.b.now()
	for _, id := range recordIDs {
		in, ok := w.records[id]
		if !ok {
			continue
		}
		if c := cluster(in); c != "" && (w.beats[c] == nil || !w.beats[c].alive(now)) {
			return true
		}
	}
	return false
}

// forbidden marks an access-denied error of Cloud Map as registry.ErrForbidden,
// saying what the identity lacks; other errors are returned as they are.
func forbidden(err error) error {
	if err == nil || !isAccessDenied(err) {
		return err
	}
	return fmt.Errorf("%w: %w (this identity needs the read actions of pkg/registry/cloudmap/iam-policy.json)", registry.ErrForbidden, err)
}
