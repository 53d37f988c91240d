package etcd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/internal/standing"
	"github.com/mcsd-io/mcsd/pkg/registry/internal/writelock"
)

var (
	_ registry.Registry = (*Backend)(nil)
	_ registry.Fencer   = (*Backend)(nil)
	_ registry.Lapser   = (*Backend)(nil)
)

// Name is the backend's name in metrics and logs, and its URL scheme
// (etcds with TLS).
const Name = "etcd"

// Backend implements registry.Registry.
func (b *Backend) Backend() string { return Name }

// Fenced implements registry.Fencer.
func (b *Backend) Fenced() error {
	if err := b.fenced.Load(); err != nil {
		return *err
	}
	return nil
}

// Lapsed implements registry.Lapser.
func (b *Backend) Lapsed() error { return b.standing.Lapsed() }

// Lapses implements registry.Lapser.
func (b *Backend) Lapses() <-chan struct{} { return b.standing.Changes() }

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

	// fenced holds registry.ErrClusterIDInUse while a lost lease cannot be
	// replaced because another Kubernetes cluster runs under this cluster
	// id: every write and deletion is refused with it, since the keys are
	// that cluster's now (Fenced). Set and cleared under sem.
	fenced atomic.Pointer[error]
	// aliveFenced: fenced was set because another Kubernetes cluster given
	// this id holds the alive record while this backend's lease lives
	// (aliveHolderLocked), not by a lease repair. Set and cleared under
	// sem; repairLoop reads it to look again while it holds.
	aliveFenced atomic.Bool

	// own is what the watch says etcd holds of the records in stored: a
	// record someone else deleted or changed is written again by the next
	// put, even of the same value. It has its own lock: the watch must not
	// wait for a write.
	own ownRecords
	// repair asks repairLoop to write the alive record again.
	repair chan struct{}
	// standing is whether the lease may have expired (Lapsed): from when
	// its renewals stopped until it is known to live, or replaced.
	standing *standing.State
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
// (or all of it, if less); the last gets what ctx leaves, or RequestTimeout
// when ctx has no deadline: etcd's client waits for a connection rather
// than failing without one, and a write under the write lock, from a
// controller whose context has no deadline, would otherwise wait out a
// whole outage, and every write and withdrawal behind it. Only errors that
// say no answer came (a timeout, an unavailable member, no leader) are
// tried again; a refused permission or a missing lease is an answer. It returns the last try's
// error.
func (c *conn) eachMember(ctx context.Context, f func(context.Context) error) error {
	tries := max(1, len(c.cli.Endpoints()))
	budget := c.opts.RequestTimeout
	perTry := max(budget/time.Duration(tries), min(budget, minTry))
	var err error
	for i := range tries {
		tctx, cancel := ctx, context.CancelFunc(func() {})
		if _, bounded := ctx.Deadline(); i < tries-1 {
			tctx, cancel = context.WithTimeout(ctx, perTry)
		} else if !bounded {
			tctx, cancel = context.WithTimeout(ctx, budget)
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
		DialOptions: append([]grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 250 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: retryCap(opts.TTL)},
			MinConnectTimeout: opts.DialTimeout,
		})}, opts.DialOptions...),
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
		own:        ownRecords{recs: map[string]ownRecord{}, now: time.Now},
		repair:     make(chan struct{}, 1),
		standing:   standing.New(),
	}
	// Each of start's requests is bounded by RequestTimeout (eachMember),
	// not all of them together: attaching many records to a new lease
	// takes a transaction per maxTxnOps records.
	if err := b.start(ctx); err != nil {
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
		// The write under way, if any, ends with the context; nothing is
		// written after Close returns.
		b.sem.Drain()
		<-b.done
		b.closeErr = b.lessor.Close()
		if b.ownsClient {
			b.closeErr = errors.Join(b.closeErr, b.cli.Close())
		}
	})
	return b.closeErr
}
