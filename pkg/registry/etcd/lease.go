package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/internal/lifetime"
)

// maxTxnOps is how many writes go in one transaction, under etcd's default
// limit of 128.
const maxTxnOps = 64

// start takes over the cluster's records: it reuses the lease of the alive
// key while it lives, or grants a new one, and attaches to the lease whatever
// of the cluster's records is not attached yet. A restart within the TTL
// writes nothing.
func (b *Backend) start(ctx context.Context) error {
	for tries := 1; ; tries++ {
		err := b.startOnce(ctx)
		if !errors.Is(err, errAliveRaced) || tries == 3 {
			return err
		}
		// Another process wrote the cluster's alive record meanwhile: its
		// records are read again (another cluster given this id is then
		// refused; another replica of this one shares the lease).
		b.lease = clientv3.NoLease
		clear(b.stored)
	}
}

// errAliveRaced: the cluster's alive record changed between a read and
// the write that relied on it (start, a lease repair).
var errAliveRaced = errors.New("alive record written by another process meanwhile")

func (b *Backend) startOnce(ctx context.Context) error {
	own := b.opts.Identity.Cluster
	var resp *clientv3.GetResponse
	err := b.eachMember(ctx, func(ctx context.Context) (err error) {
		resp, err = b.cli.Get(ctx, b.keys.cluster(own), clientv3.WithPrefix())
		return err
	})
	if err != nil {
		return fmt.Errorf("read own records: %w", err)
	}
	aliveKey := b.keys.alive(own)
	var oldLease clientv3.LeaseID
	var prev aliveValue
	var aliveRev int64 // 0: no alive record
	for _, kv := range resp.Kvs {
		if string(kv.Key) == aliveKey {
			oldLease = clientv3.LeaseID(kv.Lease)
			prev, _ = decodeAlive(string(kv.Value))
			aliveRev = kv.ModRevision
		}
	}
	// The old lease is reused if it lives and has the TTL asked for.
	oldLives := false
	if oldLease != clientv3.NoLease {
		var ttl *clientv3.LeaseTimeToLiveResponse
		err := b.eachMember(ctx, func(ctx context.Context) (err error) {
			ttl, err = b.lessor.TimeToLive(ctx, oldLease)
			return err
		})
		if err != nil {
			return fmt.Errorf("look up lease %s: %w", leaseString(oldLease), err)
		}
		// etcd gives the time left in whole seconds, rounded down: a lease
		// with less than a second left reads 0, and lives. An expired one
		// reads -1.
		oldLives = ttl.TTL >= 0
		if oldLives && b.opts.Identity.OtherInstance(prev.Instance) {
			// Another Kubernetes cluster was given this id, and runs:
			// nothing of it is touched.
			return b.opts.Identity.InUseBy(prev.Instance, prev.Since)
		}
		if oldLives && ttl.GrantedTTL == b.opts.ttlSeconds() {
			b.lease = oldLease
		}
	}
	if b.lease != clientv3.NoLease {
		// Renewing it proves, with etcd auth on, that this cluster's user
		// may write the cluster's records: a restart within the TTL writes
		// nothing else.
		err := b.eachMember(ctx, func(ctx context.Context) error {
			_, err := b.lessor.KeepAliveOnce(ctx, b.lease)
			return err
		})
		switch {
		case isLeaseNotFound(err):
			// It expired just now.
			b.lease, oldLives = clientv3.NoLease, false
		case err != nil:
			return fmt.Errorf("renew lease %s: %w", leaseString(b.lease), err)
		}
	}
	if b.lease != clientv3.NoLease {
		b.log.Info("reusing lease", "lease", leaseString(b.lease))
	} else {
		id, err := b.grant(ctx)
		if err != nil {
			return err
		}
		b.lease = id
		b.log.Info("granted lease", "lease", leaseString(b.lease), "ttlSeconds", b.opts.ttlSeconds())
	}

	// Records on an expired lease are gone or about to be; all others are
	// attached to the lease (which changes nothing else, not even Order).
	var writes []string
	for _, kv := range resp.Kvs {
		key := string(kv.Key)
		if kind, _, _ := b.keys.parse(key); kind == kindUnknown {
			continue
		}
		lease := clientv3.LeaseID(kv.Lease)
		if !oldLives && lease == oldLease && oldLease != clientv3.NoLease {
			continue
		}
		b.stored[key] = string(kv.Value)
		if lease != b.lease {
			writes = append(writes, key)
		}
	}
	// The alive record is kept while the records never expired and it says
	// what it should; a new lease or TTL, or an expiry, writes it again.
	since := prev.Since
	if !oldLives || since.IsZero() {
		since = b.now()
	}
	alive, err := b.aliveRecord(since)
	if err != nil {
		return err
	}
	if v, ok := b.stored[aliveKey]; !ok || v != alive {
		b.stored[aliveKey] = alive
		if !slices.Contains(writes, aliveKey) {
			writes = append(writes, aliveKey)
		}
	}
	slices.Sort(writes)
	ops := make([]clientv3.Op, 0, len(writes))
	for _, k := range writes {
		ops = append(ops, clientv3.OpPut(k, b.stored[k], clientv3.WithLease(b.lease)))
	}
	// The alive record must be the one read: two processes starting at
	// once for one cluster id must not both take it.
	rev, err := b.commit(ctx, b.lease, ops, clientv3.Compare(clientv3.ModRevision(aliveKey), "=", aliveRev))
	if err != nil {
		return fmt.Errorf("attach records to lease: %w", err)
	}
	b.own.setLease(b.lease)
	for _, kv := range resp.Kvs {
		if v, ok := b.stored[string(kv.Key)]; ok && v == string(kv.Value) {
			b.own.written(string(kv.Key), v, kv.ModRevision)
		}
	}
	for _, k := range writes {
		b.own.written(k, b.stored[k], rev)
	}
	return nil
}

// aliveRecord is the value of this cluster's alive key, live since since.
func (b *Backend) aliveRecord(since time.Time) (string, error) {
	v, err := json.Marshal(aliveValue{
		Cluster:    b.opts.Identity.Cluster,
		Instance:   b.opts.Identity.Instance,
		Since:      since.UTC().Truncate(time.Millisecond),
		TTLSeconds: b.opts.ttlSeconds(),
	})
	if err != nil {
		return "", fmt.Errorf("alive record: %w", err)
	}
	return string(v), nil
}

// decodeAlive reads the value of an alive key.
func decodeAlive(v string) (aliveValue, bool) {
	var a aliveValue
	if v == "" || json.Unmarshal([]byte(v), &a) != nil {
		return aliveValue{}, false
	}
	return a, true
}

// keepAlive renews the lease until Close, and repairs it when it is lost.
func (b *Backend) keepAlive() {
	defer close(b.done)
	delay := retryMin
	for b.ctx.Err() == nil {
		_, unlock, err := b.lock(b.ctx)
		if err != nil {
			return
		}
		id := b.lease
		unlock()

		ch, err := b.lessor.KeepAlive(b.ctx, id)
		if err != nil {
			if b.ctx.Err() != nil {
				return
			}
			b.log.Error(err, "cannot keep lease alive, retrying", "lease", leaseString(id), "retryIn", delay)
			if !lifetime.Sleep(b.ctx, delay) {
				return
			}
			delay = b.nextDelay(delay)
			continue
		}
		renewed := false
		for range ch {
			renewed = true
		}
		if b.ctx.Err() != nil {
			return
		}
		// The renewals stopped: the lease expired, was revoked, or etcd
		// could not be reached for a whole TTL.
		b.recoverLease(id, fmt.Errorf("%w: its lease %s was not renewed for its TTL (%s)", registry.ErrRecordsLapsed, leaseString(id), b.opts.TTL))
		if b.ctx.Err() != nil {
			return
		}
		b.setStanding(nil)
		if renewed {
			delay = retryMin
			continue
		}
		// Not a single renewal: do not spin.
		if !lifetime.Sleep(b.ctx, delay) {
			return
		}
		delay = b.nextDelay(delay)
	}
}

// setStanding sets what Lapsed returns to why, or to the fence while
// another cluster holds the cluster's alive record (aliveHolderLocked): the
// lease's health does not lift that.
func (b *Backend) setStanding(why error) {
	if b.aliveFenced.Load() {
		if err := b.Fenced(); err != nil {
			why = err
		}
	}
	b.standing.Set(why)
}

// recoverLease returns once lease id is known to live, or has been replaced.
// While a look fails, the records may have lapsed: why, or the fence.
func (b *Backend) recoverLease(id clientv3.LeaseID, why error) {
	delay := retryMin
	var said string // the last error logged
	for {
		err := b.checkLease(id)
		if err == nil {
			return
		}
		if b.ctx.Err() != nil {
			return
		}
		if errors.Is(err, registry.ErrClusterIDInUse) {
			b.standing.Set(err)
		} else {
			b.setStanding(why)
		}
		if !errors.Is(err, registry.ErrClusterIDInUse) || err.Error() != said {
			// Another cluster's hold on the id is said once, not at
			// every look.
			b.log.Error(err, "cannot renew lease, retrying", "lease", leaseString(id), "retryIn", delay)
			said = err.Error()
		}
		if !lifetime.Sleep(b.ctx, delay) {
			return
		}
		delay = b.nextDelay(delay)
	}
}

func (b *Backend) checkLease(id clientv3.LeaseID) error {
	// The lock is waited for within RequestTimeout; each request made
	// under it is bounded on its own (eachMember), so that a repair that
	// writes many records, one transaction after another, is not cut off
	// half done by one deadline for them all.
	wait, cancel := context.WithTimeout(b.ctx, b.opts.RequestTimeout)
	defer cancel()
	_, unlock, err := b.lock(wait)
	if err != nil {
		return err
	}
	defer unlock()
	if b.lease != id {
		return nil
	}
	var ttl *clientv3.LeaseTimeToLiveResponse
	err = b.eachMember(b.ctx, func(ctx context.Context) (err error) {
		ttl, err = b.lessor.TimeToLive(ctx, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("look up lease: %w", err)
	}
	if ttl.TTL >= 0 { // it lives (0: less than a second left)
		return nil
	}
	return b.renewLeaseLocked(b.ctx)
}

// grant grants a lease of the backend's TTL.
func (b *Backend) grant(ctx context.Context) (clientv3.LeaseID, error) {
	var grant *clientv3.LeaseGrantResponse
	err := b.eachMember(ctx, func(ctx context.Context) (err error) {
		grant, err = b.lessor.Grant(ctx, b.opts.ttlSeconds())
		return err
	})
	if err != nil {
		return clientv3.NoLease, fmt.Errorf("grant lease: %w", err)
	}
	return grant.ID, nil
}

// renewLeaseLocked replaces a lost lease: it grants a new one and writes
// again everything this backend has stored. Each of its requests is bounded
// by RequestTimeout when ctx has no deadline (eachMember): a write that
// found its lease gone does not hold the write lock, with its caller's
// context (a reconcile's has no deadline), through an outage.
func (b *Backend) renewLeaseLocked(ctx context.Context) error {
	// While this backend's lease was lost, another Kubernetes cluster given
	// this id may have started under it: its records are not overwritten.
	aliveKey := b.keys.alive(b.opts.Identity.Cluster)
	kv, prev, err := b.readAlive(ctx)
	if err != nil {
		return err
	}
	var aliveRev int64
	if kv != nil {
		aliveRev = kv.ModRevision
		if b.opts.Identity.OtherInstance(prev.Instance) {
			err := b.opts.Identity.InUseBy(prev.Instance, prev.Since)
			b.fenced.Store(&err)
			return err
		}
	}
	lease, err := b.grant(ctx)
	if err != nil {
		return err
	}
	// The records expired with the old lease: they are live again from now.
	alive, err := b.aliveRecord(b.now())
	if err != nil {
		return err
	}
	b.stored[aliveKey] = alive
	keys := make([]string, 0, len(b.stored))
	for k := range b.stored {
		keys = append(keys, k)
	}
	// The alive key sorts before the records of the cluster's prefix, so
	// watchers see the cluster come back before its records.
	slices.Sort(keys)
	ops := make([]clientv3.Op, 0, len(keys))
	for _, k := range keys {
		ops = append(ops, clientv3.OpPut(k, b.stored[k], clientv3.WithLease(lease)))
	}
	b.own.setLease(lease)
	rev, err := b.commit(ctx, lease, ops, clientv3.Compare(clientv3.ModRevision(aliveKey), "=", aliveRev))
	if err != nil {
		b.own.setLease(b.lease)
		return fmt.Errorf("write records again: %w", err)
	}
	b.fenced.Store(nil)
	b.aliveFenced.Store(false)
	for _, k := range keys {
		b.own.written(k, b.stored[k], rev)
	}
	b.log.Info("lease lost, records written again", "oldLease", leaseString(b.lease), "lease", leaseString(lease), "records", len(ops))
	b.lease = lease
	return nil
}

// commit writes ops, puts on lease, in transactions of at most maxTxnOps,
// each bounded on its own (eachMember), and returns the revision of the
// first (0 when there was nothing to write): every write is at that
// revision or later. The first is made only if firstIf holds
// (errAliveRaced otherwise). Nothing else renews the lease until commit has
// returned, and the transactions may take longer than the TTL (a loaded
// registry, many records), one slow one alone longer than what is left of
// it: commit renews it every TTL/3 while they run.
func (b *Backend) commit(ctx context.Context, lease clientv3.LeaseID, ops []clientv3.Op, firstIf ...clientv3.Cmp) (int64, error) {
	defer b.renewWhile(ctx, lease)()
	var first int64
	for chunk := range slices.Chunk(ops, maxTxnOps) {
		var resp *clientv3.TxnResponse
		err := b.eachMember(ctx, func(ctx context.Context) (err error) {
			txn := b.cli.Txn(ctx)
			if first == 0 && len(firstIf) > 0 {
				txn = txn.If(firstIf...)
			}
			resp, err = txn.Then(chunk...).Commit()
			return err
		})
		if err != nil {
			return 0, err
		}
		if !resp.Succeeded {
			return 0, errAliveRaced
		}
		if first == 0 {
			first = resp.Header.Revision
		}
	}
	return first, nil
}

// renewWhile renews lease every TTL/3 until the function it returns is
// called, and waits for that renewal's end. A renewal that fails is only
// logged: a lease gone fails the next transaction put on it.
func (b *Backend) renewWhile(ctx context.Context, lease clientv3.LeaseID) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(b.opts.TTL / 3)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			// Bounded by the period: a renewal stuck on a slow member
			// does not hold back the next.
			rctx, rcancel := context.WithTimeout(ctx, b.opts.TTL/3)
			err := b.eachMember(rctx, func(ctx context.Context) error {
				_, err := b.lessor.KeepAliveOnce(ctx, lease)
				return err
			})
			rcancel()
			if err != nil && ctx.Err() == nil {
				b.log.Error(err, "cannot renew lease during a write", "lease", leaseString(lease))
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

func leaseString(id clientv3.LeaseID) string { return fmt.Sprintf("%x", int64(id)) }

func isLeaseNotFound(err error) bool {
	return errors.Is(err, rpctypes.ErrLeaseNotFound)
}

const (
	retryMin = 200 * time.Millisecond
	retryMax = 5 * time.Second
)

func nextDelay(d time.Duration) time.Duration {
	return min(2*d, retryMax)
}

// nextDelay backs off for lease repairs. The cap is bounded by the TTL: etcd
// extends leases by about one TTL when it restarts, so a backend that waits
// longer than that to renew loses its lease and has to write everything
// again, losing its exports' precedence.
func (b *Backend) nextDelay(d time.Duration) time.Duration {
	return min(2*d, retryCap(b.opts.TTL))
}

// retryCap is the longest wait between two attempts to reach etcd for a
// backend with the given TTL: at most retryMax, at most a quarter of the TTL.
func retryCap(ttl time.Duration) time.Duration {
	if ttl <= 0 {
		return retryMax
	}
	return max(retryMin, min(retryMax, ttl/4))
}
