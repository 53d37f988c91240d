package cloudmap

import (
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
	"github.com/aws/aws-sdk-go-v2/service/servicediscovery/types"
	"github.com/go-logr/logr"
	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/internal/writelock"
)

var _ registry.Registry = (*Backend)(nil)

// Name is the backend's name in metrics and logs, and its URL scheme.
const Name = "cloudmap"

// Backend implements registry.Registry.
func (b *Backend) Backend() string { return Name }

// Backend is the Cloud Map registry backend opened for one cluster.
type Backend struct {
	*reader
	enc encoder

	cancel    context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once

	// since is when this cluster's records last became live, in Unix ms: the
	// heartbeat carries it.
	since int64

	// sem serializes writes; it guards own.
	sem *writelock.Lock
	own map[registry.ServiceKey]*ownService
	// ownWatch follows what the watch reads of own (see guard).
	ownWatch ownWatch
}

// reader is what reading a clusterset takes; Backend and Watcher share it.
type reader struct {
	opts Options
	api  API
	log  logr.Logger
	now  func() time.Time

	// ctx is canceled by Close; it bounds the heartbeat and the watches.
	ctx context.Context

	// dir is what the reader knows of namespaces and services.
	dir *directory

	// systemMu guards system, the Cloud Map services of the system
	// namespace by name (heartbeatService, recordsService; absent until
	// found), and ops.
	systemMu sync.Mutex
	system   map[string]service
	// ops are the operations of this cluster's own writes, by id: the
	// change feed needs no GetOperation for them.
	ops map[string]opTarget
	// latestOp is the latest UpdateDate of an operation the reader has
	// seen, on Cloud Map's clock; zero before the first.
	latestOp time.Time
}

// opTarget is what an instance operation changed.
type opTarget struct {
	service, instance string
	at                time.Time
}

// newReader makes the reader of opts over api, and the function that
// cancels its context.
func newReader(ctx context.Context, api API, opts Options) (*reader, context.CancelFunc) {
	// The clusterset; the cluster is left to the caller's logger (mcsd's
	// manager names it once).
	log := logr.FromContextOrDiscard(ctx).WithValues("clusterSet", opts.Identity.ClusterSet)
	now := opts.now
	if now == nil {
		now = time.Now
	}
	rctx, cancel := context.WithCancel(logr.NewContext(context.Background(), log))
	return &reader{
		opts:   opts,
		api:    newLimitedAPI(api, opts.RateLimits),
		log:    log,
		now:    now,
		ctx:    rctx,
		dir:    newDirectory(),
		system: map[string]service{},
		ops:    map[string]opTarget{},
	}, cancel
}

// systemService is the service name of the system namespace; its ID is ""
// until it is known.
func (r *reader) systemService(name string) service {
	r.systemMu.Lock()
	defer r.systemMu.Unlock()
	return r.system[name]
}

// setSystemService records svc as a service of the system namespace.
func (r *reader) setSystemService(svc service) {
	r.systemMu.Lock()
	defer r.systemMu.Unlock()
	r.system[svc.Name] = svc
}

// noteOp records the target of an operation of this cluster's own writes.
func (r *reader) noteOp(id string, target opTarget) {
	r.systemMu.Lock()
	defer r.systemMu.Unlock()
	target.at = time.Now()
	r.ops[id] = target
	if len(r.ops)%256 == 0 {
		for k, t := range r.ops {
			if time.Since(t.at) > opMemory {
				delete(r.ops, k)
			}
		}
	}
}

// opMemory is how long the reader remembers its own operations: longer
// than any poll's window.
const opMemory = 15 * time.Minute

func (r *reader) ownOp(id string) (opTarget, bool) {
	r.systemMu.Lock()
	defer r.systemMu.Unlock()
	t, ok := r.ops[id]
	return t, ok
}

// sawOp records the UpdateDate of an operation, Cloud Map's clock.
func (r *reader) sawOp(updated *time.Time) {
	if updated == nil {
		return
	}
	r.systemMu.Lock()
	defer r.systemMu.Unlock()
	if updated.After(r.latestOp) {
		r.latestOp = *updated
	}
}

func (r *reader) latestOperation() time.Time {
	r.systemMu.Lock()
	defer r.systemMu.Unlock()
	return r.latestOp
}

// ownService is what this cluster has in one Cloud Map service.
type ownService struct {
	svc service
	// created is the export's creation time in Unix ms, fixed for as long
	// as the cluster has any record of the Service.
	created int64
	// st is the state last written in full.
	st state
	// stored is every instance of this cluster in the service as Cloud
	// Map holds it, attributes of others included: its endpoints, and a
	// service record written where mcsd kept it before (to be deleted).
	stored map[string]map[string]string
	// record is the cluster's service record in the records service as
	// Cloud Map holds it, nil when there is none.
	record map[string]string
}

// New builds a Cloud Map client (see NewClient) and opens the backend for
// opts.Identity. It takes its logger from ctx, and ctx bounds the start only.
func New(ctx context.Context, opts Options) (*Backend, error) {
	opts.Default()
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("cloudmap registry options: %w", err)
	}
	client, err := NewClient(ctx, opts)
	if err != nil {
		return nil, err
	}
	return open(ctx, client, opts)
}

// NewFromAPI opens the backend over api, for tests and callers that build
// their own client. The client fields of opts (Region, Endpoint,
// Credentials, MaxAttempts, MaxBackoff) are ignored.
func NewFromAPI(ctx context.Context, api API, opts Options) (*Backend, error) {
	opts.Default()
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("cloudmap registry options: %w", err)
	}
	return open(ctx, api, opts)
}

func open(ctx context.Context, api API, opts Options) (*Backend, error) {
	r, cancel := newReader(ctx, api, opts)
	b := &Backend{
		reader:   r,
		enc:      newEncoder(opts.Identity),
		cancel:   cancel,
		done:     make(chan struct{}),
		sem:      writelock.New(r.ctx.Done()),
		own:      map[registry.ServiceKey]*ownService{},
		ownWatch: newOwnWatch(),
	}
	if err := b.start(ctx); err != nil {
		cancel()
		return nil, fmt.Errorf("open cloudmap registry: %w", err)
	}
	go b.heartbeatLoop()
	return b, nil
}

// Close stops the heartbeat. It withdraws nothing: importers ignore the
// cluster's records once its heartbeat is older than the TTL, and the
// cluster deletes them when it starts again after that.
func (b *Backend) Close() error {
	b.closeOnce.Do(func() {
		b.cancel()
		<-b.done
	})
	return nil
}

// start takes over the cluster's records, or deletes them when its
// heartbeat has expired, and writes the heartbeat.
func (b *Backend) start(ctx context.Context) error {
	for _, name := range []string{heartbeatService, recordsService} {
		svc, err := b.ensureService(ctx, b.opts.SystemNamespace, name)
		if err != nil {
			return fmt.Errorf("%s service: %w", name, err)
		}
		b.setSystemService(svc)
	}
	query := map[string]string{attrClusterSetID: b.opts.Identity.ClusterSet, attrClusterID: b.opts.Identity.Cluster}
	beats, err := b.discover(ctx, b.systemService(heartbeatService), query)
	if err != nil {
		return fmt.Errorf("read own heartbeat: %w", err)
	}
	// The records live while the heartbeat is younger than the TTL the
	// previous run published with it.
	var last, since int64
	ttl := b.opts.TTL
	for _, in := range beats {
		if in.ID == heartbeatID(b.enc.prefix) {
			last, _ = strconv.ParseInt(in.Attrs[attrHeartbeat], 10, 64)
			since, _ = strconv.ParseInt(in.Attrs[attrSince], 10, 64)
			if v, err := strconv.ParseInt(in.Attrs[attrTTL], 10, 64); err == nil && v > 0 {
				ttl = time.Duration(v) * time.Millisecond
			}
		}
	}
	alive := last > 0 && b.now().Sub(time.UnixMilli(last)) <= ttl
	b.since = since
	if !alive || since <= 0 {
		b.since = b.now().UnixMilli()
	}

	found, inherited, err := b.scanOwn(ctx, query)
	if err != nil {
		return err
	}
	stale, migrated, adopted := 0, 0, 0
	for _, key := range slices.SortedFunc(maps.Keys(found), registry.ServiceKey.Compare) {
		o := found[key]
		if alive {
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
			continue
		}
		// The heartbeat expired: mcsd's records go. The AWS controller's
		// are not subject to heartbeats: they are taken over (below).
		ids := slices.Sorted(maps.Keys(o.stored))
		ids = slices.DeleteFunc(ids, func(id string) bool { _, aws := inherited[key][id]; return aws })
		err := b.parallel(ctx, len(ids), func(ctx context.Context, i int) error {
			return b.deregister(ctx, o.svc, ids[i])
		}, func(int) { stale++ })
		if err == nil && o.record != nil {
			if err = b.deleteRecord(ctx, key); err == nil {
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
	if alive {
		b.log.Info("took over records", "services", len(b.own), "movedRecords", migrated)
	} else if stale > 0 {
		b.log.Info("deleted expired records", "instances", stale)
	}
	if adopted > 0 {
		// Replaced by mcsd's own at the next put of each Service, then
		// deregistered (see applyTo); withdrawn if the Service is no
		// longer exported.
		b.log.Info("took over the AWS Cloud Map MCS controller's instances of this cluster", "instances", adopted)
	}
	if err := b.beat(ctx); err != nil {
		return fmt.Errorf("write heartbeat: %w", err)
	}
	return nil
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
	recs, err := b.discover(ctx, b.systemService(recordsService), query)
	if err != nil && !isNotFound(err) {
		return nil, nil, fmt.Errorf("read own service records: %w", err)
	}
	for _, in := range recs {
		key, ok := recordKey(in.Attrs)
		if !ok || in.ID != recordID(b.enc.prefix, key) {
			continue
		}
		o := get(key)
		o.record = in.Attrs
		mine[key] = append(mine[key], in)
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
				if c, err := strconv.ParseInt(in.Attrs[attrCreation], 10, 64); err == nil && (o.created == 0 || c < o.created) {
					o.created = c
				}
			}
		}
	}
	return out, inherited, nil
}

// discover reads the instances of svc that match query: DiscoverInstances
// returns at most 1,000 and has no pagination, so a service with more is
// read again with ListInstances, page by page, and filtered here.
func (r *reader) discover(ctx context.Context, svc service, query map[string]string) ([]instance, error) {
	insts, _, err := r.discoverRevision(ctx, svc, query)
	return insts, err
}

// discoverRevision is discover, with the service's instances revision that
// DiscoverInstances returns with them, -1 when unknown.
func (r *reader) discoverRevision(ctx context.Context, svc service, query map[string]string) ([]instance, int64, error) {
	out, err := r.api.DiscoverInstances(ctx, &sd.DiscoverInstancesInput{
		NamespaceName:   aws.String(svc.NS.HTTPName),
		ServiceName:     aws.String(svc.Name),
		MaxResults:      aws.Int32(discoverMax),
		QueryParameters: query,
		HealthStatus:    types.HealthStatusFilterAll,
	})
	if err != nil {
		return nil, -1, fmt.Errorf("discover instances of %s/%s: %w", svc.NS.Name, svc.Name, err)
	}
	if len(out.Instances) < discoverMax {
		revision := int64(-1)
		if out.InstancesRevision != nil {
			revision = *out.InstancesRevision
		}
		insts := make([]instance, 0, len(out.Instances))
		for _, in := range out.Instances {
			insts = append(insts, instance{ID: aws.ToString(in.InstanceId), Attrs: in.Attributes})
		}
		return insts, revision, nil
	}
	var insts []instance
	p := sd.NewListInstancesPaginator(r.api, &sd.ListInstancesInput{ServiceId: aws.String(svc.ID), MaxResults: aws.Int32(100)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, -1, fmt.Errorf("list instances of %s/%s: %w", svc.NS.Name, svc.Name, err)
		}
	next:
		for _, in := range page.Instances {
			for k, v := range query {
				if in.Attributes[k] != v {
					continue next
				}
			}
			insts = append(insts, instance{ID: aws.ToString(in.Id), Attrs: in.Attributes})
		}
	}
	return insts, -1, nil
}

// discoverMax is the most instances one DiscoverInstances call returns.
const discoverMax = 1000

// lock takes the write lock; it fails once the backend is closed.
func (b *Backend) lock(ctx context.Context) error { return b.sem.Lock(ctx) }

func (b *Backend) unlock() { b.sem.Unlock() }

// PutExport stores this cluster's export of a Service.
func (b *Backend) PutExport(ctx context.Context, key registry.ServiceKey, spec registry.ServiceSpec) error {
	return b.put(ctx, key, &spec, nil, "put export")
}

// PutEndpoints stores this cluster's endpoints of an exported Service.
func (b *Backend) PutEndpoints(ctx context.Context, key registry.ServiceKey, groups []registry.EndpointGroup) error {
	return b.put(ctx, key, nil, &groups, "put endpoints")
}

// Publish stores this cluster's export of a Service and its endpoints in
// one pass: the service record and the endpoint instances are registered as
// PutExport and PutEndpoints would (Cloud Map has no transactions; a
// watcher may see one before the other, as the feed reads them).
func (b *Backend) Publish(ctx context.Context, key registry.ServiceKey, spec registry.ServiceSpec, groups []registry.EndpointGroup) error {
	return b.put(ctx, key, &spec, &groups, "publish")
}

// put applies spec and groups, those not nil, to this cluster's records of
// key.
func (b *Backend) put(ctx context.Context, key registry.ServiceKey, spec *registry.ServiceSpec, groups *[]registry.EndpointGroup, what string) error {
	if err := b.validService(key); err != nil {
		return err
	}
	if spec != nil && spec.Type != registry.ClusterSetIP && spec.Type != registry.Headless {
		return fmt.Errorf("export %s: service type %q: %w", key, spec.Type, registry.ErrInvalid)
	}
	if err := b.lock(ctx); err != nil {
		return err
	}
	defer b.unlock()
	st := b.current(key)
	if spec != nil {
		st.Spec = spec
	}
	if groups != nil {
		st.HasEndpoints = true
		st.Groups = *groups
	}
	if err := b.apply(ctx, key, st); err != nil {
		return fmt.Errorf("%s %s: %w", what, key, err)
	}
	return nil
}

// DeleteExport withdraws this cluster's export and endpoints of a Service:
// its endpoint instances first, its service record last.
func (b *Backend) DeleteExport(ctx context.Context, key registry.ServiceKey) error {
	if err := b.validService(key); err != nil {
		return err
	}
	if err := b.lock(ctx); err != nil {
		return err
	}
	defer b.unlock()
	if err := b.apply(ctx, key, state{}); err != nil {
		return fmt.Errorf("delete export %s: %w", key, err)
	}
	return nil
}

// Exported lists the Services this cluster has exports of.
func (b *Backend) Exported(ctx context.Context) ([]registry.ServiceKey, error) {
	if err := b.lock(ctx); err != nil {
		return nil, err
	}
	defer b.unlock()
	var out []registry.ServiceKey
	for k, o := range b.own {
		if o.st.Spec != nil {
			out = append(out, k)
		}
	}
	slices.SortFunc(out, registry.ServiceKey.Compare)
	return out, nil
}

// current is the state last written for key.
func (b *Backend) current(key registry.ServiceKey) state {
	if o := b.own[key]; o != nil {
		return o.st
	}
	return state{}
}

// apply makes this cluster's instances of key those of st: it registers the
// new and changed instances (the service record first) and deregisters the
// others (the service record last). It writes only what differs.
func (b *Backend) apply(ctx context.Context, key registry.ServiceKey, st state) error {
	o := b.own[key]
	if o == nil {
		if st.Spec == nil && !st.HasEndpoints {
			return nil
		}
		o = &ownService{created: b.now().UnixMilli(), stored: map[string]map[string]string{}}
	}
	st.Created = o.created
	desired, err := b.enc.instances(st)
	if err != nil {
		return err
	}
	if changed, err := b.endpointsChanged(o.st, st, desired); err != nil {
		return err
	} else if changed {
		st.EndpointsUpdated = b.now().UnixMilli()
		if desired, err = b.enc.instances(st); err != nil {
			return err
		}
	}
	// The service record lives in the records service, out of the AWS
	// controller's view.
	var rec *instance
	if r, ok := desired[serviceRecordID(b.enc.prefix)]; ok {
		delete(desired, r.ID)
		r.ID = recordID(b.enc.prefix, key)
		r.Attrs[attrNamespace], r.Attrs[attrService] = key.Namespace, key.Name
		if err := checkLimits(r.Attrs); err != nil {
			return fmt.Errorf("export: %w", err)
		}
		rec = &r
	}
	force := b.ownWatch.begin(key)
	defer func() {
		written := maps.Clone(desired)
		if rec != nil {
			written[rec.ID] = *rec
		}
		b.ownWatch.end(b.opts.Identity, key, written, err == nil)
	}()
	for attempt := 0; ; attempt++ {
		err = b.applyTo(ctx, key, o, rec, desired, force)
		if err == nil || attempt > 0 || !isNotFound(err) {
			break
		}
		// The service or namespace was deleted under us (for example by
		// another cluster's cleanup): its instances went with it.
		b.log.V(1).Info("cloud map service gone, creating it again", "service", key.String())
		if o.svc.ID != "" {
			b.dir.dropService(o.svc.ID)
		}
		o.svc = service{}
		clear(o.stored)
	}
	if err != nil {
		if len(o.stored) > 0 || o.record != nil {
			b.own[key] = o
		}
		return err
	}
	o.st = st
	if len(desired) > 0 || rec != nil {
		b.own[key] = o
		return nil
	}
	delete(b.own, key)
	if b.opts.CleanupEmpty && o.svc.ID != "" {
		b.cleanup(ctx, o.svc)
	}
	return nil
}

// endpointsChanged reports whether a watcher would read other endpoints from
// the instances desired of st than from those of old, the state last
// written in full: then the endpoints need a new Updated stamp.
func (b *Backend) endpointsChanged(old, st state, desired map[string]instance) (bool, error) {
	if !st.HasEndpoints {
		return false, nil
	}
	if !old.HasEndpoints {
		return true, nil
	}
	before, err := b.enc.instances(old)
	if err != nil {
		return false, err
	}
	return !reflect.DeepEqual(endpointGroups(before), endpointGroups(desired)), nil
}

// onlyStampChanged reports whether the owned attributes of a service record
// differ in the endpoints' Updated stamp only.
func onlyStampChanged(old, next map[string]string) bool {
	a, b := ownedAttrs(old), ownedAttrs(next)
	if a[attrEndpointsUpdated] == b[attrEndpointsUpdated] {
		return false
	}
	delete(a, attrEndpointsUpdated)
	delete(b, attrEndpointsUpdated)
	return maps.Equal(a, b)
}

// applyTo writes what differs between o and rec (the service record) and
// desired (the endpoint instances): the record first, then the endpoints,
// then the deletions, the record's last. When only the record's endpoints
// stamp changes, the record goes last, so that the stamp never comes before
// the change it dates. With force, every desired instance and the record are
// registered, even those stored.
func (b *Backend) applyTo(ctx context.Context, key registry.ServiceKey, o *ownService, rec *instance, desired map[string]instance, force bool) error {
	var puts []instance
	for _, id := range slices.Sorted(maps.Keys(desired)) {
		in := desired[id]
		if old, ok := o.stored[id]; ok {
			if sameOwned(old, in.Attrs) && !force {
				continue
			}
			in.Attrs = keepForeign(old, in.Attrs)
		}
		puts = append(puts, in)
	}
	var dels []string
	for _, id := range slices.Sorted(maps.Keys(o.stored)) {
		if _, ok := desired[id]; !ok {
			dels = append(dels, id)
		}
	}
	// A record left where mcsd kept it before goes last.
	legacy := serviceRecordID(b.enc.prefix)
	slices.SortStableFunc(dels, func(x, y string) int { return boolRank(x == legacy) - boolRank(y == legacy) })
	var recPut *instance
	recFirst := false
	if rec != nil && (o.record == nil || !sameOwned(o.record, rec.Attrs) || force) {
		r := *rec
		if o.record != nil {
			r.Attrs = keepForeign(o.record, r.Attrs)
		}
		recPut = &r
		recFirst = o.record == nil || !onlyStampChanged(o.record, r.Attrs)
	}
	recDel := rec == nil && o.record != nil
	if len(puts) == 0 && len(dels) == 0 && recPut == nil && !recDel {
		return nil
	}
	// The Service's Cloud Map service exists from its export on, as the
	// AWS controller makes it, endpoints or not.
	if (len(puts) > 0 || recPut != nil) && o.svc.ID == "" {
		svc, err := b.ensureService(ctx, key.Namespace, key.Name)
		if err != nil {
			return err
		}
		o.svc = svc
	}
	if recPut != nil && recFirst {
		if err := b.writeRecord(ctx, *recPut); err != nil {
			return err
		}
		o.record = recPut.Attrs
	}
	err := b.parallel(ctx, len(puts), func(ctx context.Context, i int) error {
		return b.register(ctx, o.svc, puts[i])
	}, func(i int) { o.stored[puts[i].ID] = puts[i].Attrs })
	if err != nil {
		return err
	}
	var last []string
	if n := len(dels); n > 0 && dels[n-1] == legacy {
		dels, last = dels[:n-1], dels[n-1:]
	}
	err = b.parallel(ctx, len(dels), func(ctx context.Context, i int) error {
		return b.deregister(ctx, o.svc, dels[i])
	}, func(i int) { delete(o.stored, dels[i]) })
	if err != nil {
		return err
	}
	for _, id := range last {
		if err := b.deregister(ctx, o.svc, id); err != nil {
			return err
		}
		delete(o.stored, id)
	}
	if recDel {
		if err := b.deleteRecord(ctx, key); err != nil {
			return err
		}
		o.record = nil
	}
	if recPut != nil && !recFirst {
		if err := b.writeRecord(ctx, *recPut); err != nil {
			return err
		}
		o.record = recPut.Attrs
	}
	return nil
}

// keepForeign returns next with the attributes others added to old, if
// that still fits in an instance.
func keepForeign(old, next map[string]string) map[string]string {
	merged := maps.Clone(next)
	for k, v := range old {
		if !owned(k) {
			merged[k] = v
		}
	}
	if checkLimits(merged) != nil {
		return next
	}
	return merged
}

// writeRecord registers a service record in the records service, creating
// that service again if it was deleted.
func (b *Backend) writeRecord(ctx context.Context, in instance) error {
	err := b.register(ctx, b.systemService(recordsService), in)
	if !isNotFound(err) {
		return err
	}
	svc, err := b.recreateSystemService(ctx, recordsService)
	if err != nil {
		return err
	}
	return b.register(ctx, svc, in)
}

// deleteRecord deregisters this cluster's service record of key. A records
// service that is gone holds no record.
func (b *Backend) deleteRecord(ctx context.Context, key registry.ServiceKey) error {
	err := b.deregister(ctx, b.systemService(recordsService), recordID(b.enc.prefix, key))
	if isNotFound(err) {
		return nil
	}
	return err
}

// recreateSystemService looks up or creates the service name of the system
// namespace again, after it turned out deleted.
func (b *Backend) recreateSystemService(ctx context.Context, name string) (service, error) {
	if old := b.systemService(name); old.ID != "" {
		b.dir.dropService(old.ID)
	}
	svc, err := b.ensureService(ctx, b.opts.SystemNamespace, name)
	if err != nil {
		return service{}, err
	}
	b.setSystemService(svc)
	return svc, nil
}

func boolRank(v bool) int {
	if v {
		return 1
	}
	return 0
}

// parallel runs do for 0..n-1 with at most Concurrency at once, calls ok
// (serially) for each that succeeded, and returns the errors.
func (b *Backend) parallel(ctx context.Context, n int, do func(context.Context, int) error, ok func(int)) error {
	var mu sync.Mutex
	return b.each(ctx, n, func(ctx context.Context, i int) error {
		if err := do(ctx, i); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		ok(i)
		return nil
	})
}

// each runs do for 0 to n-1, Concurrency at a time, and returns their
// errors joined.
func (r *reader) each(ctx context.Context, n int, do func(context.Context, int) error) error {
	var mu sync.Mutex
	var errs []error
	var g errgroup.Group
	g.SetLimit(r.opts.Concurrency)
	for i := range n {
		g.Go(func() error {
			if err := do(ctx, i); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
			return nil // all run: their errors are joined
		})
	}
	_ = g.Wait()
	return errors.Join(errs...)
}

// register writes one instance and waits until Cloud Map has stored it.
func (b *Backend) register(ctx context.Context, svc service, in instance) error {
	out, err := b.api.RegisterInstance(ctx, &sd.RegisterInstanceInput{
		ServiceId:  aws.String(svc.ID),
		InstanceId: aws.String(in.ID),
		Attributes: in.Attrs,
	})
	if err != nil {
		return fmt.Errorf("register instance %s: %w", in.ID, err)
	}
	b.noteOp(aws.ToString(out.OperationId), opTarget{service: svc.ID, instance: in.ID})
	if _, err := b.waitOperation(ctx, aws.ToString(out.OperationId)); err != nil {
		return fmt.Errorf("register instance %s: %w", in.ID, err)
	}
	return nil
}

// deregister deletes one instance and waits until Cloud Map has deleted it.
// Deleting what is not there is not an error.
func (b *Backend) deregister(ctx context.Context, svc service, id string) error {
	out, err := b.api.DeregisterInstance(ctx, &sd.DeregisterInstanceInput{
		ServiceId:  aws.String(svc.ID),
		InstanceId: aws.String(id),
	})
	if errorCode(err) == "InstanceNotFound" {
		return nil
	}
	if err != nil {
		return fmt.Errorf("deregister instance %s: %w", id, err)
	}
	b.noteOp(aws.ToString(out.OperationId), opTarget{service: svc.ID, instance: id})
	if _, err := b.waitOperation(ctx, aws.ToString(out.OperationId)); err != nil {
		return fmt.Errorf("deregister instance %s: %w", id, err)
	}
	return nil
}

// cleanup deletes svc if mcsd created it and it is empty, then its namespace
// if mcsd created it and it is empty. Cloud Map refuses to delete what still
// holds instances or services, which makes the check and the deletion one
// step; a refusal is no error.
func (b *Backend) cleanup(ctx context.Context, svc service) {
	if !svc.Ours {
		return
	}
	_, err := b.api.DeleteService(ctx, &sd.DeleteServiceInput{Id: aws.String(svc.ID)})
	switch {
	case isInUse(err):
		return
	case isNotFound(err):
	case err != nil:
		b.log.Error(err, "cannot delete empty cloud map service", "namespace", svc.NS.Name, "name", svc.Name)
		return
	default:
		b.log.Info("deleted empty cloud map service", "namespace", svc.NS.Name, "name", svc.Name)
	}
	b.dir.dropService(svc.ID)
	if !svc.NS.Ours || svc.NS.Name == b.opts.SystemNamespace {
		return
	}
	out, err := b.api.DeleteNamespace(ctx, &sd.DeleteNamespaceInput{Id: aws.String(svc.NS.ID)})
	switch {
	case isInUse(err), isNotFound(err):
		return
	case err != nil:
		b.log.Error(err, "cannot delete empty cloud map namespace", "namespace", svc.NS.Name)
		return
	}
	if _, err := b.waitOperation(ctx, aws.ToString(out.OperationId)); err != nil {
		b.log.V(1).Info("namespace deletion did not succeed", "namespace", svc.NS.Name, "reason", err.Error())
		return
	}
	b.log.Info("deleted empty cloud map namespace", "namespace", svc.NS.Name)
}

// validName reports whether s is a DNS label, which every Kubernetes
// namespace and Service name is.
func validName(s string) bool { return len(validation.IsDNS1123Label(s)) == 0 }

func (b *Backend) validService(key registry.ServiceKey) error {
	if !validName(key.Namespace) || !validName(key.Name) {
		return fmt.Errorf("service %q: %w", key, registry.ErrInvalid)
	}
	return nil
}
