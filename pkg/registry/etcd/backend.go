package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/internal/lifetime"
	"github.com/mcsd-io/mcsd/pkg/registry/internal/writelock"
)

var _ registry.Registry = (*Backend)(nil)

// Name is the backend's name in metrics and logs, and its URL scheme
// (etcds with TLS).
const Name = "etcd"

// Backend implements registry.Registry.
func (b *Backend) Backend() string { return Name }

// Backend is the etcd registry backend opened for one cluster.
type Backend struct {
	conn
	ownsClient bool
	lessor     clientv3.Lease
	now        func() time.Time

	cancel    context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error

	// sem serializes writes and lease changes; it guards the fields below.
	sem *writelock.Lock
	// lease holds every record of this cluster.
	lease clientv3.LeaseID
	// stored is what this backend has written, key to value, loaded from
	// etcd at start: identical writes are skipped, and a lost lease is
	// repaired by writing it all again.
	stored map[string]string
	// contents is the value of an endpoints key without its Updated stamp,
	// by key, for the keys this backend wrote or compared since it started.
	contents map[string]string

	// own is what the watch says etcd holds of the records in stored: a
	// record someone else deleted or changed is written again by the next
	// put, even of the same value. It has its own lock: the watch must not
	// wait for a write.
	own ownRecords
	// repair asks repairLoop to write the alive record again.
	repair chan struct{}
}

// ownRecords follows, for each record this backend wrote, its value and
// the revision of the write, and whether etcd no longer holds it so.
type ownRecords struct {
	mu sync.Mutex
	// lease is the backend's lease (Backend.lease, readable without sem).
	lease clientv3.LeaseID
	recs  map[string]ownRecord
}

type ownRecord struct {
	value string
	// rev is the revision of the last write; 0 while a write is under way
	// or unknown.
	rev int64
	// lost: etcd holds no longer what this backend wrote.
	lost bool
}

// conn is what reading a clusterset takes; Backend and Watcher share it.
type conn struct {
	opts Options
	keys keys
	cli  *clientv3.Client
	log  logr.Logger
	// ctx is canceled by Close; it bounds the own goroutines and the watches.
	ctx context.Context
}

// newConn makes the conn of opts over cli, and the function that cancels its
// context.
func newConn(ctx context.Context, cli *clientv3.Client, opts Options) (conn, context.CancelFunc) {
	log := logr.FromContextOrDiscard(ctx).WithValues(logValues(opts.Identity)...)
	cctx, cancel := context.WithCancel(logr.NewContext(context.Background(), log))
	return conn{opts: opts, keys: newKeys(opts.Prefix, opts.Identity.ClusterSet), cli: cli, log: log, ctx: cctx}, cancel
}

// eachMember runs f, an idempotent request, until it succeeds, as many
// times as the client has endpoints: etcd's client spreads requests over the
// members, and a member cut off from the others times out (after seconds)
// while the others answer, so one failed try is not a failed request. Every
// try but the last gets an equal share of RequestTimeout, at least a second
// (or all of it, if less); the last gets what ctx leaves (callers that need
// a bound, the watch's reads, set one). Only errors that say no answer came
// (a timeout, an unavailable member, no leader) are tried again; a refused
// permission or a missing lease is an answer. It returns the last try's
// error.
func (c *conn) eachMember(ctx context.Context, f func(context.Context) error) error {
	tries := max(1, len(c.cli.Endpoints()))
	perTry := max(c.opts.RequestTimeout/time.Duration(tries), min(c.opts.RequestTimeout, minTry))
	var err error
	for i := range tries {
		tctx, cancel := ctx, context.CancelFunc(func() {})
		if i < tries-1 {
			tctx, cancel = context.WithTimeout(ctx, perTry)
		}
		err = f(tctx)
		cancel()
		if err == nil {
			if i > 0 {
				logr.FromContextOrDiscard(ctx).V(1).Info("registry request succeeded after failed tries", "tries", i+1)
			}
			return nil
		}
		if ctx.Err() != nil || !unanswered(err) {
			return err
		}
	}
	return err
}

// minTry is the least time eachMember gives one try.
const minTry = time.Second

// unanswered reports whether err says that no member answered the request:
// a timeout, a member unavailable or without a leader.
func unanswered(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	code := status.Code(err)
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		code = ee.Code()
	}
	return code == codes.Unavailable || code == codes.DeadlineExceeded
}

// logValues are the logger's key-value pairs of id: the clusterset. The
// cluster is left to the caller's logger (mcsd's manager names it once).
func logValues(id registry.Identity) []any {
	return []any{"clusterSet", id.ClusterSet}
}

// New connects to etcd and opens the backend for opts.Identity. It takes its
// logger from ctx, and ctx bounds the start only.
func New(ctx context.Context, opts Options) (*Backend, error) {
	opts.Default()
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("etcd registry options: %w", err)
	}
	// A controller starting beside its registry waits a moment for a
	// refused connection to be accepted.
	cli, err := newClient(ctx, opts, opts.DialTimeout)
	if err != nil {
		return nil, err
	}
	b, err := open(ctx, cli, opts, true)
	if err != nil {
		return nil, errors.Join(err, cli.Close())
	}
	return b, nil
}

// NewClient connects to the etcd of opts, with its TLS and credentials, for
// other uses than a Backend or Watcher (such as SetupAuth). Only the
// connection fields of opts are used.
func NewClient(opts Options) (*clientv3.Client, error) {
	opts.Default()
	if err := opts.validateClient(); err != nil {
		return nil, fmt.Errorf("etcd client options: %w", err)
	}
	return newClient(context.Background(), opts, 0)
}

// newClient connects to the etcd of opts, once probe finds no cause that
// retrying cannot fix (a refused connection or an unresolved name only
// after settle). ctx bounds the probe.
func newClient(ctx context.Context, opts Options, settle time.Duration) (*clientv3.Client, error) {
	tlsConfig, err := opts.tlsConfig()
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, settle+3*probeTimeout)
	defer cancel()
	if err := probe(pctx, opts.Endpoints, tlsConfig, settle); err != nil {
		return nil, err
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:            opts.Endpoints,
		DialTimeout:          opts.DialTimeout,
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: opts.DialTimeout,
		TLS:                  tlsConfig,
		Username:             opts.Username,
		Password:             opts.Password,
		Logger:               zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 250 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: retryCap(opts.TTL)},
			MinConnectTimeout: opts.DialTimeout,
		})},
	})
	if err != nil {
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	return cli, nil
}

// NewFromClient opens the backend for opts.Identity over an existing client,
// which Close leaves open. The connection fields of opts are ignored.
func NewFromClient(ctx context.Context, cli *clientv3.Client, opts Options) (*Backend, error) {
	opts.Default()
	if err := opts.validateBackend(); err != nil {
		return nil, fmt.Errorf("etcd registry options: %w", err)
	}
	return open(ctx, cli, opts, false)
}

func open(ctx context.Context, cli *clientv3.Client, opts Options, ownsClient bool) (*Backend, error) {
	c, cancel := newConn(ctx, cli, opts)
	b := &Backend{
		conn:       c,
		ownsClient: ownsClient,
		lessor:     clientv3.NewLease(cli),
		now:        time.Now,
		cancel:     cancel,
		done:       make(chan struct{}),
		sem:        writelock.New(c.ctx.Done()),
		stored:     map[string]string{},
		contents:   map[string]string{},
		own:        ownRecords{recs: map[string]ownRecord{}},
		repair:     make(chan struct{}, 1),
	}
	sctx, scancel := context.WithTimeout(ctx, opts.RequestTimeout)
	defer scancel()
	if err := b.start(sctx); err != nil {
		cancel()
		return nil, errors.Join(fmt.Errorf("open etcd registry: %w", b.permissionHint(err)), b.lessor.Close())
	}
	go b.keepAlive()
	go b.repairLoop()
	return b, nil
}

// Close stops renewing the lease and releases the client if New made it. It
// withdraws nothing: the records expire with the lease unless the cluster
// opens a backend again within the TTL.
func (b *Backend) Close() error {
	b.closeOnce.Do(func() {
		b.cancel()
		<-b.done
		b.closeErr = b.lessor.Close()
		if b.ownsClient {
			b.closeErr = errors.Join(b.closeErr, b.cli.Close())
		}
	})
	return b.closeErr
}

// lock takes the write lock; it fails once the backend is closed.
func (b *Backend) lock(ctx context.Context) error { return b.sem.Lock(ctx) }

func (b *Backend) unlock() { b.sem.Unlock() }

// PutExport stores this cluster's export of a Service.
func (b *Backend) PutExport(ctx context.Context, key registry.ServiceKey, spec registry.ServiceSpec) error {
	rec, err := b.exportRecord(key, spec)
	if err != nil {
		return err
	}
	if err := b.lock(ctx); err != nil {
		return err
	}
	defer b.unlock()
	if err := b.putLocked(ctx, rec); err != nil {
		return fmt.Errorf("put export %s: %w", key, err)
	}
	return nil
}

// Publish stores this cluster's export of a Service and its endpoints in
// one transaction: watchers see both in one event. Records equal to the
// stored ones are not written. Two records too large for one etcd request
// together are written one after the other, the endpoints first, so that
// watchers still never see a new export without them.
func (b *Backend) Publish(ctx context.Context, key registry.ServiceKey, spec registry.ServiceSpec, groups []registry.EndpointGroup) error {
	export, err := b.exportRecord(key, spec)
	if err != nil {
		return err
	}
	return b.put(ctx, key, &export, groups, "publish")
}

// put writes export, when not nil, and the endpoints record of groups,
// unless stored already: in one transaction, or endpoints first when the
// two are too large for one request together.
func (b *Backend) put(ctx context.Context, key registry.ServiceKey, export *keyValue, groups []registry.EndpointGroup, what string) error {
	content, err := endpointsContent(key, groups)
	if err != nil {
		return err
	}
	if err := b.lock(ctx); err != nil {
		return err
	}
	defer b.unlock()
	endpoints, changed, err := b.endpointsRecordLocked(key, groups, content)
	if err != nil {
		return err
	}
	var recs []keyValue
	if export != nil {
		recs = append(recs, *export)
	}
	if changed {
		recs = append(recs, endpoints)
	}
	writes := [][]keyValue{recs}
	if len(recs) == 2 && len(export.value)+len(endpoints.value) > registry.MaxRecordBytes {
		writes = [][]keyValue{{endpoints}, {*export}}
	}
	for _, w := range writes {
		if err := b.putLocked(ctx, w...); err != nil {
			return fmt.Errorf("%s %s: %w", what, key, err)
		}
		if changed && slices.Contains(w, endpoints) {
			b.contents[endpoints.key] = content
		}
	}
	return nil
}

// keyValue is a key and the value to write to it.
type keyValue struct{ key, value string }

// exportRecord is the record of this cluster's export of key.
func (b *Backend) exportRecord(key registry.ServiceKey, spec registry.ServiceSpec) (keyValue, error) {
	if err := validService(key); err != nil {
		return keyValue{}, err
	}
	if spec.Type != registry.ClusterSetIP && spec.Type != registry.Headless {
		return keyValue{}, fmt.Errorf("export %s: service type %q: %w", key, spec.Type, registry.ErrInvalid)
	}
	value, err := json.Marshal(exportValue{Spec: spec})
	if err != nil {
		return keyValue{}, fmt.Errorf("export %s: %w", key, err)
	}
	if err := checkSize(value); err != nil {
		return keyValue{}, fmt.Errorf("export %s: %w", key, err)
	}
	return keyValue{key: b.keys.export(b.opts.Identity.Cluster, key), value: string(value)}, nil
}

// endpointsContent is the stored form of groups without its stamp.
func endpointsContent(key registry.ServiceKey, groups []registry.EndpointGroup) (string, error) {
	if err := validService(key); err != nil {
		return "", err
	}
	content, err := json.Marshal(endpointsValue{Groups: groups})
	if err != nil {
		return "", fmt.Errorf("endpoints %s: %w", key, err)
	}
	return string(content), nil
}

// endpointsRecordLocked is the record of this cluster's endpoints of key,
// groups (content, unstamped), stamped now, and whether it needs writing:
// groups equal to those stored write nothing and keep the stamp. b is
// locked.
func (b *Backend) endpointsRecordLocked(key registry.ServiceKey, groups []registry.EndpointGroup, content string) (keyValue, bool, error) {
	k := b.keys.endpoints(b.opts.Identity.Cluster, key)
	if b.storedContent(k) == content && !b.own.isLost(k) {
		return keyValue{}, false, nil
	}
	value, err := json.Marshal(endpointsValue{Groups: groups, Updated: b.now().UTC().Truncate(time.Millisecond)})
	if err != nil {
		return keyValue{}, false, fmt.Errorf("endpoints %s: %w", key, err)
	}
	if err := checkSize(value); err != nil {
		return keyValue{}, false, fmt.Errorf("endpoints %s: %w", key, err)
	}
	return keyValue{key: k, value: string(value)}, true, nil
}

// PutEndpoints stores this cluster's endpoints of an exported Service. It
// writes the endpoints key only, stamped with the time of the change; groups
// equal to those stored write nothing and keep the stamp.
func (b *Backend) PutEndpoints(ctx context.Context, key registry.ServiceKey, groups []registry.EndpointGroup) error {
	return b.put(ctx, key, nil, groups, "put endpoints")
}

// storedContent is the stored value of endpoints key k without its stamp,
// "" when nothing is stored.
func (b *Backend) storedContent(k string) string {
	if c, ok := b.contents[k]; ok {
		return c
	}
	v, ok := b.stored[k]
	if !ok {
		return ""
	}
	var ev endpointsValue
	if err := json.Unmarshal([]byte(v), &ev); err != nil {
		return ""
	}
	ev.Updated = time.Time{}
	c, err := json.Marshal(ev)
	if err != nil {
		return ""
	}
	b.contents[k] = string(c)
	return string(c)
}

// DeleteExport withdraws this cluster's export and endpoints of a Service in
// one transaction.
func (b *Backend) DeleteExport(ctx context.Context, key registry.ServiceKey) error {
	if err := validService(key); err != nil {
		return err
	}
	if err := b.lock(ctx); err != nil {
		return err
	}
	defer b.unlock()
	exportKey := b.keys.export(b.opts.Identity.Cluster, key)
	endpointsKey := b.keys.endpoints(b.opts.Identity.Cluster, key)
	_, hasExport := b.stored[exportKey]
	_, hasEndpoints := b.stored[endpointsKey]
	if !hasExport && !hasEndpoints {
		return nil
	}
	err := b.eachMember(ctx, func(ctx context.Context) error {
		_, err := b.cli.Txn(ctx).Then(clientv3.OpDelete(exportKey), clientv3.OpDelete(endpointsKey)).Commit()
		return err
	})
	if err != nil {
		return fmt.Errorf("delete export %s: %w", key, b.permissionHint(err))
	}
	delete(b.stored, exportKey)
	delete(b.stored, endpointsKey)
	delete(b.contents, endpointsKey)
	b.own.forget(exportKey, endpointsKey)
	return nil
}

// Exported lists the Services this cluster has exports of.
func (b *Backend) Exported(ctx context.Context) ([]registry.ServiceKey, error) {
	if err := b.lock(ctx); err != nil {
		return nil, err
	}
	defer b.unlock()
	var out []registry.ServiceKey
	for k := range b.stored {
		if kind, _, svc := b.keys.parse(k); kind == kindExport {
			out = append(out, svc)
		}
	}
	slices.SortFunc(out, registry.ServiceKey.Compare)
	return out, nil
}

// putLocked writes recs under the lease, in one transaction, but those
// whose keys hold their values already. A record that the watch saw deleted
// or changed by someone else is written again.
func (b *Backend) putLocked(ctx context.Context, recs ...keyValue) error {
	recs = slices.DeleteFunc(slices.Clone(recs), func(r keyValue) bool {
		v, ok := b.stored[r.key]
		return ok && v == r.value && !b.own.isLost(r.key)
	})
	if len(recs) == 0 {
		return nil
	}
	type previous struct {
		rec ownRecord
		had bool
	}
	prevs := make([]previous, len(recs))
	for i, r := range recs {
		prevs[i].rec, prevs[i].had = b.own.writing(r.key, r.value)
	}
	var rev int64
	write := func(ctx context.Context) error {
		if len(recs) == 1 {
			resp, err := b.cli.Put(ctx, recs[0].key, recs[0].value, clientv3.WithLease(b.lease))
			if err == nil {
				rev = resp.Header.Revision
			}
			return err
		}
		ops := make([]clientv3.Op, len(recs))
		for i, r := range recs {
			ops[i] = clientv3.OpPut(r.key, r.value, clientv3.WithLease(b.lease))
		}
		resp, err := b.cli.Txn(ctx).Then(ops...).Commit()
		if err == nil {
			rev = resp.Header.Revision
		}
		return err
	}
	// On failure, what the watch compares with stays what was last written
	// (a deletion of it is still noticed); had the put landed after all,
	// the watch sees a change, and the next put writes it again.
	restore := func() {
		for i, r := range recs {
			b.own.restore(r.key, prevs[i].rec, prevs[i].had)
		}
	}
	err := b.eachMember(ctx, write)
	if isLeaseNotFound(err) {
		// The lease expired under us: repair it, then write.
		if err := b.renewLeaseLocked(ctx); err != nil {
			restore()
			return err
		}
		err = b.eachMember(ctx, write)
	}
	if err != nil {
		restore()
		return b.permissionHint(err)
	}
	for _, r := range recs {
		b.stored[r.key] = r.value
		b.own.written(r.key, r.value, rev)
	}
	return nil
}

// writing records that value is being written to key: the watch may see
// it before the write returns.
func (o *ownRecords) writing(key, value string) (ownRecord, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	r, had := o.recs[key]
	if r.value != value {
		o.recs[key] = ownRecord{value: value, lost: r.lost}
	}
	return r, had
}

// restore puts back what writing replaced, after a failed write.
func (o *ownRecords) restore(key string, prev ownRecord, had bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if had {
		o.recs[key] = prev
	} else {
		delete(o.recs, key)
	}
}

// written records a write of value to key at revision rev.
func (o *ownRecords) written(key, value string, rev int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.recs[key] = ownRecord{value: value, rev: rev}
}

// setLease records the lease every record is written on.
func (o *ownRecords) setLease(lease clientv3.LeaseID) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.lease = lease
}

func (o *ownRecords) forget(keys ...string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, k := range keys {
		delete(o.recs, k)
	}
}

func (o *ownRecords) isLost(key string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.recs[key].lost
}

// check compares what etcd holds of key at revision rev (kv, nil when
// nothing) with what this backend wrote, and reports whether it found the
// record newly lost.
func (o *ownRecords) check(key string, kv *mvccpb.KeyValue, rev int64) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	r, ok := o.recs[key]
	if !ok || r.lost || rev < r.rev {
		// Not written by this backend, known lost, or older than its write.
		return false
	}
	if kv != nil && string(kv.Value) == r.value && clientv3.LeaseID(kv.Lease) == o.lease {
		return false
	}
	if kv == nil && r.rev == 0 {
		// A write is under way, and will tell.
		return false
	}
	r.lost = true
	o.recs[key] = r
	return true
}

// observeOwn implements ownObserver.
func (b *Backend) observeOwn(key string, kv *mvccpb.KeyValue, rev int64) {
	if b.own.check(key, kv, rev) {
		b.lost(key)
	}
}

// observeOwnFull implements ownObserver.
func (b *Backend) observeOwnFull(held map[string]*mvccpb.KeyValue, rev int64) {
	b.own.mu.Lock()
	keys := make([]string, 0, len(b.own.recs))
	for k := range b.own.recs {
		keys = append(keys, k)
	}
	b.own.mu.Unlock()
	for _, k := range keys {
		kv := held[k]
		r := rev
		if kv != nil {
			r = kv.ModRevision
		}
		if b.own.check(k, kv, r) {
			b.lost(k)
		}
	}
}

// lost logs a record this backend wrote that etcd no longer holds so. The
// export controller writes an export or endpoints record again when the
// View shows it gone; the alive record, which no controller writes, is
// written again here.
func (b *Backend) lost(key string) {
	b.log.Info("own record deleted or changed by someone else; writing it again", "key", key)
	if key != b.keys.alive(b.opts.Identity.Cluster) {
		return
	}
	select {
	case b.repair <- struct{}{}:
	default:
	}
}

// repairLoop writes the alive record again when it is lost, until Close.
func (b *Backend) repairLoop() {
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-b.repair:
		}
		delay := retryMin
		for b.ctx.Err() == nil {
			err := b.repairAlive()
			if err == nil {
				break
			}
			b.log.Error(err, "cannot write the alive record again, retrying", "retryIn", delay)
			if !lifetime.Sleep(b.ctx, delay) {
				return
			}
			delay = b.nextDelay(delay)
		}
		// At most one repair a second: should two writers of one cluster
		// ever take turns at the alive record (two controllers of the
		// cluster, which leader election prevents), they do so slowly.
		if !lifetime.Sleep(b.ctx, repairSpacing) {
			return
		}
	}
}

// repairSpacing is the least time between two repairs of the alive record.
const repairSpacing = time.Second

func (b *Backend) repairAlive() error {
	ctx, cancel := context.WithTimeout(b.ctx, b.opts.RequestTimeout)
	defer cancel()
	if err := b.lock(ctx); err != nil {
		return err
	}
	defer b.unlock()
	key := b.keys.alive(b.opts.Identity.Cluster)
	if err := b.putLocked(ctx, keyValue{key: key, value: b.stored[key]}); err != nil {
		return fmt.Errorf("write alive record: %w", err)
	}
	return nil
}

// checkSize refuses a value that readers would refuse as too large.
func checkSize(value []byte) error {
	if len(value) > registry.MaxRecordBytes {
		return &registry.RejectedError{Reason: registry.RejectTooLarge,
			Err: fmt.Errorf("%d bytes, more than %d", len(value), registry.MaxRecordBytes)}
	}
	return nil
}

func validService(key registry.ServiceKey) error {
	if !validID(key.Namespace) || !validID(key.Name) {
		return fmt.Errorf("service %q: %w", key, registry.ErrInvalid)
	}
	return nil
}
