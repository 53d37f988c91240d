package registry

import (
	"context"
	"errors"
	"maps"
	"sync"
	"time"
)

// Registry is a backend opened for one cluster of one clusterset.
type Registry interface {
	Publisher
	Watcher
	// Backend names the backend ("etcd", "cloudmap", "memory") in metrics
	// and logs.
	Backend() string
	// Close releases the backend. It does not withdraw the cluster's
	// records: they stay until they expire or the cluster deletes them.
	Close() error
}

// ReadOnlyWatcher is a Watcher of a clusterset that is no member of it: it
// writes nothing, and no watcher of the clusterset sees it (each backend's
// NewWatcher opens one, for status reports and tools). Close releases it.
type ReadOnlyWatcher interface {
	Watcher
	Close() error
}

// Publisher is the export side: it writes this cluster's records only.
// Every method writes only when the stored record differs from the new one.
type Publisher interface {
	// PutExport stores this cluster's export of a Service.
	PutExport(ctx context.Context, key ServiceKey, spec ServiceSpec) error
	// PutEndpoints stores this cluster's endpoints of an exported Service.
	PutEndpoints(ctx context.Context, key ServiceKey, groups []EndpointGroup) error
	// Publish stores this cluster's export of a Service and its endpoints
	// together. Where the backend can (etcd, memory) it is one write: a
	// watcher sees the export with its endpoints, never the export alone,
	// and the writer saves a round trip. Cloud Map has no transactions: it
	// registers both in one pass, and a watcher may see one first.
	Publish(ctx context.Context, key ServiceKey, spec ServiceSpec, groups []EndpointGroup) error
	// DeleteExport withdraws this cluster's export and endpoints of a Service.
	// Withdrawing what is not there is not an error.
	DeleteExport(ctx context.Context, key ServiceKey) error
	// Exported lists the Services this cluster has exports of in the registry.
	Exported(ctx context.Context) ([]ServiceKey, error)
}

// Watcher is the import side: it reads every live cluster's records.
type Watcher interface {
	// Watch delivers the clusterset's state to h until ctx is done: first a
	// full Update, then changes. A backend that loses its place sends a new
	// full Update when it recovers. Records of clusters that are no longer
	// alive are delivered as deleted. Watch returns ctx.Err() or an error that
	// retrying cannot fix.
	Watch(ctx context.Context, h Handler) error
}

// LeaseInspector is implemented by read-only watchers of backends whose
// watch cannot say when a cluster was last seen alive (etcd: a lease renewal
// is no write). Leases looks up, on demand, the lease of every live cluster;
// it is meant for status reports, not for controllers (it costs a request
// per cluster).
type LeaseInspector interface {
	Leases(ctx context.Context) ([]Lease, error)
}

// ClusterSetLister is implemented by read-only watchers of backends that can
// list the clustersets a registry holds (etcd: its key prefixes), so that a
// report on a clusterset without clusters can name those that exist.
type ClusterSetLister interface {
	ClusterSets(ctx context.Context) ([]string, error)
}

// LeaseAuditor is implemented by read-only watchers of backends whose
// records live on leases that any client of the registry may grant (etcd:
// leases are outside its RBAC). AuditLeases counts the registry's leases
// and names those holding nothing at all; like Leases it is meant for
// status reports (a request per lease).
type LeaseAuditor interface {
	AuditLeases(ctx context.Context) (LeaseAudit, error)
}

// LeaseAudit is what a LeaseAuditor found.
type LeaseAudit struct {
	// Total is how many leases the registry holds.
	Total int `json:"total"`
	// Idle are the ids of the leases that hold no key at all.
	Idle []string `json:"idle"`
	// Foreign counts the leases that hold keys, none of them mcsd's (other
	// applications of a shared etcd, or mcsd under another prefix).
	Foreign int `json:"foreign"`
	// Unreadable counts the leases holding records the caller may not read
	// (another clusterset's, seen with a reader's identity): not idle, but
	// not known to be mcsd's either.
	Unreadable int `json:"unreadable"`
}

// IdleTracker counts the leases that have been idle (held no record of
// mcsd's) for at least Grace, from successive audits. It is not safe for
// concurrent use.
type IdleTracker struct {
	// Grace is how long a lease may hold no record before it counts: a
	// client that grants a lease and writes on it a moment later is never
	// counted.
	Grace time.Duration
	since map[string]time.Time
}

// Observe records the idle leases of an audit made at now and returns the
// ids of those idle since at least Grace before now. Leases no longer idle,
// or gone, are forgotten.
func (t *IdleTracker) Observe(now time.Time, idle []string) []string {
	next := make(map[string]time.Time, len(idle))
	var out []string
	for _, id := range idle {
		since, ok := t.since[id]
		if !ok {
			since = now
		}
		next[id] = since
		if now.Sub(since) >= t.Grace {
			out = append(out, id)
		}
	}
	t.since = next
	return out
}

// Lease is what a backend's lease says about one live cluster.
type Lease struct {
	Cluster string `json:"cluster"`
	// ID is the backend's id of the lease.
	ID string `json:"id"`
	// Granted is the TTL the lease was granted with; every renewal resets
	// the lease to it.
	Granted time.Duration `json:"granted"`
	// Remaining is how long the lease lives without another renewal.
	Remaining time.Duration `json:"remaining"`
	// Renewed is about when the lease was last renewed (Granted less
	// Remaining before the look-up, to the backend's precision).
	Renewed time.Time `json:"renewed"`
}

// Handler receives what a Watch delivers. Calls are never concurrent.
type Handler interface {
	// OnUpdate receives records. With Full set, the update holds the whole
	// state and replaces everything delivered before.
	OnUpdate(u Update)
	// OnConnection reports whether the backend can currently read the
	// registry; err says why not. While disconnected, nothing was deleted.
	OnConnection(connected bool, err error)
}

// Scoped is a Handler that needs the records of some namespaces only, as
// a cluster's controller does: the Services it imports and exports are all
// in namespaces the cluster has. A backend may then decode and deliver the
// records of those namespaces alone, with the backend's own cluster's
// records of any namespace (the export side withdraws them), and tell in
// Update.Namespaces when it has delivered all of a namespace's; one that
// does not delivers everything, as to any Handler.
type Scoped interface {
	Handler
	// Namespaces returns the namespaces whose records the handler needs,
	// as a set of its own. The set only grows.
	Namespaces() map[string]bool
	// NamespacesGrew receives a value, sent without blocking, after the set
	// grew.
	NamespacesGrew() <-chan struct{}
}

// Needed is a set of namespaces that only grows, with the signal of its
// growth: what a Scoped handler embeds. The zero value is an empty set.
type Needed struct {
	mu     sync.Mutex
	needed map[string]bool
	grew   chan struct{}
}

// Need adds namespaces to the set ("" is none).
func (n *Needed) Need(namespaces ...string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.init()
	grew := false
	for _, ns := range namespaces {
		if ns != "" && !n.needed[ns] {
			n.needed[ns], grew = true, true
		}
	}
	if grew {
		select {
		case n.grew <- struct{}{}:
		default: // a growth not yet taken in is pending already
		}
	}
}

// Namespaces implements Scoped: a copy of the set.
func (n *Needed) Namespaces() map[string]bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.init()
	return maps.Clone(n.needed)
}

// NamespacesGrew implements Scoped.
func (n *Needed) NamespacesGrew() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.init()
	return n.grew
}

func (n *Needed) init() {
	if n.grew == nil {
		n.needed, n.grew = map[string]bool{}, make(chan struct{}, 1)
	}
}

// Update is a batch of changes, or with Full, the whole state.
type Update struct {
	Full bool
	// Scoped says the update comes from a backend that delivers a Scoped
	// handler's namespaces only (and its own cluster's records of any).
	// Namespaces are then those whose records the update completes: with
	// Full, the state holds every record of exactly these namespaces,
	// beside the own cluster's; without, these are held from now on too.
	Scoped           bool
	Namespaces       []string
	Exports          []Export
	DeletedExports   []RecordID
	Endpoints        []Endpoints
	DeletedEndpoints []RecordID
	Clusters         []Cluster
	DeletedClusters  []string
	// Rejected lists records the backend read and refused (unreadable, too
	// large, not a live member's): each replaces what was delivered before
	// for its record, as if that were deleted, and the reader counts none
	// of its cluster's records of that Service while it stands. A later
	// put or delete of the record ends it.
	Rejected []Rejection
}

// Empty reports whether the update carries nothing.
func (u Update) Empty() bool {
	return !u.Full && len(u.Namespaces) == 0 && len(u.Exports) == 0 && len(u.DeletedExports) == 0 &&
		len(u.Endpoints) == 0 && len(u.DeletedEndpoints) == 0 &&
		len(u.Clusters) == 0 && len(u.DeletedClusters) == 0 && len(u.Rejected) == 0
}

// ErrMisconfigured wraps the errors of a backend that cannot reach the
// registry for a reason retrying cannot fix (a wrong address, TLS on one
// side only, an untrusted or missing certificate); their messages say what
// to change.
var ErrMisconfigured = errors.New("registry misconfigured")

// ErrForbidden wraps the errors of a backend whose identity may not read or
// write what it needs; their messages say which grant is missing.
var ErrForbidden = errors.New("registry access denied")

// ErrClusterIDInUse is returned by a backend's open when the cluster id is
// live in the registry under another Identity.Instance: another Kubernetes
// cluster was given the same id. Nothing was written; opening again once
// the other cluster's records have expired (it stopped, or was given its
// own id) succeeds.
var ErrClusterIDInUse = errors.New("cluster id in use by another cluster")

// Fencer is implemented by a backend that can find, while it runs, that
// another cluster has taken its cluster id (after a partition longer than
// its TTL, say): Fenced returns ErrClusterIDInUse while that holds, and
// the backend writes nothing meanwhile; nil otherwise.
type Fencer interface {
	Fenced() error
}

// Lapser is implemented by a backend that can tell, while it runs, that
// this cluster's records may not be live in the registry: its lease could
// not be renewed for a whole TTL (etcd: the records expire with it, or the
// registry itself is down), its heartbeat was not written for a TTL (Cloud
// Map: every watcher ignores the cluster), or another cluster took its id
// (Fencer). Lapsed returns why while that holds (wrapping ErrRecordsLapsed,
// or ErrClusterIDInUse for the last), nil once the records are known live
// or written again. Lapses receives after changes of what Lapsed returns
// (changes missed meanwhile are one signal); it is one channel, for one
// receiver, and the backend never waits for it to be received.
type Lapser interface {
	Lapsed() error
	Lapses() <-chan struct{}
}

// ErrRecordsLapsed wraps what a Lapser's Lapsed returns while this
// cluster's records may have expired in the registry.
var ErrRecordsLapsed = errors.New("this cluster's records may have expired in the registry")

// ErrClosed is returned by a backend that has been closed.
var ErrClosed = errors.New("registry: closed")

// ErrInvalid is returned for a record that the backend refuses to store.
var ErrInvalid = errors.New("registry: invalid record")
