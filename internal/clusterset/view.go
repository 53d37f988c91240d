package clusterset

import (
	"slices"
	"sync"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

// View is the clusterset state delivered by a registry watch. It implements
// registry.Handler; readers may call its methods from any goroutine.
type View struct {
	mu        sync.RWMutex
	exports   map[registry.ServiceKey]map[string]registry.Export
	endpoints map[registry.ServiceKey]map[string]registry.Endpoints
	synced    bool
	connected bool
	connErr   error

	subsMu sync.Mutex
	subs   map[int]func(Change)
	nextID int
}

var _ registry.Handler = (*View)(nil)

// Change is what the View tells its subscribers: the records of Service
// changed, or, with Reachability set, the registry became reachable or
// unreachable, or was read in full for the first time (Service is then
// zero): every Service, and every object made from one, may need another
// look.
type Change struct {
	Service      registry.ServiceKey
	Reachability bool
}

// NewView returns an empty view that has not synced yet.
func NewView() *View {
	return &View{
		exports:   map[registry.ServiceKey]map[string]registry.Export{},
		endpoints: map[registry.ServiceKey]map[string]registry.Endpoints{},
		subs:      map[int]func(Change){},
	}
}

// Subscribe calls f with every change from now on, until the returned
// function is called. f runs on the goroutine that delivers the registry's
// watch, after the View has applied the change, and must not block.
func (v *View) Subscribe(f func(Change)) (unsubscribe func()) {
	v.subsMu.Lock()
	defer v.subsMu.Unlock()
	id := v.nextID
	v.nextID++
	v.subs[id] = f
	return func() {
		v.subsMu.Lock()
		defer v.subsMu.Unlock()
		delete(v.subs, id)
	}
}

// HasSynced reports whether the first full update arrived.
func (v *View) HasSynced() bool {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.synced
}

// Connected reports whether the registry is reachable, and if not, why.
func (v *View) Connected() (bool, error) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.connected, v.connErr
}

// Exports returns every live cluster's export of a Service, in no order.
func (v *View) Exports(key registry.ServiceKey) []registry.Export {
	v.mu.RLock()
	defer v.mu.RUnlock()
	out := make([]registry.Export, 0, len(v.exports[key]))
	for _, e := range v.exports[key] {
		out = append(out, e)
	}
	return out
}

// Endpoints returns every live cluster's endpoints of a Service, by cluster.
func (v *View) Endpoints(key registry.ServiceKey) map[string]registry.Endpoints {
	v.mu.RLock()
	defer v.mu.RUnlock()
	out := make(map[string]registry.Endpoints, len(v.endpoints[key]))
	for c, e := range v.endpoints[key] {
		out[c] = e
	}
	return out
}

// Keys returns every Service that some cluster exports, optionally only in
// one namespace ("" for all), sorted.
func (v *View) Keys(namespace string) []registry.ServiceKey {
	v.mu.RLock()
	defer v.mu.RUnlock()
	var out []registry.ServiceKey
	for k := range v.exports {
		if namespace == "" || k.Namespace == namespace {
			out = append(out, k)
		}
	}
	slices.SortFunc(out, registry.ServiceKey.Compare)
	return out
}

// OnConnection implements registry.Handler. Subscribers hear of a change of
// reachability, not of every report.
func (v *View) OnConnection(connected bool, err error) {
	v.mu.Lock()
	changed := v.connected != connected
	v.connected, v.connErr = connected, err
	v.mu.Unlock()
	if changed {
		v.notify(Change{Reachability: true})
	}
}

// OnUpdate implements registry.Handler. Subscribers hear of every Service
// whose records differ from what the View held, and of the first full
// update (as a Reachability change: what waited for the registry to be
// read can go on).
func (v *View) OnUpdate(u registry.Update) {
	v.mu.Lock()
	var changed map[registry.ServiceKey]bool
	first := u.Full && !v.synced
	if u.Full {
		changed = v.replace(u)
		v.synced = true
	} else {
		changed = v.apply(u)
	}
	v.mu.Unlock()
	if len(changed) == 0 && !first {
		return
	}
	subs := v.subscribers()
	for k := range changed {
		for _, f := range subs {
			f(Change{Service: k})
		}
	}
	if first {
		for _, f := range subs {
			f(Change{Reachability: true})
		}
	}
}

// replace makes u, a full update, the View's state and returns the Services
// whose records differ from before: everything not in u is gone. v.mu is
// held.
func (v *View) replace(u registry.Update) map[registry.ServiceKey]bool {
	oldExports, oldEndpoints := v.exports, v.endpoints
	v.exports = map[registry.ServiceKey]map[string]registry.Export{}
	v.endpoints = map[registry.ServiceKey]map[string]registry.Endpoints{}
	for _, e := range u.Exports {
		put(v.exports, e.Service, e.Cluster, e)
	}
	for _, e := range u.Endpoints {
		put(v.endpoints, e.Service, e.Cluster, e)
	}
	changed := map[registry.ServiceKey]bool{}
	diff(changed, oldExports, v.exports, exportsEqual)
	diff(changed, oldEndpoints, v.endpoints, endpointsEqual)
	return changed
}

// apply applies u, an incremental update, and returns the Services whose
// records it changed. v.mu is held.
func (v *View) apply(u registry.Update) map[registry.ServiceKey]bool {
	changed := map[registry.ServiceKey]bool{}
	for _, id := range u.DeletedExports {
		if remove(v.exports, id) {
			changed[id.Service] = true
		}
	}
	for _, id := range u.DeletedEndpoints {
		if remove(v.endpoints, id) {
			changed[id.Service] = true
		}
	}
	for _, e := range u.Exports {
		if old, ok := v.exports[e.Service][e.Cluster]; !ok || !exportEqual(old, e) {
			put(v.exports, e.Service, e.Cluster, e)
			changed[e.Service] = true
		}
	}
	for _, e := range u.Endpoints {
		if old, ok := v.endpoints[e.Service][e.Cluster]; !ok || !endpointsOneEqual(old, e) {
			put(v.endpoints, e.Service, e.Cluster, e)
			changed[e.Service] = true
		}
	}
	return changed
}

// notify tells every subscriber of c.
func (v *View) notify(c Change) {
	for _, f := range v.subscribers() {
		f(c)
	}
}

// subscribers returns the current subscribers, to call without the lock.
func (v *View) subscribers() []func(Change) {
	v.subsMu.Lock()
	defer v.subsMu.Unlock()
	subs := make([]func(Change), 0, len(v.subs))
	for _, f := range v.subs {
		subs = append(subs, f)
	}
	return subs
}

// diff marks in changed every Service whose records differ between old and
// cur.
func diff[T any](changed map[registry.ServiceKey]bool, old, cur map[registry.ServiceKey]map[string]T, equal func(a, b map[string]T) bool) {
	for k := range old {
		if !equal(old[k], cur[k]) {
			changed[k] = true
		}
	}
	for k := range cur {
		if !equal(old[k], cur[k]) {
			changed[k] = true
		}
	}
}

func put[T any](m map[registry.ServiceKey]map[string]T, key registry.ServiceKey, cluster string, rec T) {
	if m[key] == nil {
		m[key] = map[string]T{}
	}
	m[key][cluster] = rec
}

// remove deletes the record id names and reports whether there was one.
func remove[T any](m map[registry.ServiceKey]map[string]T, id registry.RecordID) bool {
	byCluster := m[id.Service]
	if _, ok := byCluster[id.Cluster]; !ok {
		return false
	}
	delete(byCluster, id.Cluster)
	if len(byCluster) == 0 {
		delete(m, id.Service)
	}
	return true
}
