package framework

import (
	"context"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	etcdregistry "github.com/mcsd-io/mcsd/pkg/registry/etcd"
)

// Record is one key of a cluster's records in the registry.
type Record struct {
	// Key is relative to the cluster's prefix: "alive",
	// "exports/<ns>/<name>", "endpoints/<ns>/<name>".
	Key string
	// Lease is the etcd lease the key is attached to (0 for none).
	Lease int64
	// TTL is the lease's remaining time to live in seconds (-1 when expired
	// or none).
	TTL int64
	// ModRevision is the etcd revision of the key's last write.
	ModRevision int64
}

// RegistryRecords reads, straight from etcd, the records the registry holds
// for cluster id, by key. It is for checking the registry's state; it writes
// nothing.
func (e *Env) RegistryRecords(ctx context.Context, id string) (map[string]Record, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.RegistryEndpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	defer func() { _ = cli.Close() }()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// The etcd backend's layout: <prefix>/<clusterset>/clusters/<cluster>/...
	prefix := fmt.Sprintf("%s/%s/clusters/%s/", etcdregistry.DefaultPrefix, e.TB.ClusterSetID(), id)
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("read records of %s: %w", id, err)
	}
	out := map[string]Record{}
	ttls := map[clientv3.LeaseID]int64{}
	for _, kv := range resp.Kvs {
		r := Record{Key: strings.TrimPrefix(string(kv.Key), prefix), Lease: kv.Lease, TTL: -1, ModRevision: kv.ModRevision}
		if id := clientv3.LeaseID(kv.Lease); id != clientv3.NoLease {
			ttl, ok := ttls[id]
			if !ok {
				lr, err := cli.TimeToLive(ctx, id)
				if err != nil {
					return nil, fmt.Errorf("lease of %s: %w", kv.Key, err)
				}
				ttl = lr.TTL
				ttls[id] = ttl
			}
			r.TTL = ttl
		}
		out[r.Key] = r
	}
	return out, nil
}
