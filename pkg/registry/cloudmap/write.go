package cloudmap

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	sd "github.com/aws/aws-sdk-go-v2/service/servicediscovery"
	"github.com/aws/aws-sdk-go-v2/service/servicediscovery/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

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
	if err := b.writable(); err != nil {
		return fmt.Errorf("%s %s: %w", what, key, err)
	}
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
	if err := b.writable(); err != nil {
		return fmt.Errorf("delete export %s: %w", key, err)
	}
	if err := b.apply(ctx, key, state{}); err != nil {
		return fmt.Errorf("delete export %s: %w", key, err)
	}
	return nil
}

// Exported lists the Services this cluster exports, and those the AWS
// controller left instances of for it.
func (b *Backend) Exported(ctx context.Context) ([]registry.ServiceKey, error) {
	if err := b.lock(ctx); err != nil {
		return nil, err
	}
	defer b.unlock()
	var out []registry.ServiceKey
	for k, o := range b.own {
		// The AWS controller's instances that read as no export are listed
		// too: withdrawn unless the Service is exported.
		if o.st.Spec != nil || slices.ContainsFunc(slices.Collect(maps.Values(o.stored)), func(at map[string]string) bool { return at[attrRecord] == "" }) {
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
	sent := false
	defer func() {
		written := maps.Clone(desired)
		if rec != nil {
			written[rec.ID] = *rec
		}
		b.ownWatch.end(b.opts.Identity, key, written, err == nil, sent)
	}()
	for attempt := 0; ; attempt++ {
		var s bool
		s, err = b.applyTo(ctx, key, o, rec, desired, force)
		sent = sent || s
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
func (b *Backend) applyTo(ctx context.Context, key registry.ServiceKey, o *ownService, rec *instance, desired map[string]instance, force bool) (sent bool, err error) {
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
		return false, nil
	}
	// The Service's Cloud Map service exists from its export on, as the
	// AWS controller makes it, endpoints or not.
	if (len(puts) > 0 || recPut != nil) && o.svc.ID == "" {
		svc, err := b.ensureService(ctx, key.Namespace, key.Name)
		if err != nil {
			return true, err
		}
		o.svc = svc
	}
	if recPut != nil && recFirst {
		if err := b.writeRecord(ctx, o, *recPut); err != nil {
			o.recordUnconfirmed(err)
			return true, err
		}
		o.record = recPut.Attrs
	}
	var unconfirmedMu sync.Mutex
	var unconfirmed []string
	err = b.parallel(ctx, len(puts), func(ctx context.Context, i int) error {
		err := b.register(ctx, o.svc, puts[i])
		if errors.Is(err, errUnconfirmed) {
			unconfirmedMu.Lock()
			unconfirmed = append(unconfirmed, puts[i].ID)
			unconfirmedMu.Unlock()
		}
		return err
	}, func(i int) { o.stored[puts[i].ID] = puts[i].Attrs })
	for _, id := range unconfirmed {
		// Maybe registered. One not held is held without attributes: it is
		// registered again if still wanted, deregistered if not. One held
		// keeps what was held (other tools' attributes included): its
		// owned attributes differ from those wanted, so it is written again.
		if _, held := o.stored[id]; !held {
			o.stored[id] = nil
		}
	}
	if err != nil {
		return true, err
	}
	var last []string
	if n := len(dels); n > 0 && dels[n-1] == legacy {
		dels, last = dels[:n-1], dels[n-1:]
	}
	err = b.parallel(ctx, len(dels), func(ctx context.Context, i int) error {
		return b.deregister(ctx, o.svc, dels[i])
	}, func(i int) { delete(o.stored, dels[i]) })
	if err != nil {
		return true, err
	}
	for _, id := range last {
		if err := b.deregister(ctx, o.svc, id); err != nil {
			return true, err
		}
		delete(o.stored, id)
	}
	if recDel {
		if err := b.deleteRecord(ctx, o, key); err != nil {
			return true, err
		}
		o.record = nil
	}
	if recPut != nil && !recFirst {
		if err := b.writeRecord(ctx, o, *recPut); err != nil {
			o.recordUnconfirmed(err)
			return true, err
		}
		o.record = recPut.Attrs
	}
	return true, nil
}

// recordUnconfirmed takes in err, the failure of a write of the service
// record: when the write may have taken effect (errUnconfirmed) and no record
// was held, the record is held without attributes, so that a later put
// registers it again and a withdrawal deregisters it.
func (o *ownService) recordUnconfirmed(err error) {
	if errors.Is(err, errUnconfirmed) && o.record == nil {
		o.record = map[string]string{}
	}
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

// writeRecord registers a service record in the records service that
// holds o's record, creating that service again if it was deleted. A new
// record goes to the first records service not known to be full: Cloud Map
// holds at most 1,000 instances a service, and refuses more
// (ResourceLimitExceeded), so the records of a large clusterset (or of
// every clusterset of the account) fill "records", then "records-1", and
// so on; watchers read them all. A refusal by a records service that holds
// no instance is not that quota but the system namespace's (instances per
// namespace, 2,000 unless raised): the write fails, and no further service
// is tried (or created).
func (b *Backend) writeRecord(ctx context.Context, o *ownService, in instance) error {
	name := o.recordIn
	if name == "" {
		name = b.recordsWithRoom()
	}
	for {
		err := b.registerIn(ctx, name, in)
		if errorCode(err) != "ResourceLimitExceeded" {
			if err == nil || errors.Is(err, errUnconfirmed) {
				if o.recordIn != "" && o.recordIn != name {
					// It was gone from the full one (deleted by hand):
					// nothing is left there, but a leftover would be
					// read twice.
					if b.deregister(ctx, b.systemService(o.recordIn), in.ID) == nil {
						delete(b.recordsFull, o.recordIn)
					}
				}
				o.recordIn = name
			}
			return err
		}
		empty, eerr := b.systemServiceEmpty(ctx, name)
		if eerr != nil {
			return fmt.Errorf("records service %s refused a record, and could not be read: %w", name, errors.Join(err, eerr))
		}
		if empty {
			return fmt.Errorf("the system namespace %s is at a quota of Cloud Map's per namespace (instances, 2,000 unless raised): %w", b.opts.SystemNamespace, err)
		}
		b.recordsFull[name] = b.now()
		next := b.recordsWithRoom()
		if next == "" {
			return fmt.Errorf("every records service is full (%d of 1,000 instances each): %w", maxRecordsServices, err)
		}
		b.log.V(1).Info("records service full, writing to the next", "full", name, "next", next)
		name = next
	}
}

// recordsFullFor is how long a records service that refused a record is
// not tried for a new one: other clusters' withdrawals make room in it
// unseen (this backend's own clear the mark at once).
const recordsFullFor = 10 * time.Minute

// recordsWithRoom is the first records service not known to be full; ""
// when every one is. Known full is known since a refusal less than
// recordsFullFor ago, and no withdrawal of this backend's from it since.
func (b *Backend) recordsWithRoom() string {
	now := b.now()
	for i := range maxRecordsServices {
		n := recordsName(i)
		if at, ok := b.recordsFull[n]; !ok || now.Sub(at) >= recordsFullFor {
			return n
		}
	}
	return ""
}

// systemServiceEmpty reports whether the system namespace's service name
// holds no instance (of any clusterset).
func (b *Backend) systemServiceEmpty(ctx context.Context, name string) (bool, error) {
	svc := b.systemService(name)
	if svc.ID == "" {
		return true, nil
	}
	out, err := b.api.ListInstances(ctx, &sd.ListInstancesInput{ServiceId: aws.String(svc.ID), MaxResults: aws.Int32(1)})
	if err != nil {
		return false, fmt.Errorf("list instances of %s: %w", name, err)
	}
	return len(out.Instances) == 0, nil
}

// registerIn registers in in the records service name, creating the
// service (again) when it does not exist.
func (b *Backend) registerIn(ctx context.Context, name string, in instance) error {
	svc := b.systemService(name)
	if svc.ID != "" {
		err := b.register(ctx, svc, in)
		if !isNotFound(err) {
			return err
		}
	}
	svc, err := b.recreateSystemService(ctx, name)
	if err != nil {
		return err
	}
	return b.register(ctx, svc, in)
}

// deleteRecord deregisters this cluster's service record of key from the
// records service that holds it. A records service that is gone holds no
// record.
func (b *Backend) deleteRecord(ctx context.Context, o *ownService, key registry.ServiceKey) error {
	name := cmp.Or(o.recordIn, recordsService)
	err := b.deregister(ctx, b.systemService(name), recordID(b.enc.prefix, key))
	if err == nil {
		delete(b.recordsFull, name) // room made
	}
	if err == nil || isNotFound(err) {
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

// errUnconfirmed: a write was sent, but neither Cloud Map's answer nor its
// operation's success was seen (a response lost, a wait that failed or
// timed out): the instance may be in Cloud Map or not.
var errUnconfirmed = errors.New("the write was sent, its outcome is unknown")

// register writes one instance and waits until Cloud Map has stored it.
func (b *Backend) register(ctx context.Context, svc service, in instance) error {
	out, err := b.api.RegisterInstance(ctx, &sd.RegisterInstanceInput{
		ServiceId:  aws.String(svc.ID),
		InstanceId: aws.String(in.ID),
		Attributes: in.Attrs,
	})
	var dup *types.DuplicateRequest
	switch {
	case err == nil:
	case errors.As(err, &dup) && aws.ToString(dup.DuplicateOperationId) != "":
		// The SDK retries with the same CreatorRequestId: Cloud Map took
		// in an earlier attempt, whose answer was lost. Its operation
		// tells the outcome.
		out = &sd.RegisterInstanceOutput{OperationId: dup.DuplicateOperationId}
	case refused(err):
		return fmt.Errorf("register instance %s: %w", in.ID, err)
	default:
		// No answer, or the answer to a retry (throttled, a server
		// error) of an attempt whose own answer was lost: the
		// registration may have been made.
		return fmt.Errorf("register instance %s: %w: %w", in.ID, errUnconfirmed, err)
	}
	b.noteOp(aws.ToString(out.OperationId), opTarget{service: svc.ID, instance: in.ID, attrs: in.Attrs})
	if _, err := b.waitOperation(ctx, aws.ToString(out.OperationId)); err != nil {
		return fmt.Errorf("register instance %s: %w: %w", in.ID, errUnconfirmed, err)
	}
	b.registered.Store(recordRef(svc.ID, in.ID), b.now())
	return nil
}

// propagation is how long after its registration Cloud Map may answer
// InstanceNotFound for an instance that exists ("recently registered, and
// information about the instance hasn't propagated yet", its API reference
// says of DeregisterInstance).
const propagation = time.Minute

// errNotPropagated: a deregistration answered InstanceNotFound soon after
// the instance's registration, which may not have propagated: tried again.
var errNotPropagated = errors.New("not found soon after its registration, which may not have propagated yet")

// deregister deletes one instance and waits until Cloud Map has deleted it.
// Deleting what is not there is not an error.
func (b *Backend) deregister(ctx context.Context, svc service, id string) error {
	out, err := b.api.DeregisterInstance(ctx, &sd.DeregisterInstanceInput{
		ServiceId:  aws.String(svc.ID),
		InstanceId: aws.String(id),
	})
	ref := recordRef(svc.ID, id)
	if errorCode(err) == "InstanceNotFound" {
		// Not there, unless registered so lately that Cloud Map does not
		// know it everywhere yet: then it is left held, deregistered at
		// the next put (a withdrawal's, retried), not left in Cloud Map
		// for good.
		if at, ok := b.registered.Load(ref); ok && b.now().Sub(at.(time.Time)) < propagation {
			return fmt.Errorf("deregister instance %s: %w", id, errNotPropagated)
		}
		b.registered.Delete(ref)
		return nil
	}
	if err != nil {
		return fmt.Errorf("deregister instance %s: %w", id, err)
	}
	b.noteOp(aws.ToString(out.OperationId), opTarget{service: svc.ID, instance: id, deregister: true})
	if _, err := b.waitOperation(ctx, aws.ToString(out.OperationId)); err != nil {
		return fmt.Errorf("deregister instance %s: %w", id, err)
	}
	b.registered.Delete(ref)
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
