package clusterset

import (
	"slices"
	"sync"
	"time"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

// View is the clusterset state delivered by a registry watch. It implements
// registry.Handler; readers may call its methods from any goroutine.
type View struct {
	mu        sync.RWMutex
	exports   map[registry.ServiceKey]map[string]registry.Export
	endpoints map[registry.ServiceKey]map[string]registry.Endpoints
	clusters  map[string]registry.Cluster
	synced    bool
	connected bool
	connErr   error
	changedAt map[registry.ServiceKey]time.Time

	subsMu sync.Mutex
	subs   []chan<- registry.ServiceKey

	syncedCh chan struct{}
	now      func() time.Time
}

var _ registry.Handler = (*View)(nil)

// NewView returns an empty view that has not synced yet.
func NewView() *View {
	return &View{
		exports:   map[registry.ServiceKey]map[string]registry.Export{},
		endpoints: map[registry.ServiceKey]map[string]registry.Endpoints{},
		clusters:  map[string]registry.Cluster{},
		changedAt: map[registry.ServiceKey]time.Time{},
		syncedCh:  make(chan struct{}),
		now:       time.Now,
	}
}

// Subscribe registers ch to receive the key of every Service whose records
// change. Sends block, so ch should be buffered or drained promptly.
func (v *View) Subscribe(ch chan<- registry.ServiceKey) {
	v.subsMu.Lock()
	defer v.subsMu.Unlock()
	v.subs = append(v.subs, ch)
}

// Synced is closed after the first full update.
func (v *View) Synced() <-chan struct{} { return v.syncedCh }

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
	slices.SortFunc(out, func(a, b registry.ServiceKey) int {
		if a.Namespace != b.Namespace {
			if a.Namespace < b.Namespace {
				return -1
			}
			return 1
		}
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out
}

// Clusters returns the live clusters, sorted by id.
func (v *View) Clusters() []registry.Cluster {
	v.mu.RLock()
	defer v.mu.RUnlock()
	out := make([]registry.Cluster, 0, len(v.clusters))
	for _, c := range v.clusters {
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b registry.Cluster) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return out
}

// ChangedAt returns when the view last saw a change to the Service's records.
func (v *View) ChangedAt(key registry.ServiceKey) time.Time {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.changedAt[key]
}

// OnConnection implements registry.Handler.
func (v *View) OnConnection(connected bool, err error) {
	v.mu.Lock()
	v.connected, v.connErr = connected, err
	v.mu.Unlock()
}

// OnUpdate implements registry.Handler.
func (v *View) OnUpdate(u registry.Update) {
	changed := map[registry.ServiceKey]bool{}
	v.mu.Lock()
	now := v.now()
	if u.Full {
		// Everything not in the new state is gone; everything that differs changed.
		oldExports, oldEndpoints := v.exports, v.endpoints
		v.exports = map[registry.ServiceKey]map[string]registry.Export{}
		v.endpoints = map[registry.ServiceKey]map[string]registry.Endpoints{}
		v.clusters = map[string]registry.Cluster{}
		for _, e := range u.Exports {
			putExport(v.exports, e)
		}
		for _, e := range u.Endpoints {
			putEndpoints(v.endpoints, e)
		}
		for k := range oldExports {
			if !exportsEqual(oldExports[k], v.exports[k]) {
				changed[k] = true
			}
		}
		for k := range v.exports {
			if !exportsEqual(oldExports[k], v.exports[k]) {
				changed[k] = true
			}
		}
		for k := range oldEndpoints {
			if !endpointsEqual(oldEndpoints[k], v.endpoints[k]) {
				changed[k] = true
			}
		}
		for k := range v.endpoints {
			if !endpointsEqual(oldEndpoints[k], v.endpoints[k]) {
				changed[k] = true
			}
		}
	} else {
		for _, id := range u.DeletedExports {
			if m := v.exports[id.Service]; m != nil {
				if _, ok := m[id.Cluster]; ok {
					delete(m, id.Cluster)
					if len(m) == 0 {
						delete(v.exports, id.Service)
					}
					changed[id.Service] = true
				}
			}
		}
		for _, id := range u.DeletedEndpoints {
			if m := v.endpoints[id.Service]; m != nil {
				if _, ok := m[id.Cluster]; ok {
					delete(m, id.Cluster)
					if len(m) == 0 {
						delete(v.endpoints, id.Service)
					}
					changed[id.Service] = true
				}
			}
		}
		for _, e := range u.Exports {
			if old, ok := v.exports[e.Service][e.Cluster]; !ok || !exportEqual(old, e) {
				putExport(v.exports, e)
				changed[e.Service] = true
			}
		}
		for _, e := range u.Endpoints {
			if old, ok := v.endpoints[e.Service][e.Cluster]; !ok || !endpointsOneEqual(old, e) {
				putEndpoints(v.endpoints, e)
				changed[e.Service] = true
			}
		}
	}
	for _, c := range u.Clusters {
		v.clusters[c.ID] = c
	}
	for _, id := range u.DeletedClusters {
		delete(v.clusters, id)
	}
	for k := range changed {
		v.changedAt[k] = now
	}
	firstSync := u.Full && !v.synced
	if u.Full {
		v.synced = true
	}
	v.mu.Unlock()

	if firstSync {
		close(v.syncedCh)
	}
	v.notify(changed)
}

func (v *View) notify(changed map[registry.ServiceKey]bool) {
	if len(changed) == 0 {
		return
	}
	v.subsMu.Lock()
	subs := slices.Clone(v.subs)
	v.subsMu.Unlock()
	for k := range changed {
		for _, ch := range subs {
			ch <- k
		}
	}
}

func putExport(m map[registry.ServiceKey]map[string]registry.Export, e registry.Export) {
	if m[e.Service] == nil {
		m[e.Service] = map[string]registry.Export{}
	}
	m[e.Service][e.Cluster] = e
}

func putEndpoints(m map[registry.ServiceKey]map[string]registry.Endpoints, e registry.Endpoints) {
	if m[e.Service] == nil {
		m[e.Service] = map[string]registry.Endpoints{}
	}
	m[e.Service][e.Cluster] = e
}
