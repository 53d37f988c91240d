package etcd

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

var (
	_ registry.ReadOnlyWatcher  = (*Watcher)(nil)
	_ registry.LeaseInspector   = (*Watcher)(nil)
	_ registry.LeaseAuditor     = (*Watcher)(nil)
	_ registry.ClusterSetLister = (*Watcher)(nil)
)

// Watcher reads a clusterset without being a member of it: it grants no
// lease and writes nothing, so no watcher of the clusterset sees it. It reads
// what a Backend's Watch reads, and the leases of the live clusters.
type Watcher struct {
	conn
	ownsClient bool
	cancel     context.CancelFunc
	closeOnce  sync.Once
	closeErr   error
}

// NewWatcher connects to etcd and opens a read-only watcher of
// opts.Identity.ClusterSet; opts.Identity.Cluster may be empty, and TTL is
// not used. It takes its logger from ctx. It does not wait for etcd: Watch
// reports whether etcd can be read.
func NewWatcher(ctx context.Context, opts Options) (*Watcher, error) {
	opts.Default()
	if err := opts.ValidateWatcher(); err != nil {
		return nil, fmt.Errorf("etcd registry options: %w", err)
	}
	// A reader reports at once (mcsd status).
	cli, err := newClient(ctx, opts, 0)
	if err != nil {
		return nil, err
	}
	w := newWatcher(ctx, cli, opts)
	w.ownsClient = true
	return w, nil
}

// NewWatcherFromClient opens a read-only watcher over an existing client,
// which Close leaves open. The connection fields of opts are ignored.
func NewWatcherFromClient(ctx context.Context, cli *clientv3.Client, opts Options) (*Watcher, error) {
	opts.Default()
	if err := opts.validateReader(); err != nil {
		return nil, fmt.Errorf("etcd registry options: %w", err)
	}
	return newWatcher(ctx, cli, opts), nil
}

func newWatcher(ctx context.Context, cli *clientv3.Client, opts Options) *Watcher {
	c, cancel := newConn(ctx, cli, opts)
	return &Watcher{conn: c, cancel: cancel}
}

// Watch delivers the clusterset's records to h until ctx is done or the
// watcher is closed, as Backend.Watch does.
func (w *Watcher) Watch(ctx context.Context, h registry.Handler) error {
	return w.watch(ctx, h, nil)
}

// ClusterSets lists the clustersets that have a live cluster in the
// registry (an alive record), read from the keys under the watcher's
// prefix. It reads every key's name once: meant for a status report that
// found no cluster in the clusterset it was asked for.
func (w *Watcher) ClusterSets(ctx context.Context) ([]string, error) {
	if w.ctx.Err() != nil {
		return nil, registry.ErrClosed
	}
	ctx, cancel := context.WithTimeout(ctx, w.opts.RequestTimeout)
	defer cancel()
	root := strings.TrimRight(w.opts.Prefix, "/") + "/"
	resp, err := w.cli.Get(ctx, root, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("list clustersets: %w", err)
	}
	seen := map[string]bool{}
	for _, kv := range resp.Kvs {
		parts := strings.Split(strings.TrimPrefix(string(kv.Key), root), "/")
		// <clusterset>/clusters/<cluster>/alive
		if len(parts) == 4 && parts[1] == clustersDir && parts[3] == aliveName && kv.Lease != 0 {
			seen[parts[0]] = true
		}
	}
	return slices.Sorted(maps.Keys(seen)), nil
}

// AuditLeases counts etcd's leases and names those holding none of mcsd's
// records (AuditLeases of the package, under the watcher's key prefix).
func (w *Watcher) AuditLeases(ctx context.Context) (registry.LeaseAudit, error) {
	if w.ctx.Err() != nil {
		return registry.LeaseAudit{}, registry.ErrClosed
	}
	return AuditLeases(ctx, w.cli, w.opts.Prefix)
}

// Leases looks up the lease of every live cluster: one read of the
// clusterset's keys, then one TimeToLive request per cluster. A lease that
// expires meanwhile is left out.
func (w *Watcher) Leases(ctx context.Context) ([]registry.Lease, error) {
	if w.ctx.Err() != nil {
		return nil, registry.ErrClosed
	}
	ctx, cancel := context.WithTimeout(ctx, w.opts.RequestTimeout)
	defer cancel()
	resp, err := w.cli.Get(ctx, w.keys.clusters(), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("read clusterset: %w", err)
	}
	var out []registry.Lease
	for _, kv := range resp.Kvs {
		kind, cluster, _ := w.keys.parse(string(kv.Key))
		id := clientv3.LeaseID(kv.Lease)
		if kind != kindAlive || id == clientv3.NoLease {
			continue
		}
		asked := time.Now()
		ttl, err := w.cli.TimeToLive(ctx, id)
		if isLeaseNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("look up lease of %s: %w", cluster, err)
		}
		if ttl.TTL < 0 { // expired; 0 is less than a second left
			continue
		}
		granted := time.Duration(ttl.GrantedTTL) * time.Second
		remaining := time.Duration(ttl.TTL) * time.Second
		out = append(out, registry.Lease{
			Cluster:   cluster,
			ID:        leaseString(id),
			Granted:   granted,
			Remaining: remaining,
			Renewed:   asked.Add(remaining - granted),
		})
	}
	slices.SortFunc(out, func(a, b registry.Lease) int { return cmp.Compare(a.Cluster, b.Cluster) })
	return out, nil
}

// Close stops the watches and releases the client if NewWatcher made it.
func (w *Watcher) Close() error {
	w.closeOnce.Do(func() {
		w.cancel()
		if w.ownsClient {
			w.closeErr = w.cli.Close()
		}
	})
	return w.closeErr
}
