package clusterset

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

// Local holds this cluster's own endpoints of the Services it exports, as
// its export controller last built them from the cluster's EndpointSlices,
// whether or not the registry has them yet: the import controller reads
// this cluster's part of an import from here, so that a rollout or a pod
// turning not ready here reaches this cluster's imports without a round
// trip through the registry, and while the registry cannot be read.
//
// A nil *Local holds nothing; its methods do nothing.
type Local struct {
	mu      sync.Mutex
	records map[registry.ServiceKey]localRecord
	subs    subscribers[registry.ServiceKey]
}

// localRecord is what Local holds of one Service: the endpoints and the
// export's spec they were built with (ports are matched by name against it).
type localRecord struct {
	spec   registry.ServiceSpec
	groups []registry.EndpointGroup
}

// NewLocal returns an empty Local.
func NewLocal() *Local {
	return &Local{records: map[registry.ServiceKey]localRecord{}}
}

// Set records the endpoints this cluster publishes for key (none, when it
// withholds them) with the spec of the export they go with, and tells the
// subscribers if either changed.
func (l *Local) Set(key registry.ServiceKey, spec registry.ServiceSpec, groups []registry.EndpointGroup) {
	if l == nil {
		return
	}
	l.mu.Lock()
	old, had := l.records[key]
	changed := !had || !equality.Semantic.DeepEqual(old.spec, spec) || !equality.Semantic.DeepEqual(old.groups, groups)
	l.records[key] = localRecord{spec: spec, groups: groups}
	l.mu.Unlock()
	if changed {
		l.notify(key)
	}
}

// Delete forgets key, which this cluster no longer exports (or exports
// nothing of that importers would take), and tells the subscribers.
func (l *Local) Delete(key registry.ServiceKey) {
	if l == nil {
		return
	}
	l.mu.Lock()
	_, had := l.records[key]
	delete(l.records, key)
	l.mu.Unlock()
	if had {
		l.notify(key)
	}
}

// notify tells every subscriber that key's endpoints changed.
func (l *Local) notify(key registry.ServiceKey) {
	for _, f := range l.subs.list() {
		f(key)
	}
}

// Endpoints returns this cluster's endpoints of key as an endpoints record
// of cluster, and whether Local holds them for an export of spec: endpoints
// built for another spec (a port renamed since the registry's export) would
// be matched against the wrong ports. Its Updated stamp is zero: it is no
// registry record, and propagation is not measured from it.
func (l *Local) Endpoints(cluster string, key registry.ServiceKey, spec registry.ServiceSpec) (registry.Endpoints, bool) {
	if l == nil {
		return registry.Endpoints{}, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	rec, ok := l.records[key]
	if !ok || !equality.Semantic.DeepEqual(rec.spec, spec) {
		return registry.Endpoints{}, false
	}
	return registry.Endpoints{Cluster: cluster, Service: key, Groups: rec.groups}, true
}

// Source is Local as a controller-runtime source: from the controller's
// start until it stops, it adds to the workqueue the requests toRequests
// makes of each Service whose local endpoints changed. toRequests runs on
// the goroutine that changed them (the export controller's) and must not
// block.
func (l *Local) Source(toRequests func(context.Context, registry.ServiceKey) []reconcile.Request) source.Source {
	return source.Func(func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		if l == nil {
			return nil
		}
		context.AfterFunc(ctx, l.subs.add(enqueuer(ctx, q, toRequests)))
		return nil
	})
}
