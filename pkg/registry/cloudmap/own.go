package cloudmap

import (
	"context"
	"maps"
	"reflect"
	"slices"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	sd "github.com/aws/aws-sdk-go-v2/service/servicediscovery"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

// ownWatch compares what the backend's watch reads of the cluster's own
// records with what the backend last wrote. A record deleted or changed by
// someone else (by hand, or another tool) is marked lost: the next put of its
// Service registers every instance again, even those the backend believes
// written. The export controller makes that put when its View no longer
// shows what it exported.
type ownWatch struct {
	mu sync.Mutex
	// written is, by Service, what a watcher reads of the instances the
	// backend last wrote (decoded as the watch decodes them).
	written map[registry.ServiceKey]*serviceRecords
	// inflight counts the writes under way, by Service: what the watch
	// reads meanwhile proves nothing.
	inflight map[registry.ServiceKey]int
	lost     map[registry.ServiceKey]bool
	// delivered is what the watch last delivered of the own records.
	delivered map[registry.ServiceKey]*serviceRecords
	// ends counts the writes that ended; endedAt is, by Service, the count
	// when its last write ended. A delivery read by a poll that began at
	// count n proves nothing of a Service whose write ended after n: the
	// read may have caught it half done (check).
	ends    uint64
	endedAt map[registry.ServiceKey]uint64
}

func newOwnWatch() ownWatch {
	return ownWatch{
		written:   map[registry.ServiceKey]*serviceRecords{},
		inflight:  map[registry.ServiceKey]int{},
		lost:      map[registry.ServiceKey]bool{},
		delivered: map[registry.ServiceKey]*serviceRecords{},
		endedAt:   map[registry.ServiceKey]uint64{},
	}
}

// epoch is the count of writes ended: what a poll that begins now cannot
// have missed.
func (o *ownWatch) epoch() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.ends
}

// reset forgets what was written: the backend deleted every record of the
// cluster, and writes them again (retake). No write is under way.
func (o *ownWatch) reset() {
	o.mu.Lock()
	defer o.mu.Unlock()
	clear(o.written)
	clear(o.lost)
}

// begin records a write of key under way, and reports whether key's records
// were lost (and must all be written again).
func (o *ownWatch) begin(key registry.ServiceKey) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.inflight[key]++
	return o.lost[key]
}

// end records the end of a write of key; on success, desired is what the
// cluster now has in Cloud Map. sent tells whether the write sent anything
// to Cloud Map: one that found every instance as wanted cannot have been
// read half done, and leaves the polls under way free to judge key.
func (o *ownWatch) end(id registry.Identity, key registry.ServiceKey, desired map[string]instance, ok, sent bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.inflight[key]--; o.inflight[key] <= 0 {
		delete(o.inflight, key)
	}
	if sent {
		o.ends++
		o.endedAt[key] = o.ends
	}
	if !ok {
		return
	}
	delete(o.lost, key)
	o.setWritten(id, key, desired)
}

// seed records what a backend that takes over found of the cluster's
// records of key at start, as written: a later deletion of them is noticed
// even before the backend writes them itself.
func (o *ownWatch) seed(id registry.Identity, key registry.ServiceKey, found map[string]instance) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.setWritten(id, key, found)
}

// setWritten records insts as key's instances as written. o.mu is held.
func (o *ownWatch) setWritten(id registry.Identity, key registry.ServiceKey, insts map[string]instance) {
	recs := decodeService(id.ClusterSet, key, slices.Collect(maps.Values(insts)))[id.Cluster]
	if recs == nil {
		delete(o.written, key)
		return
	}
	o.written[key] = recs
}

// check takes in what u delivers of the own cluster's records, read by a
// poll that began at epoch from, and returns the Services whose records, as
// delivered, newly differ from what was written. A Service whose records
// are delivered as written again is no longer lost (a read from before a
// write of the backend's own); one whose write ended after from is not
// judged (the read may have caught the write half done; the write's
// operations have the next poll read it again), nor is one unsettled (its
// read does not show yet what the operations listed did).
func (o *ownWatch) check(cluster string, u registry.Update, from uint64, unsettled map[registry.ServiceKey]bool) []registry.ServiceKey {
	o.mu.Lock()
	defer o.mu.Unlock()
	touched := map[registry.ServiceKey]bool{}
	if u.Full {
		o.delivered = map[registry.ServiceKey]*serviceRecords{}
		for key := range o.written {
			touched[key] = true
		}
	}
	get := func(key registry.ServiceKey) *serviceRecords {
		touched[key] = true
		if o.delivered[key] == nil {
			o.delivered[key] = &serviceRecords{}
		}
		return o.delivered[key]
	}
	for _, e := range u.Exports {
		if e.Cluster == cluster {
			get(e.Service).Export = &e
		}
	}
	for _, e := range u.Endpoints {
		if e.Cluster == cluster {
			get(e.Service).Endpoints = &e
		}
	}
	for _, id := range u.DeletedExports {
		if id.Cluster == cluster {
			get(id.Service).Export = nil
		}
	}
	for _, id := range u.DeletedEndpoints {
		if id.Cluster == cluster {
			get(id.Service).Endpoints = nil
		}
	}
	var lost []registry.ServiceKey
	for key := range touched {
		w := o.written[key]
		if w == nil || o.inflight[key] > 0 || o.endedAt[key] > from || unsettled[key] {
			continue
		}
		if sameRecords(w, o.delivered[key]) {
			delete(o.lost, key)
			continue
		}
		if !o.lost[key] {
			o.lost[key] = true
			lost = append(lost, key)
		}
	}
	return lost
}

// sameRecords reports whether a watcher reads the same export spec and
// endpoint groups from a as from b (nil: none).
func sameRecords(a, b *serviceRecords) bool {
	if b == nil {
		b = &serviceRecords{}
	}
	if (a.Export == nil) != (b.Export == nil) || (a.Endpoints == nil) != (b.Endpoints == nil) {
		return false
	}
	if a.Export != nil && !reflect.DeepEqual(a.Export.Spec, b.Export.Spec) {
		return false
	}
	return a.Endpoints == nil || reflect.DeepEqual(a.Endpoints.Groups, b.Endpoints.Groups)
}

// guard passes a Watch's calls on to h, checking first what they carry of
// the own cluster's records.
type guard struct {
	h registry.Handler
	b *Backend
	// from is the writes' epoch when the poll being delivered began.
	from uint64
	// unsettled are the Services whose reads in that poll do not show yet
	// what Cloud Map's operations did: not judged.
	unsettled map[registry.ServiceKey]bool
}

// deleteStaleBeat implements beatCleaner: with CleanupEmpty, the heartbeat
// service svc of a cluster gone for longer than staleBeat is deleted
// (holding no instance, it is deleted, or refused if one was added).
func (g *guard) deleteStaleBeat(ctx context.Context, svc service) {
	if !g.b.opts.CleanupEmpty {
		return
	}
	_, err := g.b.api.DeleteService(ctx, &sd.DeleteServiceInput{Id: aws.String(svc.ID)})
	switch {
	case err == nil:
		g.b.dir.dropService(svc.ID)
		g.b.log.Info("deleted the heartbeat service of a cluster gone for a day", "service", svc.Name)
	case isNotFound(err), isInUse(err):
	default:
		g.b.log.V(1).Info("cannot delete the heartbeat service of a cluster gone for a day", "service", svc.Name, "reason", err.Error())
	}
}

// pollStarted implements pollObserver: a poll begins its reads.
func (g *guard) pollStarted() { g.from = g.b.ownWatch.epoch() }

// pollUnsettled implements pollObserver.
func (g *guard) pollUnsettled(keys map[registry.ServiceKey]bool) { g.unsettled = keys }

func (g *guard) OnUpdate(u registry.Update) {
	own := g.b.opts.Identity.Cluster
	if slices.Contains(u.DeletedClusters, own) || (u.Full && !slices.ContainsFunc(u.Clusters, func(c registry.Cluster) bool { return c.ID == own })) {
		// The watch does not see this cluster alive (its own heartbeat is
		// late to it): its records are not delivered, which says nothing
		// of whether they are still there.
		g.h.OnUpdate(u)
		return
	}
	for _, key := range g.b.ownWatch.check(own, u, g.from, g.unsettled) {
		g.b.log.Info("own records deleted or changed by someone else; the next put writes them again", "service", key.String())
	}
	g.h.OnUpdate(u)
}

func (g *guard) OnConnection(connected bool, err error) { g.h.OnConnection(connected, err) }
