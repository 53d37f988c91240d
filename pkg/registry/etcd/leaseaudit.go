package etcd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

// auditConcurrency bounds the lease look-ups AuditLeases makes at once.
const auditConcurrency = 16

// AuditLeases lists etcd's leases and looks up the keys each one holds, at
// most auditConcurrency at a time: one request per lease, meant for status
// reports and a slow monitoring loop, never for a controller's path. A lease
// holding no key at all is idle (mcsd grants a lease and writes its
// cluster's alive record on it at once); one holding keys, none under
// prefix, is another application's (Foreign). A lease that expires while it
// is looked at is left out.
func AuditLeases(ctx context.Context, cli *clientv3.Client, prefix string) (registry.LeaseAudit, error) {
	resp, err := cli.Leases(ctx)
	if err != nil {
		return registry.LeaseAudit{}, fmt.Errorf("list leases: %w", err)
	}
	root := strings.TrimRight(prefix, "/") + "/"
	var (
		mu    sync.Mutex
		audit registry.LeaseAudit
	)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(auditConcurrency)
	for _, l := range resp.Leases {
		g.Go(func() error {
			ttl, err := cli.TimeToLive(gctx, l.ID, clientv3.WithAttachedKeys())
			mu.Lock()
			defer mu.Unlock()
			switch {
			case isLeaseNotFound(err):
				return nil
			case errors.Is(err, rpctypes.ErrPermissionDenied):
				audit.Total++
				audit.Unreadable++
				return nil
			case err != nil:
				return fmt.Errorf("look up lease %s: %w", leaseString(l.ID), err)
			case ttl.TTL < 0:
				return nil // expired
			}
			audit.Total++
			switch {
			case len(ttl.Keys) == 0:
				audit.Idle = append(audit.Idle, leaseString(l.ID))
			case !slices.ContainsFunc(ttl.Keys, func(k []byte) bool { return strings.HasPrefix(string(k), root) }):
				audit.Foreign++
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return registry.LeaseAudit{}, err
	}
	slices.Sort(audit.Idle)
	return audit, nil
}
