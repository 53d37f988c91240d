package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

// lock takes the write lock; it fails once the backend is closed. The
// context it returns ends with ctx, and when Close is called: Close waits
// for the holder of the lock, whose writes end with it, so that nothing is
// written once Close has returned.
func (b *Backend) lock(ctx context.Context) (context.Context, func(), error) {
	if err := b.sem.Lock(ctx); err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(b.ctx, cancel)
	return ctx, func() {
		stop()
		cancel()
		b.sem.Unlock()
	}, nil
}

// PutExport stores this cluster's export of a Service.
func (b *Backend) PutExport(ctx context.Context, key registry.ServiceKey, spec registry.ServiceSpec) error {
	rec, err := b.exportRecord(key, spec)
	if err != nil {
		return err
	}
	ctx, unlock, err := b.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
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
	ctx, unlock, err := b.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
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
	ctx, unlock, err := b.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	if b.aliveFenced.Load() {
		// Free again, perhaps: the watch may not have said so.
		if _, err := b.aliveHolderLocked(ctx); err != nil {
			return fmt.Errorf("delete export %s: %w", key, err)
		}
	}
	if err := b.Fenced(); err != nil {
		return fmt.Errorf("delete export %s: %w", key, err)
	}
	exportKey := b.keys.export(b.opts.Identity.Cluster, key)
	endpointsKey := b.keys.endpoints(b.opts.Identity.Cluster, key)
	// Deleted whether or not this backend holds them as written: a put
	// whose reply was lost may have landed, and another controller of the
	// cluster (two overlap in a rollout) may have written them. Callers
	// withdraw what a reader shows, so this costs a write per withdrawal.
	// Forgotten even when the delete fails (it may land): a lease repair
	// must not write them back, and the next DeleteExport deletes them
	// whatever this backend holds.
	delete(b.stored, exportKey)
	delete(b.stored, endpointsKey)
	delete(b.contents, endpointsKey)
	b.own.forget(exportKey, endpointsKey)
	// Only while the cluster's alive record is under this backend's lease:
	// once the lease is lost, its records went with it, and the keys of
	// the cluster are another's (another Kubernetes cluster given this id
	// may have started meanwhile, before the lease repair could tell).
	aliveKey := b.keys.alive(b.opts.Identity.Cluster)
	held := clientv3.Compare(clientv3.LeaseValue(aliveKey), "=", b.lease)
	del := func(ctx context.Context) error {
		resp, err := b.cli.Txn(ctx).If(held).Then(clientv3.OpDelete(exportKey), clientv3.OpDelete(endpointsKey)).Commit()
		if err == nil && !resp.Succeeded {
			return errLeaseGone
		}
		return err
	}
	err = b.eachMember(ctx, del)
	if errors.Is(err, errLeaseGone) {
		tctx, cancel := context.WithTimeout(ctx, b.opts.RequestTimeout)
		ttl, terr := b.lessor.TimeToLive(tctx, b.lease)
		cancel()
		switch {
		case terr == nil && ttl.TTL < 0:
			// The lease is lost: repaired first (or refused,
			// ErrClusterIDInUse, when the id is another cluster's now),
			// then deleted under the new lease.
			if err := b.renewLeaseLocked(ctx); err != nil {
				return fmt.Errorf("delete export %s: %w", key, err)
			}
			held = clientv3.Compare(clientv3.LeaseValue(aliveKey), "=", b.lease)
			err = b.eachMember(ctx, del)
		case terr == nil:
			// The lease lives, the alive record is not under it (deleted
			// or rewritten by someone; the watch has it repaired): the
			// keys are deleted as before while it is still as read, and
			// not another cluster's (aliveHolderLocked).
			rev, herr := b.aliveHolderLocked(ctx)
			if herr != nil {
				return fmt.Errorf("delete export %s: %w", key, herr)
			}
			held = clientv3.Compare(clientv3.ModRevision(aliveKey), "=", rev)
			err = b.eachMember(ctx, del)
		default:
			err = fmt.Errorf("look up lease: %w", terr)
		}
	}
	if err != nil {
		return fmt.Errorf("delete export %s: %w", key, b.permissionHint(err))
	}
	return nil
}

// Exported lists the Services this cluster has exports of.
func (b *Backend) Exported(ctx context.Context) ([]registry.ServiceKey, error) {
	_, unlock, err := b.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
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
// or changed by someone else is written again, after the alive record if
// that was lost too: another cluster given this id may hold it now
// (aliveHolderLocked).
func (b *Backend) putLocked(ctx context.Context, recs ...keyValue) error {
	if b.aliveFenced.Load() {
		// Free again, perhaps: the watch may not have said so.
		if _, err := b.aliveHolderLocked(ctx); err != nil {
			return err
		}
	}
	if err := b.Fenced(); err != nil {
		return err
	}
	if aliveKey := b.keys.alive(b.opts.Identity.Cluster); b.own.isLost(aliveKey) {
		if err := b.repairAliveLocked(ctx); err != nil {
			return err
		}
		if err := b.Fenced(); err != nil {
			return err
		}
	}
	return b.putIfLocked(ctx, nil, recs...)
}

// putIfLocked is putLocked without the alive record's repair. Without cmps,
// the records are written only while the cluster's alive record is under
// the lease: the watch may not have told yet that it was deleted, and
// another cluster given this id took the records (aliveHolderLocked). With
// cmps (the alive record's own repair), only if they hold (errAliveRaced
// otherwise).
func (b *Backend) putIfLocked(ctx context.Context, cmps []clientv3.Cmp, recs ...keyValue) error {
	if err := b.Fenced(); err != nil {
		return err
	}
	recs = slices.DeleteFunc(slices.Clone(recs), func(r keyValue) bool {
		v, ok := b.stored[r.key]
		return ok && v == r.value && !b.own.isLost(r.key)
	})
	if len(recs) == 0 {
		return nil
	}
	for _, r := range recs {
		if n, ok := b.own.contended(r.key); ok {
			return fmt.Errorf("%w: %s was changed by another writer %d times in a row; is another controller running as cluster %q? A cluster id must be unique in the clusterset",
				errContended, r.key, n, b.opts.Identity.Cluster)
		}
	}
	for _, r := range recs {
		b.own.writing(r.key, r.value)
	}
	aliveKey := b.keys.alive(b.opts.Identity.Cluster)
	guarded := len(cmps) == 0
	underLease := func() []clientv3.Cmp {
		return []clientv3.Cmp{clientv3.Compare(clientv3.LeaseValue(aliveKey), "=", b.lease)}
	}
	if guarded {
		cmps = underLease()
	}
	var rev int64
	write := func(ctx context.Context) error {
		ops := make([]clientv3.Op, len(recs))
		for i, r := range recs {
			ops[i] = clientv3.OpPut(r.key, r.value, clientv3.WithLease(b.lease))
		}
		resp, err := b.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
		switch {
		case err != nil:
			return err
		case !resp.Succeeded && guarded:
			return errLeaseGone
		case !resp.Succeeded:
			return errAliveRaced
		}
		rev = resp.Header.Revision
		return nil
	}
	// On failure the outcome is unknown (a reply lost, a timeout: the put
	// may have landed), and others may have written meanwhile: each record
	// counts as lost, and the next put writes it whatever its value. A
	// record held is held with the value wanted, not the one before: a
	// lease repair (renewLeaseLocked) writes that one, not an older one
	// back. A new one is not held: it may never have landed, and a lease
	// repair must not write what was withdrawn meanwhile (a withdrawal
	// writes nothing for what no reader shows).
	failed := func() {
		for _, r := range recs {
			if _, held := b.stored[r.key]; held {
				b.stored[r.key] = r.value
				delete(b.contents, r.key)
			}
			b.own.failed(r.key)
		}
	}
	err := b.eachMember(ctx, write)
	if errors.Is(err, errLeaseGone) {
		// The alive record was deleted or changed (the watch has it
		// repaired), or the lease lost: written while the record is as
		// read, and not another cluster's.
		aliveRev, herr := b.aliveHolderLocked(ctx)
		if herr != nil {
			failed()
			return herr
		}
		cmps = []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(aliveKey), "=", aliveRev)}
		guarded = false
		err = b.eachMember(ctx, write)
	}
	if isLeaseNotFound(err) {
		// The lease expired under us: repair it, then write.
		if err := b.renewLeaseLocked(ctx); err != nil {
			failed()
			return err
		}
		if slices.ContainsFunc(recs, func(r keyValue) bool { return r.key == aliveKey }) {
			// The alive record's repair: the lease's wrote it, with
			// everything else held.
			return nil
		}
		cmps, guarded = underLease(), true
		err = b.eachMember(ctx, write)
	}
	if err != nil {
		failed()
		return b.permissionHint(err)
	}
	for _, r := range recs {
		b.stored[r.key] = r.value
		if b.own.written(r.key, r.value, rev) {
			b.lost(r.key)
		}
	}
	return nil
}

// errLeaseGone: the cluster's alive record is not under this backend's
// lease (DeleteExport).
var errLeaseGone = errors.New("the cluster's alive record is not under this backend's lease")

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
