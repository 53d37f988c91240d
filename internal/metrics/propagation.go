package metrics

import (
	"sync"
	"time"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

// Propagation observes mcsd_propagation_seconds for one importing cluster:
// the time from a change of a source cluster's endpoints, as stamped by that
// cluster (registry.Endpoints.Updated, its clock), to the moment this
// cluster's EndpointSlices reflect it.
//
// Each record is observed once: when slices reflecting it are in place and
// its stamp is newer than the last one observed for that source cluster and
// Service. Records without a stamp (backends that do not record one) are
// skipped, and so are records stamped before the Propagation was made: at
// start-up the controller takes in records that changed long ago, and the
// time since then says nothing about propagation. Clocks of different
// clusters may disagree; a negative time is observed as zero. The time
// includes whatever held the import back here: a Service imported only when
// its namespace is created is observed with that wait.
//
// A nil *Propagation observes nothing.
type Propagation struct {
	m       *collectors
	cluster string
	start   time.Time
	now     func() time.Time

	mu sync.Mutex
	// last holds the stamp last observed, by Service and source cluster.
	last map[registry.ServiceKey]map[string]time.Time
}

// NewPropagation returns the propagation metric of cluster, registered
// (Register). Records stamped before now are not observed.
func NewPropagation(cluster string) *Propagation {
	Register()
	return newPropagation(std, cluster, time.Now)
}

func newPropagation(c *collectors, cluster string, now func() time.Time) *Propagation {
	return &Propagation{m: c, cluster: cluster, start: now(), now: now, last: map[registry.ServiceKey]map[string]time.Time{}}
}

// Applied reports that this cluster's EndpointSlices of the Service key now
// reflect the given endpoint records.
func (p *Propagation) Applied(key registry.ServiceKey, records []registry.Endpoints) {
	if p == nil {
		return
	}
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range records {
		if e.Updated.IsZero() || !e.Updated.After(p.last[key][e.Cluster]) {
			continue
		}
		if p.last[key] == nil {
			p.last[key] = map[string]time.Time{}
		}
		p.last[key][e.Cluster] = e.Updated
		if e.Updated.Before(p.start) {
			continue
		}
		p.m.propagation.WithLabelValues(p.cluster, e.Cluster).Observe(max(now.Sub(e.Updated), 0).Seconds())
	}
}

// Forget drops the stamps remembered for the Service key, whose import is
// gone. A record that came back unchanged afterwards would be observed
// again; but an import is deleted only when no cluster exports its Service,
// and an export published again carries a new stamp.
func (p *Propagation) Forget(key registry.ServiceKey) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.last, key)
}
