package etcd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/internal/lifetime"
)

// ownRecords follows, for each record this backend wrote, its value and
// the revision of the write, and whether etcd no longer holds it so.
type ownRecords struct {
	// now is the backend's clock.
	now func() time.Time
	mu  sync.Mutex
	// lease is the backend's lease (Backend.lease, readable without sem).
	lease clientv3.LeaseID
	recs  map[string]ownRecord
}

type ownRecord struct {
	value string
	// rev is the revision of the last write; 0 while a write is under way
	// or unknown.
	rev int64
	// before is, while a write is under way, the revision of the write
	// before it: what the watch delivers of that one (it may come after
	// the new write began) is this backend's own, no loss.
	before int64
	// lost: etcd holds no longer what this backend wrote, or may not (a
	// write whose outcome is unknown); the next put writes it again.
	lost bool
	// lostAt is the revision at which the watch found it lost: a write
	// that returns later, at an earlier revision, does not undo that.
	lostAt int64
	// absent: the watch last found the key absent. A resync that finds it
	// still absent, at a later revision, is no news.
	absent bool
	// goneAt is, while a write is under way, the latest revision at which
	// the watch found the key absent: the write's own revision tells
	// whether that was before it (no loss) or after (lost; written).
	goneAt int64
	// contention counts the times in a row the watch found the record
	// changed by another writer.
	contention contention
}

// contention is how often a record was found changed by another writer:
// flaps times in a row, each within contendWindow of the one before, the
// last at last (the local clock).
type contention struct {
	flaps int
	last  time.Time
}

// A record found changed by another writer contendFlaps times in a row,
// each within contendWindow of the one before, is not written again until
// contendWindow has passed since the last: two writers of one cluster's
// records (two controllers given one cluster id) would otherwise rewrite
// each other's without end, each as fast as the registry answers.
const (
	contendFlaps  = 10
	contendWindow = 5 * time.Second
)

// errContended: a record is not written, another writer keeps changing it.
var errContended = errors.New("another writer keeps changing this cluster's records")

// writing records that value is being written to key: the watch may see
// it before the write returns.
func (o *ownRecords) writing(key, value string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	r := o.recs[key]
	if r.value != value {
		o.recs[key] = ownRecord{value: value, before: max(r.rev, r.before), lost: r.lost, lostAt: r.lostAt, absent: r.absent, contention: r.contention}
	}
}

// failed records a write of key that failed: it may have landed or not,
// and others may have written meanwhile. The record counts as lost, so
// that the next put writes it whatever its value, and the watch, which
// compares with nothing certain, leaves it alone.
func (o *ownRecords) failed(key string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	r := o.recs[key]
	o.recs[key] = ownRecord{value: r.value, lost: true, absent: r.absent, contention: r.contention}
}

// written records a write of value to key at revision rev. A change the
// watch saw after rev (it may come before the write returns) keeps the
// record lost. It reports whether a deletion seen while the write was under
// way made it lost (check said nothing of it then).
func (o *ownRecords) written(key, value string, rev int64) (goneAfter bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	r := o.recs[key]
	if r.goneAt > rev && (!r.lost || r.goneAt > r.lostAt) {
		// Deleted after this write landed, seen while it was under way.
		r.lost, r.lostAt, r.absent = true, r.goneAt, true
		goneAfter = true
	}
	if r.lost && r.lostAt > rev {
		o.recs[key] = ownRecord{value: value, rev: rev, lost: true, lostAt: r.lostAt, absent: r.absent, contention: r.contention}
		return goneAfter
	}
	o.recs[key] = ownRecord{value: value, rev: rev, contention: r.contention}
	return false
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

// contended reports how often in a row key was found changed by another
// writer, and whether it is not to be written now (see contendFlaps).
func (o *ownRecords) contended(key string) (int, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	c := o.recs[key].contention
	return c.flaps, c.flaps >= contendFlaps && o.now().Sub(c.last) <= contendWindow
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
	if !ok || rev < r.rev || (r.rev == 0 && rev <= r.before) || (r.lost && rev <= r.lostAt) {
		// Not written by this backend, older than its write (or, while
		// one is under way, no later than the one before: that one's
		// echo), or a loss already known at this revision or later.
		return false
	}
	if kv != nil && string(kv.Value) == r.value && clientv3.LeaseID(kv.Lease) == o.lease {
		if r.absent {
			r.absent = false
			o.recs[key] = r
		}
		return false
	}
	if kv == nil && r.rev == 0 && !r.lost {
		// A write is under way: its revision will tell whether this
		// deletion came after it (written).
		r.goneAt = max(r.goneAt, rev)
		o.recs[key] = r
		return false
	}
	if kv == nil && r.lost && r.absent {
		// Still absent, as last found.
		return false
	}
	// Lost, or lost again at a later revision: a write under way that
	// returns at an earlier one does not undo it (written), and the alive
	// record is repaired again (lost).
	r.lost, r.lostAt, r.absent = true, rev, kv == nil
	now := o.now()
	if r.contention.flaps > 0 && now.Sub(r.contention.last) <= contendWindow {
		r.contention.flaps++
	} else {
		r.contention.flaps = 1
	}
	r.contention.last = now
	o.recs[key] = r
	return true
}

// observeOwn implements ownObserver.
func (b *Backend) observeOwn(key string, kv *mvccpb.KeyValue, rev int64) {
	if b.own.check(key, kv, rev) {
		b.lost(key)
	}
}

// observeOwnAbsent implements ownObserver.
func (b *Backend) observeOwnAbsent(present func(key string) bool, rev int64) {
	b.own.mu.Lock()
	keys := make([]string, 0, len(b.own.recs))
	for k := range b.own.recs {
		if !present(k) {
			keys = append(keys, k)
		}
	}
	b.own.mu.Unlock()
	for _, k := range keys {
		if b.own.check(k, nil, rev) {
			b.lost(k)
		}
	}
}

// observeOtherHistory implements ownObserver.
func (b *Backend) observeOtherHistory() { b.own.otherHistory() }

// otherHistory forgets the revisions of the writes, which belong to
// another history: every record counts as lost, so that the next put
// writes it whatever etcd holds, and the watch compares values alone.
func (o *ownRecords) otherHistory() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for k, r := range o.recs {
		o.recs[k] = ownRecord{value: r.value, lost: true, absent: r.absent, contention: r.contention}
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
		// While another cluster holds the alive record, it is looked at
		// again every TTL too: the watch may miss its end (a compaction).
		var again <-chan time.Time
		if b.aliveFenced.Load() {
			again = time.After(b.opts.TTL)
		}
		select {
		case <-b.ctx.Done():
			return
		case <-b.repair:
		case <-again:
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
	// The lock is waited for within RequestTimeout; the requests under it
	// are each bounded on their own, as in checkLease: a lease found lost
	// is replaced here, every record written again.
	wait, cancel := context.WithTimeout(b.ctx, b.opts.RequestTimeout)
	defer cancel()
	_, unlock, err := b.lock(wait)
	if err != nil {
		return err
	}
	defer unlock()
	return b.repairAliveLocked(b.ctx)
}

// repairAliveLocked writes the cluster's alive record again, unless another
// Kubernetes cluster given this id holds it now (aliveHolderLocked). b is
// locked.
func (b *Backend) repairAliveLocked(ctx context.Context) error {
	rev, err := b.aliveHolderLocked(ctx)
	if errors.Is(err, registry.ErrClusterIDInUse) {
		return nil
	}
	if err != nil {
		return err
	}
	if b.Fenced() != nil {
		// The lease was lost while the id was another's: its recovery
		// writes this one's again once the id is free.
		return nil
	}
	key := b.keys.alive(b.opts.Identity.Cluster)
	if err := b.putIfLocked(ctx, []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", rev)},
		keyValue{key: key, value: b.stored[key]}); err != nil {
		return fmt.Errorf("write alive record: %w", err)
	}
	return nil
}

// aliveHolderLocked reads the cluster's alive record, and returns its
// revision (0: there is none) when this backend may write it again. While
// its lease lives, the record may have been deleted by hand, and another
// Kubernetes cluster given this id started meanwhile: it found no alive
// record, took the cluster's records onto its own lease, and wrote its
// alive record. That one is not overwritten: this backend is fenced
// (ErrClusterIDInUse), and writes nothing until the record is gone or its
// own again. b is locked.
func (b *Backend) aliveHolderLocked(ctx context.Context) (int64, error) {
	kv, prev, err := b.readAlive(ctx)
	if err != nil {
		return 0, err
	}
	if kv == nil {
		b.unfenceAliveLocked()
		return 0, nil
	}
	if clientv3.LeaseID(kv.Lease) == b.lease || !b.opts.Identity.OtherInstance(prev.Instance) {
		b.unfenceAliveLocked()
		return kv.ModRevision, nil
	}
	err = b.opts.Identity.InUseBy(prev.Instance, prev.Since)
	b.standing.Set(err)
	b.fenced.Store(&err)
	if !b.aliveFenced.Swap(true) {
		b.log.Error(err, "another cluster took this cluster's id while its alive record was missing; writing nothing")
	}
	return 0, err
}

// readAlive reads the cluster's alive record: nil when there is none.
func (b *Backend) readAlive(ctx context.Context) (*mvccpb.KeyValue, aliveValue, error) {
	var resp *clientv3.GetResponse
	err := b.eachMember(ctx, func(ctx context.Context) (err error) {
		resp, err = b.cli.Get(ctx, b.keys.alive(b.opts.Identity.Cluster))
		return err
	})
	if err != nil {
		return nil, aliveValue{}, fmt.Errorf("read alive record: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, aliveValue{}, nil
	}
	v, _ := decodeAlive(string(resp.Kvs[0].Value))
	return resp.Kvs[0], v, nil
}

// unfenceAliveLocked lifts the fence that aliveHolderLocked set, if it did.
// b is locked.
func (b *Backend) unfenceAliveLocked() {
	if !b.aliveFenced.Load() {
		return
	}
	b.aliveFenced.Store(false)
	b.fenced.Store(nil)
	b.standing.Set(nil)
	b.log.Info("this cluster's id is free again; writing its records again")
}

// ownObserver hears what a watch reads of its cluster's own records, before
// the handler does.
type ownObserver interface {
	// observeOwn: key holds kv (nil: it was deleted at revision rev).
	observeOwn(key string, kv *mvccpb.KeyValue, rev int64)
	// observeOwnAbsent: at revision rev, etcd holds no key of the cluster
	// that present refuses (it says whether the read found a key).
	observeOwnAbsent(present func(key string) bool, rev int64)
	// observeOtherHistory: etcd's history is another than the one the
	// writes' revisions come from (a restore, another etcd at the
	// address); the full read that follows is observed next.
	observeOtherHistory()
}
