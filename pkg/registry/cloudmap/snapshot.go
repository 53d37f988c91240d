package cloudmap

import (
	"cmp"
	"reflect"
	"slices"
	"time"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

// snapshot builds the records the watcher knows, less those of clusters
// whose heartbeat expired.
func (w *watcher) snapshot() *snapshot {
	b := w.b
	now := b.now()
	s := newSnapshot()
	alive := map[string]bool{}
	for c, hb := range w.beats {
		if hb.alive(now) {
			alive[c] = true
			cl := registry.Cluster{ID: c, LastSeen: time.UnixMilli(hb.ms).UTC(), TTL: hb.ttl}
			if hb.since > 0 {
				cl.Since = time.UnixMilli(hb.since).UTC()
			}
			s.clusters[c] = cl
		}
	}
	byKey := map[registry.ServiceKey][]instance{}
	for _, c := range w.services {
		key := registry.ServiceKey{Namespace: c.svc.NS.Name, Name: c.svc.Name}
		byKey[key] = append(byKey[key], c.instances...)
	}
	for _, in := range w.records {
		if key, ok := recordKey(in.Attrs); ok {
			byKey[key] = append(byKey[key], in)
		}
	}
	for key, insts := range byKey {
		for cluster, r := range decodeService(b.opts.Identity.ClusterSet, key, slices.Clone(insts)) {
			if r.MCSD && !alive[cluster] {
				continue
			}
			if !r.MCSD {
				// The AWS controller's records live as long as they are
				// there; it withdraws them itself.
				if _, ok := s.clusters[cluster]; !ok {
					s.clusters[cluster] = registry.Cluster{ID: cluster}
				}
			}
			id := registry.RecordID{Cluster: cluster, Service: key}
			if r.Export != nil {
				s.exports[id] = *r.Export
			}
			if r.Endpoints != nil {
				s.endpoints[id] = *r.Endpoints
			}
		}
	}
	return s
}

// snapshot is the state a handler has been given.
type snapshot struct {
	exports   map[registry.RecordID]registry.Export
	endpoints map[registry.RecordID]registry.Endpoints
	clusters  map[string]registry.Cluster
}

func newSnapshot() *snapshot {
	return &snapshot{
		exports:   map[registry.RecordID]registry.Export{},
		endpoints: map[registry.RecordID]registry.Endpoints{},
		clusters:  map[string]registry.Cluster{},
	}
}

func (s *snapshot) full() registry.Update {
	u := newSnapshot().diff(s)
	u.Full = true
	return u
}

// diff is the update that turns s into next. A cluster counts as changed
// only when it appears: its LastSeen moves with every heartbeat.
func (s *snapshot) diff(next *snapshot) registry.Update {
	var u registry.Update
	u.Exports, u.DeletedExports = diffMap(s.exports, next.exports, differ)
	u.Endpoints, u.DeletedEndpoints = diffMap(s.endpoints, next.endpoints, differ)
	u.Clusters, u.DeletedClusters = diffMap(s.clusters, next.clusters, func(_, _ registry.Cluster) bool { return false })
	slices.SortFunc(u.Exports, func(a, b registry.Export) int {
		return compareRecordIDs(registry.RecordID{Cluster: a.Cluster, Service: a.Service}, registry.RecordID{Cluster: b.Cluster, Service: b.Service})
	})
	slices.SortFunc(u.Endpoints, func(a, b registry.Endpoints) int {
		return compareRecordIDs(registry.RecordID{Cluster: a.Cluster, Service: a.Service}, registry.RecordID{Cluster: b.Cluster, Service: b.Service})
	})
	slices.SortFunc(u.DeletedExports, compareRecordIDs)
	slices.SortFunc(u.DeletedEndpoints, compareRecordIDs)
	slices.SortFunc(u.Clusters, func(a, b registry.Cluster) int { return cmp.Compare(a.ID, b.ID) })
	slices.Sort(u.DeletedClusters)
	return u
}

// diffMap lists the values of next that old lacks or that changed reports
// changed from old's, and the keys of old that next lacks.
func diffMap[K comparable, V any](old, next map[K]V, changed func(old, next V) bool) (upserted []V, deleted []K) {
	for k, v := range next {
		if o, ok := old[k]; !ok || changed(o, v) {
			upserted = append(upserted, v)
		}
	}
	for k := range old {
		if _, ok := next[k]; !ok {
			deleted = append(deleted, k)
		}
	}
	return upserted, deleted
}

// differ reports whether a and b differ, deeply.
func differ[V any](a, b V) bool { return !reflect.DeepEqual(a, b) }

func compareRecordIDs(a, b registry.RecordID) int {
	return cmp.Or(cmp.Compare(a.Service.Namespace, b.Service.Namespace), cmp.Compare(a.Service.Name, b.Service.Name), cmp.Compare(a.Cluster, b.Cluster))
}
