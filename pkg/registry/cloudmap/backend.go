package cloudmap

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/internal/standing"
	"github.com/mcsd-io/mcsd/pkg/registry/internal/writelock"
)

var (
	_ registry.Registry = (*Backend)(nil)
	_ registry.Fencer   = (*Backend)(nil)
	_ registry.Lapser   = (*Backend)(nil)
)

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
	// recordsFull holds when each records service last refused a record
	// for want of room (writeRecord). Guarded by sem.
	recordsFull map[string]time.Time
	// registered holds when this backend registered each instance it has
	// not deregistered since, by recordRef (deregister).
	registered sync.Map

	// lastBeat is the time of the last heartbeat written, in Unix ms.
	lastBeat atomic.Int64
	// contested is, while another Kubernetes cluster given this cluster id
	// beats under it and yields to this backend, when it will have
	// stopped (refresh); zero otherwise. Used by the heartbeat loop alone.
	contested time.Time
	// fenced holds registry.ErrClusterIDInUse while another Kubernetes
	// cluster given this cluster id runs under it, found after an outage
	// longer than the TTL (refresh): nothing is written meanwhile.
	fenced atomic.Pointer[error]
	// standing is whether the heartbeat has expired, or the id is fenced
	// (Lapsed); the heartbeat loop sets it after each refresh.
	standing *standing.State
}

// Lapsed implements registry.Lapser.
func (b *Backend) Lapsed() error { return b.standing.Lapsed() }

// Lapses implements registry.Lapser.
func (b *Backend) Lapses() <-chan struct{} { return b.standing.Changes() }

// Fenced implements registry.Fencer.
func (b *Backend) Fenced() error {
	if err := b.fenced.Load(); err != nil {
		return *err
	}
	return nil
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
	// deregister: the operation deregisters the instance (else it
	// registers it).
	deregister bool
	// attrs are, for a registration, the attributes written (of this
	// cluster's own writes alone; nil otherwise).
	attrs map[string]string
	at    time.Time
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

// recordsServices are the records services known, by name.
func (r *reader) recordsServices() []service {
	r.systemMu.Lock()
	defer r.systemMu.Unlock()
	var out []service
	for name, svc := range r.system {
		if isRecordsName(name) && svc.ID != "" {
			out = append(out, svc)
		}
	}
	slices.SortFunc(out, func(a, b service) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// isRecordsService reports whether id is that of a records service known.
func (r *reader) isRecordsService(id string) bool {
	r.systemMu.Lock()
	defer r.systemMu.Unlock()
	for name, svc := range r.system {
		if isRecordsName(name) && svc.ID == id {
			return true
		}
	}
	return false
}

// noteRecordsService records svc, listed in the system namespace, when it
// is a records service, and reports whether it is one not known before, or
// under a new id (created again): its records are to be read whole.
func (r *reader) noteRecordsService(svc service) bool {
	if !isRecordsName(svc.Name) {
		return false
	}
	r.systemMu.Lock()
	defer r.systemMu.Unlock()
	known := r.system[svc.Name].ID
	r.system[svc.Name] = svc
	return known != svc.ID
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
	// service record written where mcsd kept it before (to be deleted). An
	// instance whose registration was sent but not seen to succeed is
	// held with nil attributes: it may be there.
	stored map[string]map[string]string
	// record is the cluster's service record in the records service as
	// Cloud Map holds it, nil when there is none; empty when one was sent
	// but not seen to succeed.
	record map[string]string
	// recordIn is the name of the records service that holds record; ""
	// when none does yet.
	recordIn string
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
		standing: standing.New(),

		recordsFull: map[string]time.Time{},
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
