package cloudmap

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

// start takes over the cluster's records, or deletes them when its
// heartbeat has expired, and writes the heartbeat.
func (b *Backend) start(ctx context.Context) error {
	ensure := func(name string) (service, error) {
		svc, err := b.ensureService(ctx, b.opts.SystemNamespace, name)
		if err != nil {
			return service{}, fmt.Errorf("%s service: %w", name, err)
		}
		b.setSystemService(svc)
		return svc, nil
	}
	if _, err := ensure(recordsService); err != nil {
		return err
	}
	// The heartbeat service's description is the last heartbeat.
	beatSvc, err := ensure(beatServiceName(b.enc.prefix))
	if err != nil {
		return err
	}
	// The records live while the heartbeat is younger than the TTL the
	// previous run published with it.
	hb, ok := decodeHeartbeat(beatSvc.Desc)
	if !ok || hb.ClusterSet != b.opts.Identity.ClusterSet || hb.Cluster != b.opts.Identity.Cluster {
		hb = heartbeat{}
	}
	alive := hb.live(b.now(), b.opts.TTL)
	if alive && b.opts.Identity.OtherInstance(hb.Instance) {
		// Another Kubernetes cluster was given this id, and runs: nothing
		// of it is touched.
		return b.opts.Identity.InUseBy(hb.Instance, hb.sinceTime())
	}
	b.since = hb.Since
	if !alive || hb.Since <= 0 {
		b.since = b.now().UnixMilli()
	}
	if alive {
		// The records live: said at once. The scan below reads every
		// namespace and service of the account; a heartbeat written only
		// after it could come past the TTL, and every watcher would
		// withdraw the cluster's records until it came.
		if err := b.beat(ctx); err != nil {
			return fmt.Errorf("write heartbeat: %w", err)
		}
	}

	stopBeats := func() {}
	if alive {
		// A scan of a large account, or a throttled one, can outlast
		// the TTL: the heartbeat is kept fresh meanwhile.
		stopBeats = b.beatUntilStopped(ctx)
	}
	found, inherited, err := b.scanOwn(ctx, b.ownQuery())
	stopBeats()
	if err != nil {
		return err
	}
	if !alive {
		// The heartbeat expired: mcsd's records go.
		if err := b.dropExpired(ctx, found, inherited); err != nil {
			return err
		}
		b.contestAfterScan(ctx, hb)
		return b.firstBeat(ctx)
	}
	migrated, adopted := 0, 0
	for _, key := range slices.SortedFunc(maps.Keys(found), registry.ServiceKey.Compare) {
		o := found[key]
		b.takeOver(key, o)
		adopted += len(inherited[key])
		if _, legacy := o.stored[serviceRecordID(b.enc.prefix)]; legacy {
			// Written by an mcsd that kept its service records beside
			// the endpoints: move the record to the records service.
			if err := b.apply(ctx, key, o.st); err != nil {
				return fmt.Errorf("move the service record of %s: %w", key, err)
			}
			migrated++
		}
	}
	b.log.Info("took over records", "services", len(b.own), "movedRecords", migrated)
	b.adoptedAWS(adopted)
	return b.firstBeat(ctx)
}

// contestAfterScan reads the heartbeat again before a start that took an
// expired cluster id writes its own: another Kubernetes cluster given the
// id, whose heartbeat (before) had expired, may have come back during the
// scan, found its own heartbeat and beaten, and written records the scan
// did not see. It yields to this backend at its next read (refresh); this
// backend takes the id back once it has stopped beating.
func (b *Backend) contestAfterScan(ctx context.Context, before heartbeat) {
	hb, ok, err := b.readBeat(ctx)
	if err != nil {
		// Unknown: taken back once, an interval and a half from now,
		// rather than a failed start that scans the account again.
		b.log.Error(err, "cannot read the heartbeat after the start's scan; taking the cluster id back once to be sure")
		b.contested = b.now().Add(b.opts.heartbeatInterval() * 3 / 2)
		return
	}
	if ok && b.opts.Identity.OtherInstance(hb.Instance) && hb.At > before.At && !b.yields(hb) {
		b.log.Info("another cluster given this cluster id came back during the start; taking the id back once it has stopped", "instance", hb.Instance)
		b.contested = b.now().Add(hb.interval(b.opts.TTL) * 3 / 2)
	}
}

// firstBeat writes the heartbeat at the end of a start.
func (b *Backend) firstBeat(ctx context.Context) error {
	if err := b.beat(ctx); err != nil {
		return fmt.Errorf("write heartbeat: %w", err)
	}
	return nil
}

// adoptedAWS says that the backend took over n instances the AWS
// controller registered for this cluster.
func (b *Backend) adoptedAWS(n int) {
	if n > 0 {
		// Replaced by mcsd's own at the next put of each Service, then
		// deregistered (see applyTo); withdrawn if the Service is no
		// longer exported.
		b.log.Info("took over the AWS Cloud Map MCS controller's instances of this cluster", "instances", n)
	}
}

// dropExpired deletes the cluster's records found (scanOwn), read while its
// heartbeat was expired: every watcher ignores them, and they may be
// another Kubernetes cluster's, given this id while this one was away. The
// AWS controller's instances are not subject to heartbeats: they are taken
// over.
func (b *Backend) dropExpired(ctx context.Context, found map[registry.ServiceKey]*ownService, inherited map[registry.ServiceKey]map[string]map[string]string) error {
	stale, adopted := 0, 0
	for _, key := range slices.SortedFunc(maps.Keys(found), registry.ServiceKey.Compare) {
		o := found[key]
		ids := slices.Sorted(maps.Keys(o.stored))
		ids = slices.DeleteFunc(ids, func(id string) bool { _, aws := inherited[key][id]; return aws })
		err := b.parallel(ctx, len(ids), func(ctx context.Context, i int) error {
			return b.deregister(ctx, o.svc, ids[i])
		}, func(int) { stale++ })
		if err == nil && o.record != nil {
			if err = b.deleteRecord(ctx, o, key); err == nil {
				stale++
			}
		}
		if err != nil {
			return fmt.Errorf("delete expired records of %s: %w", key, err)
		}
		if aws := inherited[key]; len(aws) > 0 {
			st, _ := decodeOwn(b.opts.Identity, key, instances(aws))
			b.takeOver(key, &ownService{svc: o.svc, created: st.Created, st: st, stored: aws})
			adopted += len(aws)
		}
	}
	if stale > 0 {
		b.log.Info("deleted expired records", "instances", stale)
	}
	b.adoptedAWS(adopted)
	return nil
}

// listRecordsServices finds the records services of the system namespace
// (recordsName).
func (b *Backend) listRecordsServices(ctx context.Context) error {
	sys, ok := b.dir.namespaceNamed(b.opts.SystemNamespace)
	if !ok {
		return nil
	}
	svcs, err := listServices(ctx, b.api, sys)
	if isNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("list the records services: %w", err)
	}
	for _, svc := range svcs {
		b.dir.addService(svc)
		b.noteRecordsService(svc)
	}
	return nil
}

// ownQuery selects, in DiscoverInstances, the instances of this cluster:
// mcsd's and the AWS controller's.
func (b *Backend) ownQuery() map[string]string {
	return map[string]string{attrClusterSetID: b.opts.Identity.ClusterSet, attrClusterID: b.opts.Identity.Cluster}
}

// takeOver makes o the backend's record of what it wrote of key, and what
// the watch should read of it.
func (b *Backend) takeOver(key registry.ServiceKey, o *ownService) {
	b.own[key] = o
	found := map[string]instance{}
	for id, attrs := range o.stored {
		found[id] = instance{ID: id, Attrs: attrs}
	}
	if o.record != nil {
		found[recordID(b.enc.prefix, key)] = instance{ID: recordID(b.enc.prefix, key), Attrs: o.record}
	}
	b.ownWatch.seed(b.opts.Identity, key, found)
}

// instances lists stored instances by id.
func instances(stored map[string]map[string]string) []instance {
	out := make([]instance, 0, len(stored))
	for id, attrs := range stored {
		out = append(out, instance{ID: id, Attrs: attrs})
	}
	return out
}

// scanOwn finds this cluster's instances in every namespace and its service
// records, and fills the directory. The instances the AWS Cloud Map MCS
// controller registered for this cluster (the same cluster and clusterset
// attributes, no mcsd record kind) are found too: they are the cluster's
// previous writes when mcsd replaces that controller, stored with mcsd's
// and also returned apart, by Service.
func (b *Backend) scanOwn(ctx context.Context, query map[string]string) (map[registry.ServiceKey]*ownService, map[registry.ServiceKey]map[string]map[string]string, error) {
	nss, err := listNamespaces(ctx, b.api)
	if err != nil {
		return nil, nil, err
	}
	inherited := map[registry.ServiceKey]map[string]map[string]string{}
	out := map[registry.ServiceKey]*ownService{}
	mine := map[registry.ServiceKey][]instance{}
	get := func(key registry.ServiceKey) *ownService {
		o := out[key]
		if o == nil {
			o = &ownService{stored: map[string]map[string]string{}}
			out[key] = o
		}
		return o
	}
	for _, ns := range nss {
		b.dir.addNamespace(ns)
		if !ns.usable() || !validName(ns.Name) {
			continue
		}
		svcs, err := listServices(ctx, b.api, ns)
		if isAccessDenied(err) {
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		for _, svc := range svcs {
			b.dir.addService(svc)
			insts, err := b.discover(ctx, svc, query)
			if isNotFound(err) || isAccessDenied(err) {
				continue
			}
			if err != nil {
				return nil, nil, fmt.Errorf("read own records: %w", err)
			}
			key := registry.ServiceKey{Namespace: ns.Name, Name: svc.Name}
			for _, in := range insts {
				switch in.Attrs[attrRecord] {
				case recordService, recordEndpoint:
				case "":
					if inherited[key] == nil {
						inherited[key] = map[string]map[string]string{}
					}
					inherited[key][in.ID] = in.Attrs
				default:
					continue
				}
				o := get(key)
				o.svc = svc
				o.stored[in.ID] = in.Attrs
				mine[key] = append(mine[key], in)
			}
		}
	}
	if err := b.listRecordsServices(ctx); err != nil {
		return nil, nil, err
	}
	for _, rs := range b.recordsServices() {
		recs, err := b.discover(ctx, rs, query)
		if err != nil && !isNotFound(err) {
			return nil, nil, fmt.Errorf("read own service records: %w", err)
		}
		for _, in := range recs {
			key, ok := recordKey(in.Attrs)
			if !ok || in.ID != recordID(b.enc.prefix, key) {
				continue
			}
			o := get(key)
			o.record, o.recordIn = in.Attrs, rs.Name
			mine[key] = append(mine[key], in)
		}
	}
	for key, o := range out {
		if o.svc.ID == "" && validName(key.Namespace) {
			// A record without endpoint instances: the service is looked
			// up when endpoints are put.
			if ns, ok := b.dir.namespaceNamed(key.Namespace); ok {
				if svc, ok := b.dir.serviceNamed(ns.ID, key.Name); ok {
					o.svc = svc
				}
			}
		}
		if st, ok := decodeOwn(b.opts.Identity, key, mine[key]); ok {
			o.st = st
			o.created = st.Created
		}
		if o.created == 0 {
			// Endpoint instances without their service record: keep
			// their creation time.
			for _, in := range mine[key] {
				if c, err := strconv.ParseInt(in.Attrs[attrCreation], 10, 64); err == nil && c > 0 && (o.created == 0 || c < o.created) {
					o.created = c
				}
			}
		}
		if o.created == 0 {
			// No valid creation time anywhere (readers rank it last):
			// from now on, one.
			o.created = b.now().UnixMilli()
		}
	}
	return out, inherited, nil
}
