package cloudmap

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	sd "github.com/aws/aws-sdk-go-v2/service/servicediscovery"
	"github.com/go-logr/logr"

	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/internal/lifetime"
)

// Watch polls Cloud Map and delivers the clusterset's records to h until ctx
// is done or the backend is closed: first a full Update, then the changes
// each poll finds. A poll that fails reports the connection lost and changes
// nothing; the next poll starts from what was read before.
// What it reads of the cluster's own records is checked against what the
// backend wrote (see guard).
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
		b:        r,
		h:        h,
		log:      logr.FromContextOrDiscard(ctx).WithValues("clusterSet", r.opts.Identity.ClusterSet),
		services: map[string]*serviceCache{},
		beats:    map[string]*beat{},
	}
	for {
		err := w.poll(ctx)
		if ctx.Err() != nil {
			break
		}
		w.setConnected(err == nil, err)
		if !sleep(ctx, r.opts.PollInterval) {
			break
		}
	}
	if r.ctx.Err() != nil {
		return registry.ErrClosed
	}
	return ctx.Err()
}

// watcher is one call of Watch.
type watcher struct {
	b   *reader
	h   registry.Handler
	log logr.Logger
	// connected is nil until the first poll ends.
	connected *bool

	// catalog is the Cloud Map services by id, as last listed.
	catalog  map[string]service
	listedAt time.Time
	// services caches what was read of each service, by id.
	services map[string]*serviceCache
	// heartbeats caches the heartbeat service.
	heartbeats serviceCache
	beats      map[string]*beat
	// delivered is what the handler has; nil before the full Update.
	delivered *snapshot
}

// serviceCache is what was last read of one Cloud Map service.
type serviceCache struct {
	read      bool
	revision  int64
	instances []instance
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
	if w.connected != nil && *w.connected == connected {
		return
	}
	w.connected = &connected
	if connected {
		w.log.Info("registry connected")
	} else {
		w.log.Error(err, "registry disconnected")
	}
	w.h.OnConnection(connected, err)
}

// poll reads what changed and delivers it.
func (w *watcher) poll(ctx context.Context) error {
	b := w.b
	if w.catalog == nil || b.now().Sub(w.listedAt) >= b.opts.ListInterval {
		if err := w.list(ctx); err != nil {
			return err
		}
	}
	for _, svc := range b.knownServices() {
		if _, ok := w.catalog[svc.ID]; !ok {
			w.catalog[svc.ID] = svc
		}
	}
	if err := w.readHeartbeats(ctx); err != nil {
		return err
	}
	if err := w.readServices(ctx); err != nil {
		return err
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

// list lists the namespaces and services that can hold exports.
func (w *watcher) list(ctx context.Context) error {
	b := w.b
	nss, err := listNamespaces(ctx, b.api)
	if err != nil {
		return err
	}
	catalog := map[string]service{}
	for _, ns := range nss {
		if ns.Name == b.opts.SystemNamespace && b.heartbeatService().ID == "" {
			// A read-only watcher finds the heartbeats here.
			if err := w.findHeartbeats(ctx, ns); err != nil {
				return err
			}
		}
		if !ns.usable() || !validName(ns.Name) {
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
			if validName(svc.Name) {
				catalog[svc.ID] = svc
			}
		}
	}
	w.catalog = catalog
	w.listedAt = b.now()
	for id := range w.services {
		if _, ok := catalog[id]; !ok {
			delete(w.services, id)
		}
	}
	return nil
}

// findHeartbeats looks for the heartbeat service in the system namespace
// ns.
func (w *watcher) findHeartbeats(ctx context.Context, ns namespace) error {
	svcs, err := listServices(ctx, w.b.api, ns)
	if isAccessDenied(err) {
		w.log.V(1).Info("skipping system namespace the policy does not grant", "namespace", ns.Name)
		return nil
	}
	if err != nil {
		return err
	}
	for _, svc := range svcs {
		if svc.Name == heartbeatService {
			w.b.foundHeartbeatService(svc)
		}
	}
	return nil
}

// readHeartbeats reads the clusterset's heartbeats if they changed. Without
// a heartbeat service (none found yet), no mcsd cluster is alive.
func (w *watcher) readHeartbeats(ctx context.Context) error {
	b := w.b
	svc := b.heartbeatService()
	if svc.ID == "" {
		return nil
	}
	query := map[string]string{attrClusterSetID: b.opts.Identity.ClusterSet}
	changed, err := w.read(ctx, svc, &w.heartbeats, query)
	if err != nil {
		return fmt.Errorf("read heartbeats: %w", err)
	}
	now := b.now()
	if !changed && len(w.beats) > 0 {
		return nil
	}
	// A heartbeat instance that disappears (its namespace deleted, say) is
	// not a death: the cluster expires when its last heartbeat does.
	for _, in := range w.heartbeats.instances {
		cluster := in.Attrs[attrClusterID]
		ms, err := strconv.ParseInt(in.Attrs[attrHeartbeat], 10, 64)
		if cluster == "" || in.Attrs[attrRecord] != recordHeartbeat || err != nil {
			continue
		}
		ttl := b.opts.TTL
		if v, err := strconv.ParseInt(in.Attrs[attrTTL], 10, 64); err == nil && v > 0 {
			ttl = time.Duration(v) * time.Millisecond
		}
		since, _ := strconv.ParseInt(in.Attrs[attrSince], 10, 64)
		hb := w.beats[cluster]
		switch {
		case hb == nil:
			w.beats[cluster] = &beat{ms: ms, since: since, ttl: ttl, firstSeen: now}
		case hb.ms != ms:
			hb.ms = ms
			hb.since = since
			hb.ttl = ttl
			hb.changedAt = now
		}
	}
	return nil
}

// readServices reads every service whose revision moved, a few at a time.
func (w *watcher) readServices(ctx context.Context) error {
	b := w.b
	ids := slices.Sorted(maps.Keys(w.catalog))
	query := map[string]string{attrClusterSetID: b.opts.Identity.ClusterSet}
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	sem := make(chan struct{}, b.opts.Concurrency)
	for _, id := range ids {
		svc := w.catalog[id]
		c := w.services[id]
		if c == nil {
			c = &serviceCache{}
			w.services[id] = c
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			_, err := w.read(ctx, svc, c, query)
			if isAccessDenied(err) {
				// Keep what was read before: an error deletes nothing.
				w.log.V(1).Info("skipping service the policy does not grant", "namespace", svc.NS.Name, "name", svc.Name)
				return
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// read refreshes c from svc when the service's revision moved, and reports
// whether it did. A service that no longer exists reads as empty.
func (w *watcher) read(ctx context.Context, svc service, c *serviceCache, query map[string]string) (bool, error) {
	b := w.b
	rev, err := b.api.DiscoverInstancesRevision(ctx, &sd.DiscoverInstancesRevisionInput{
		NamespaceName: aws.String(svc.NS.HTTPName),
		ServiceName:   aws.String(svc.Name),
	})
	if isNotFound(err) {
		changed := !c.read || len(c.instances) > 0
		*c = serviceCache{read: true, revision: -1}
		return changed, nil
	}
	if err != nil {
		return false, fmt.Errorf("discover instances revision of %s/%s: %w", svc.NS.Name, svc.Name, err)
	}
	revision := aws.ToInt64(rev.InstancesRevision)
	if c.read && c.revision == revision {
		return false, nil
	}
	// The revision is read before the instances: a change in between
	// moves it again, and the next poll reads the instances again.
	insts, err := b.discover(ctx, svc, query)
	if isNotFound(err) {
		insts, err = nil, nil
	}
	if err != nil {
		return false, err
	}
	*c = serviceCache{read: true, revision: revision, instances: insts}
	return true, nil
}

// snapshot builds the records the watcher knows, less those of clusters
// whose heartbeat expired.
func (w *watcher) snapshot() *snapshot {
	b := w.b
	now := b.now()
	s := newSnapshot()
	alive := map[string]bool{}
	for c, hb := range w.beats {
		if hb.alive(now) {
			alive[c] = true
			cl := registry.Cluster{ID: c, LastSeen: time.UnixMilli(hb.ms).UTC(), TTL: hb.ttl}
			if hb.since > 0 {
				cl.Since = time.UnixMilli(hb.since).UTC()
			}
			s.clusters[c] = cl
		}
	}
	byKey := map[registry.ServiceKey][]instance{}
	for id, c := range w.services {
		svc, ok := w.catalog[id]
		if !ok {
			continue
		}
		key := registry.ServiceKey{Namespace: svc.NS.Name, Name: svc.Name}
		byKey[key] = append(byKey[key], c.instances...)
	}
	for key, insts := range byKey {
		for cluster, r := range decodeService(b.opts.Identity.ClusterSet, key, slices.Clone(insts)) {
			if r.MCSD && !alive[cluster] {
				continue
			}
			if !r.MCSD {
				// The AWS controller's records live as long as they are
				// there; it withdraws them itself.
				if _, ok := s.clusters[cluster]; !ok {
					s.clusters[cluster] = registry.Cluster{ID: cluster}
				}
			}
			id := registry.RecordID{Cluster: cluster, Service: key}
			if r.Export != nil {
				s.exports[id] = *r.Export
			}
			if r.Endpoints != nil {
				s.endpoints[id] = *r.Endpoints
			}
		}
	}
	return s
}

// snapshot is the state a handler has been given.
type snapshot struct {
	exports   map[registry.RecordID]registry.Export
	endpoints map[registry.RecordID]registry.Endpoints
	clusters  map[string]registry.Cluster
}

func newSnapshot() *snapshot {
	return &snapshot{
		exports:   map[registry.RecordID]registry.Export{},
		endpoints: map[registry.RecordID]registry.Endpoints{},
		clusters:  map[string]registry.Cluster{},
	}
}

func (s *snapshot) full() registry.Update {
	u := newSnapshot().diff(s)
	u.Full = true
	return u
}

// diff is the update that turns s into next. A cluster counts as changed
// only when it appears: its LastSeen moves with every heartbeat.
func (s *snapshot) diff(next *snapshot) registry.Update {
	var u registry.Update
	for id, x := range next.exports {
		if old, ok := s.exports[id]; !ok || !reflect.DeepEqual(old, x) {
			u.Exports = append(u.Exports, x)
		}
	}
	for id := range s.exports {
		if _, ok := next.exports[id]; !ok {
			u.DeletedExports = append(u.DeletedExports, id)
		}
	}
	for id, x := range next.endpoints {
		if old, ok := s.endpoints[id]; !ok || !reflect.DeepEqual(old, x) {
			u.Endpoints = append(u.Endpoints, x)
		}
	}
	for id := range s.endpoints {
		if _, ok := next.endpoints[id]; !ok {
			u.DeletedEndpoints = append(u.DeletedEndpoints, id)
		}
	}
	for id, c := range next.clusters {
		if _, ok := s.clusters[id]; !ok {
			u.Clusters = append(u.Clusters, c)
		}
	}
	for id := range s.clusters {
		if _, ok := next.clusters[id]; !ok {
			u.DeletedClusters = append(u.DeletedClusters, id)
		}
	}
	slices.SortFunc(u.Exports, func(a, b registry.Export) int {
		return compareRecordIDs(registry.RecordID{Cluster: a.Cluster, Service: a.Service}, registry.RecordID{Cluster: b.Cluster, Service: b.Service})
	})
	slices.SortFunc(u.Endpoints, func(a, b registry.Endpoints) int {
		return compareRecordIDs(registry.RecordID{Cluster: a.Cluster, Service: a.Service}, registry.RecordID{Cluster: b.Cluster, Service: b.Service})
	})
	slices.SortFunc(u.DeletedExports, compareRecordIDs)
	slices.SortFunc(u.DeletedEndpoints, compareRecordIDs)
	slices.SortFunc(u.Clusters, func(a, b registry.Cluster) int { return cmp.Compare(a.ID, b.ID) })
	slices.Sort(u.DeletedClusters)
	return u
}

func compareRecordIDs(a, b registry.RecordID) int {
	return cmp.Or(cmp.Compare(a.Service.Namespace, b.Service.Namespace), cmp.Compare(a.Service.Name, b.Service.Name), cmp.Compare(a.Cluster, b.Cluster))
}
