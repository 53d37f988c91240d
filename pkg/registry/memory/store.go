package memory

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

// Name is the backend's name in metrics and logs.
const Name = "memory"

// DefaultTTL is how long a cluster's records outlive its last open Registry
// when Options.TTL is zero.
const DefaultTTL = 30 * time.Second

// Store is the shared in-memory registry of any number of clustersets. Its
// zero value is not usable; make one with NewStore.
type Store struct {
	mu    sync.Mutex
	order int64 // the Order of the last export stored
	sets  map[string]*clusterSet
}

// NewStore returns an empty store.
func NewStore() *Store {
	return &Store{sets: map[string]*clusterSet{}}
}

// clusterSet is one clusterset's records, live clusters and watches.
type clusterSet struct {
	exports   map[registry.RecordID]registry.Export
	endpoints map[registry.RecordID]registry.Endpoints
	members   map[string]*member
	watches   map[*watch]struct{}
}

// member is a live cluster: its open Registries, or the timer that expires
// its records after the last one closed.
type member struct {
	cluster registry.Cluster
	// instance is registry.Identity.Instance of its last open.
	instance string
	open     int
	expiry   *time.Timer
}

// set returns the clusterset named id, made on first use. s.mu is held.
func (s *Store) set(id string) *clusterSet {
	cs := s.sets[id]
	if cs == nil {
		cs = &clusterSet{
			exports:   map[registry.RecordID]registry.Export{},
			endpoints: map[registry.RecordID]registry.Endpoints{},
			members:   map[string]*member{},
			watches:   map[*watch]struct{}{},
		}
		s.sets[id] = cs
	}
	return cs
}

// join makes cluster live in cs, or keeps it live if it still is (reopened
// within its TTL: its records and Since stay), unless it lives under
// another instance. s.mu is held.
func (s *Store) join(cs *clusterSet, id registry.Identity, ttl time.Duration) error {
	m := cs.members[id.Cluster]
	if m != nil && id.OtherInstance(m.instance) {
		return id.InUseBy(m.instance, m.cluster.Since)
	}
	if m != nil && m.expiry != nil {
		m.expiry.Stop()
		m.expiry = nil
	}
	if m == nil {
		m = &member{cluster: registry.Cluster{ID: id.Cluster, Since: time.Now(), TTL: ttl}}
		cs.members[id.Cluster] = m
		cs.deliver(registry.Update{Clusters: []registry.Cluster{m.cluster}})
	}
	if id.Instance != "" {
		m.instance = id.Instance
	}
	m.open++
	return nil
}

// leave closes one of cluster's Registries; after the last, its records
// expire after its TTL unless it joins again. s.mu is held.
func (s *Store) leave(cs *clusterSet, id registry.Identity) {
	m := cs.members[id.Cluster]
	m.open--
	if m.open > 0 {
		return
	}
	m.expiry = time.AfterFunc(m.cluster.TTL, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if cs.members[id.Cluster] == m && m.open == 0 {
			cs.expire(id.Cluster)
		}
	})
}

// expire deletes a dead cluster and its records. s.mu is held.
func (cs *clusterSet) expire(cluster string) {
	u := registry.Update{DeletedClusters: []string{cluster}}
	for id := range cs.exports {
		if id.Cluster == cluster {
			delete(cs.exports, id)
			u.DeletedExports = append(u.DeletedExports, id)
		}
	}
	for id := range cs.endpoints {
		if id.Cluster == cluster {
			delete(cs.endpoints, id)
			u.DeletedEndpoints = append(u.DeletedEndpoints, id)
		}
	}
	delete(cs.members, cluster)
	cs.deliver(u)
}

// putExport stores an export unless it is stored already, and adds it to
// u for delivery. s.mu is held.
func (s *Store) putExport(cs *clusterSet, id registry.RecordID, spec registry.ServiceSpec, u *registry.Update) {
	old, ok := cs.exports[id]
	if ok && equality.Semantic.DeepEqual(old.Spec, spec) {
		return
	}
	order := old.Order
	if !ok {
		s.order++
		order = s.order
	}
	e := registry.Export{Cluster: id.Cluster, Service: id.Service, Spec: spec, Order: order}
	cs.exports[id] = e
	u.Exports = append(u.Exports, e)
}

// putEndpoints stores endpoints, stamped at, unless the same groups are
// stored already, and adds them to u for delivery. s.mu is held.
func (cs *clusterSet) putEndpoints(id registry.RecordID, groups []registry.EndpointGroup, at time.Time, u *registry.Update) {
	if old, ok := cs.endpoints[id]; ok && equality.Semantic.DeepEqual(old.Groups, groups) {
		return
	}
	e := registry.Endpoints{Cluster: id.Cluster, Service: id.Service, Groups: groups, Updated: at}
	cs.endpoints[id] = e
	u.Endpoints = append(u.Endpoints, e)
}

// deleteExport deletes a cluster's export and endpoints of a Service. s.mu
// is held.
func (cs *clusterSet) deleteExport(id registry.RecordID) {
	var u registry.Update
	if _, ok := cs.exports[id]; ok {
		delete(cs.exports, id)
		u.DeletedExports = []registry.RecordID{id}
	}
	if _, ok := cs.endpoints[id]; ok {
		delete(cs.endpoints, id)
		u.DeletedEndpoints = []registry.RecordID{id}
	}
	if !u.Empty() {
		cs.deliver(u)
	}
}

// exported lists cluster's exported Services, sorted. s.mu is held.
func (cs *clusterSet) exported(cluster string) []registry.ServiceKey {
	var keys []registry.ServiceKey
	for id := range cs.exports {
		if id.Cluster == cluster {
			keys = append(keys, id.Service)
		}
	}
	slices.SortFunc(keys, registry.ServiceKey.Compare)
	return keys
}

// full is the whole state of cs as one Update. s.mu is held.
func (cs *clusterSet) full() registry.Update {
	u := registry.Update{Full: true}
	for _, e := range cs.exports {
		u.Exports = append(u.Exports, e)
	}
	for _, e := range cs.endpoints {
		u.Endpoints = append(u.Endpoints, e)
	}
	for _, m := range cs.members {
		u.Clusters = append(u.Clusters, m.cluster)
	}
	return u
}

// deliver queues u for every watch of cs. s.mu is held, so that every watch
// receives the updates in the order they were made.
func (cs *clusterSet) deliver(u registry.Update) {
	for w := range cs.watches {
		w.queueUpdate(u)
	}
}

// validate refuses what the other backends refuse too.
func validate(key registry.ServiceKey) error {
	if key.Namespace == "" || key.Name == "" {
		return fmt.Errorf("%w: service key %q needs a namespace and a name", registry.ErrInvalid, key)
	}
	return nil
}

// alive reports ctx's error, if any, and registry.ErrClosed once closed is
// done.
func alive(ctx context.Context, closed <-chan struct{}) error {
	select {
	case <-closed:
		return registry.ErrClosed
	default:
	}
	return ctx.Err()
}
