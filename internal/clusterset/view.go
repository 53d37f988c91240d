package clusterset

import (
	"cmp"
	"maps"
	"slices"
	"sync"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

// View is the clusterset state delivered by a registry watch. It implements
// registry.Handler; readers may call its methods from any goroutine.
type View struct {
	mu      sync.RWMutex
	exports map[registry.ServiceKey]map[string]registry.Export
	// byNamespace indexes exports' Services by namespace (a Service with
	// an export record of any cluster, refused or not): Keys(namespace)
	// reads that namespace's, not every Service of the clusterset.
	byNamespace map[string]map[registry.ServiceKey]struct{}
	endpoints   map[registry.ServiceKey]map[string]registry.Endpoints
	// rejected holds the records that were refused, by Service, cluster
	// and kind: while a cluster has one for a Service, none of its records
	// of that Service count.
	rejected  map[registry.ServiceKey]map[string]rejections
	onReject  func(registry.Rejection)
	synced    bool
	connected bool
	connErr   error
	// loadedAll: the last full update held every namespace; else loaded
	// holds the namespaces whose records a scoped backend delivered in full
	// (registry.Update.Scoped).
	loadedAll bool
	loaded    map[string]bool

	subs subscribers[Change]
}

var _ registry.Handler = (*View)(nil)

// Change is what the View tells its subscribers: the records of Service
// changed, or, with Reachability set (Service is then zero), the View became
// usable (read in full and connected: the first time, or again after an
// outage) or stopped being connected: every Service, and every object made
// from one, may need another look. The first full read is announced by that
// one change alone, not Service by Service.
//
// With Namespace set (and the rest zero), the View holds every record of
// that namespace from now on: a scoped View (ScopedView) came to need it,
// after its first full read.
type Change struct {
	Service registry.ServiceKey
	// EndpointsOf, when set, are the clusters whose endpoints of Service
	// changed, when nothing else of Service did (no export, no refusal): a
	// cluster's export does not follow the others' endpoints.
	EndpointsOf  []string
	Reachability bool
	Namespace    string
}

// NewView returns an empty view that has not synced yet.
func NewView() *View {
	return &View{
		exports:     map[registry.ServiceKey]map[string]registry.Export{},
		byNamespace: map[string]map[registry.ServiceKey]struct{}{},
		endpoints:   map[registry.ServiceKey]map[string]registry.Endpoints{},
		rejected:    map[registry.ServiceKey]map[string]rejections{},
	}
}

// rejections are one cluster's refused records of one Service, by kind.
type rejections map[registry.RecordKind]registry.Rejection

// OnReject calls f with every rejection the View takes in that it did not
// hold already (a record refused again, unchanged, is not reported again),
// on the goroutine that delivers the watch; f must not block. It is meant
// for counting, and is set before the watch starts.
func (v *View) OnReject(f func(registry.Rejection)) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.onReject = f
}

// Subscribe calls f with every change from now on, until the returned
// function is called. f runs on the goroutine that delivers the registry's
// watch, after the View has applied the change, and must not block.
func (v *View) Subscribe(f func(Change)) (unsubscribe func()) {
	return v.subs.add(f)
}

// HasSynced reports whether the first full update arrived.
func (v *View) HasSynced() bool {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.synced
}

// HasSyncedFor reports whether the View holds every record of namespace:
// it has synced, and, when a scoped backend delivers only the namespaces a
// ScopedView needs, that namespace has been delivered. Until then the View
// knows nothing of the namespace's Services, and nothing is to be decided
// from it.
func (v *View) HasSyncedFor(namespace string) bool {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.synced && (v.loadedAll || v.loaded[namespace])
}

// Connected reports whether the registry is reachable, and if not, why.
func (v *View) Connected() (bool, error) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.connected, v.connErr
}

// Service is what the View holds of one Service at one moment: the three
// of Exports, Rejected and Endpoints read at once, so that they agree (a
// refusal that begins or ends between two reads would leave a cluster in
// one and not in the other).
type Service struct {
	Exports   []registry.Export
	Rejected  []registry.Rejection
	Endpoints map[string]registry.Endpoints
}

// Service returns the Service's exports, refused records and endpoints, as
// Exports, Rejected and Endpoints do, read at once.
func (v *View) Service(key registry.ServiceKey) Service {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return Service{Exports: v.exportsLocked(key), Rejected: v.rejectedLocked(key), Endpoints: v.endpointsLocked(key)}
}

// Exports returns every live cluster's export of a Service, in no order.
func (v *View) Exports(key registry.ServiceKey) []registry.Export {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.exportsLocked(key)
}

// exportsLocked is Exports; v.mu is held.
func (v *View) exportsLocked(key registry.ServiceKey) []registry.Export {
	out := make([]registry.Export, 0, len(v.exports[key]))
	for c, e := range v.exports[key] {
		if _, refused := v.rejected[key][c]; !refused {
			out = append(out, e)
		}
	}
	return out
}

// Rejected returns the refused records of a Service, by cluster, then kind.
// A cluster listed here counts in neither Exports nor Endpoints.
func (v *View) Rejected(key registry.ServiceKey) []registry.Rejection {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.rejectedLocked(key)
}

// rejectedLocked is Rejected; v.mu is held.
func (v *View) rejectedLocked(key registry.ServiceKey) []registry.Rejection {
	var out []registry.Rejection
	for _, byKind := range v.rejected[key] {
		for _, r := range byKind {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b registry.Rejection) int {
		return cmp.Or(cmp.Compare(a.Record.Cluster, b.Record.Cluster), cmp.Compare(a.Kind, b.Kind))
	})
	return out
}

// Endpoints returns every live cluster's endpoints of a Service, by cluster.
func (v *View) Endpoints(key registry.ServiceKey) map[string]registry.Endpoints {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.endpointsLocked(key)
}

// endpointsLocked is Endpoints; v.mu is held.
func (v *View) endpointsLocked(key registry.ServiceKey) map[string]registry.Endpoints {
	out := make(map[string]registry.Endpoints, len(v.endpoints[key]))
	for c, e := range v.endpoints[key] {
		if _, refused := v.rejected[key][c]; !refused {
			out[c] = e
		}
	}
	return out
}

// Keys returns every Service that some cluster exports, optionally only in
// one namespace ("" for all), sorted.
func (v *View) Keys(namespace string) []registry.ServiceKey {
	v.mu.RLock()
	defer v.mu.RUnlock()
	var out []registry.ServiceKey
	shown := func(k registry.ServiceKey) {
		for c := range v.exports[k] {
			if _, refused := v.rejected[k][c]; !refused {
				out = append(out, k)
				return
			}
		}
	}
	if namespace == "" {
		for k := range v.exports {
			shown(k)
		}
	} else {
		for k := range v.byNamespace[namespace] {
			shown(k)
		}
	}
	slices.SortFunc(out, registry.ServiceKey.Compare)
	return out
}

// index makes byNamespace list k exactly when some cluster has an export
// record of it. v.mu is held.
func (v *View) index(k registry.ServiceKey) {
	names := v.byNamespace[k.Namespace]
	if len(v.exports[k]) > 0 {
		if names == nil {
			names = map[registry.ServiceKey]struct{}{}
			v.byNamespace[k.Namespace] = names
		}
		names[k] = struct{}{}
		return
	}
	delete(names, k)
	if len(names) == 0 {
		delete(v.byNamespace, k.Namespace)
	}
}

// OnConnection implements registry.Handler. Subscribers hear when the View
// becomes usable or stops being so (usable), not of every report.
func (v *View) OnConnection(connected bool, err error) {
	v.mu.Lock()
	was := v.usable()
	v.connected, v.connErr = connected, err
	changed := v.usable() != was
	v.mu.Unlock()
	if changed {
		v.notify(Change{Reachability: true})
	}
}

// usable: read in full, and connected. Callers hold v.mu.
func (v *View) usable() bool {
	return v.synced && v.connected
}

// OnUpdate implements registry.Handler. Subscribers hear of every Service
// whose records differ from what the View held; of the first full update
// only as a Reachability change, once the registry is connected too (what
// waited for the registry to be read can go on; every Service may be new).
func (v *View) OnUpdate(u registry.Update) {
	u = screen(u)
	v.mu.Lock()
	var (
		changed  map[registry.ServiceKey]bool
		newlyRej []registry.Rejection
		// endpointsOf: of changed, the Services whose endpoints alone
		// changed, and whose.
		endpointsOf map[registry.ServiceKey][]string
	)
	first := u.Full && !v.synced
	wasUsable := v.usable()
	if u.Full {
		changed, newlyRej = v.replace(u)
		v.synced = true
	} else {
		changed, endpointsOf, newlyRej = v.apply(u)
	}
	newlyLoaded := v.load(u)
	if first {
		newlyLoaded = nil // the first full update is announced as a whole
	}
	onReject := v.onReject
	becameUsable := v.usable() && !wasUsable
	v.mu.Unlock()
	if onReject != nil {
		for _, r := range newlyRej {
			onReject(r)
		}
	}
	if first {
		// Every Service may be new: one Reachability change says so, when
		// the registry is connected (else its connection will).
		changed = nil
	}
	if len(changed) == 0 && len(newlyLoaded) == 0 && !becameUsable {
		return
	}
	subs := v.subs.list()
	for k := range changed {
		for _, f := range subs {
			f(Change{Service: k, EndpointsOf: endpointsOf[k]})
		}
	}
	for _, ns := range newlyLoaded {
		for _, f := range subs {
			f(Change{Namespace: ns})
		}
	}
	if becameUsable {
		for _, f := range subs {
			f(Change{Reachability: true})
		}
	}
}

// load records which namespaces u completes (registry.Update.Scoped) and
// returns those that are newly held. A full update from a backend that does
// not scope holds them all. v.mu is held.
func (v *View) load(u registry.Update) []string {
	wasAll, was := v.loadedAll, v.loaded
	switch {
	case u.Full && !u.Scoped:
		v.loadedAll, v.loaded = true, nil
		return nil
	case u.Full:
		v.loadedAll, v.loaded = false, map[string]bool{}
	case !u.Scoped:
		return nil
	case v.loaded == nil:
		v.loaded = map[string]bool{}
	}
	var newly []string
	for _, ns := range u.Namespaces {
		if !wasAll && !was[ns] {
			newly = append(newly, ns)
		}
		v.loaded[ns] = true
	}
	return newly
}

// screen moves the records of u that registry.ValidateExport or
// ValidateEndpoints refuse to u.Rejected. u's slices are not modified.
func screen(u registry.Update) registry.Update {
	var bad []registry.Rejection
	exports := keepValid(u.Exports, registry.KindExport, exportID, registry.ValidateExport, &bad)
	endpoints := keepValid(u.Endpoints, registry.KindEndpoints, endpointsID, registry.ValidateEndpoints, &bad)
	if len(bad) == 0 {
		return u
	}
	u.Exports, u.Endpoints = exports, endpoints
	u.Rejected = append(slices.Clip(u.Rejected), bad...)
	return u
}

// keepValid returns the records of recs that validate accepts, in a new
// slice, and appends to bad the rejection of each other one as a record of
// kind, named by id.
func keepValid[T any](recs []T, kind registry.RecordKind, id func(T) registry.RecordID, validate func(T) error, bad *[]registry.Rejection) []T {
	kept := recs[:0:0]
	for _, rec := range recs {
		if err := validate(rec); err != nil {
			*bad = append(*bad, registry.Reject(kind, id(rec), err))
			continue
		}
		kept = append(kept, rec)
	}
	return kept
}

// exportID names e as a record.
func exportID(e registry.Export) registry.RecordID {
	return registry.RecordID{Cluster: e.Cluster, Service: e.Service}
}

// endpointsID names e as a record.
func endpointsID(e registry.Endpoints) registry.RecordID {
	return registry.RecordID{Cluster: e.Cluster, Service: e.Service}
}

// replace makes u, a full update, the View's state and returns the Services
// whose records differ from before: everything not in u is gone. v.mu is
// held.
func (v *View) replace(u registry.Update) (map[registry.ServiceKey]bool, []registry.Rejection) {
	oldExports, oldEndpoints, oldRejected := v.exports, v.endpoints, v.rejected
	v.exports = map[registry.ServiceKey]map[string]registry.Export{}
	v.endpoints = map[registry.ServiceKey]map[string]registry.Endpoints{}
	v.rejected = map[registry.ServiceKey]map[string]rejections{}
	for _, e := range u.Exports {
		put(v.exports, e.Service, e.Cluster, e)
	}
	for _, e := range u.Endpoints {
		put(v.endpoints, e.Service, e.Cluster, e)
	}
	var newly []registry.Rejection
	for _, r := range u.Rejected {
		v.records(r.Kind)(r.Record)
		if old, ok := oldRejected[r.Record.Service][r.Record.Cluster][r.Kind]; !ok || old != r {
			newly = append(newly, r)
		}
		setRejection(v.rejected, r)
	}
	v.byNamespace = map[string]map[registry.ServiceKey]struct{}{}
	for k := range v.exports {
		v.index(k)
	}
	changed := map[registry.ServiceKey]bool{}
	diff(changed, oldExports, v.exports, exportEqual)
	diff(changed, oldEndpoints, v.endpoints, endpointsOneEqual)
	diff(changed, oldRejected, v.rejected, maps.Equal)
	return changed, newly
}

// records is where the View keeps accepted records of kind: v.exports or
// v.endpoints, as a remover. v.mu is held.
func (v *View) records(kind registry.RecordKind) func(registry.RecordID) bool {
	if kind == registry.KindExport {
		return func(id registry.RecordID) bool { return remove(v.exports, id) }
	}
	return func(id registry.RecordID) bool { return remove(v.endpoints, id) }
}

func setRejection(m map[registry.ServiceKey]map[string]rejections, r registry.Rejection) {
	if m[r.Record.Service] == nil {
		m[r.Record.Service] = map[string]rejections{}
	}
	if m[r.Record.Service][r.Record.Cluster] == nil {
		m[r.Record.Service][r.Record.Cluster] = rejections{}
	}
	m[r.Record.Service][r.Record.Cluster][r.Kind] = r
}

// clearRejection ends the rejection of record id of kind, and reports
// whether there was one.
func clearRejection(m map[registry.ServiceKey]map[string]rejections, kind registry.RecordKind, id registry.RecordID) bool {
	byKind := m[id.Service][id.Cluster]
	if _, ok := byKind[kind]; !ok {
		return false
	}
	delete(byKind, kind)
	if len(byKind) == 0 {
		delete(m[id.Service], id.Cluster)
		if len(m[id.Service]) == 0 {
			delete(m, id.Service)
		}
	}
	return true
}

// apply applies u, an incremental update, and returns the Services whose
// records it changed, and of those whose endpoints alone changed, the
// clusters whose. v.mu is held.
func (v *View) apply(u registry.Update) (map[registry.ServiceKey]bool, map[registry.ServiceKey][]string, []registry.Rejection) {
	changed, endpointsOf := map[registry.ServiceKey]bool{}, map[registry.ServiceKey][]string{}
	for _, id := range u.DeletedExports {
		if deleteRecord(v, v.exports, registry.KindExport, id) {
			changed[id.Service] = true
		}
	}
	// An endpoints record of a cluster with a refused record of the
	// Service ends the refusal: its export shows again, a change of more
	// than endpoints.
	endpointsChanged := func(id registry.RecordID, refused bool) {
		if refused {
			changed[id.Service] = true
		} else {
			endpointsOf[id.Service] = append(endpointsOf[id.Service], id.Cluster)
		}
	}
	for _, id := range u.DeletedEndpoints {
		refused := v.hidden(id)
		if deleteRecord(v, v.endpoints, registry.KindEndpoints, id) {
			endpointsChanged(id, refused)
		}
	}
	for _, e := range u.Exports {
		if accept(v, v.exports, registry.KindExport, exportID(e), e, exportEqual) {
			changed[e.Service] = true
		}
	}
	for _, e := range u.Endpoints {
		id := endpointsID(e)
		refused := v.hidden(id)
		if accept(v, v.endpoints, registry.KindEndpoints, id, e, endpointsOneEqual) {
			endpointsChanged(id, refused)
		}
	}
	var newly []registry.Rejection
	for _, r := range u.Rejected {
		removed := v.records(r.Kind)(r.Record)
		if old, ok := v.rejected[r.Record.Service][r.Record.Cluster][r.Kind]; ok && old == r {
			if removed {
				changed[r.Record.Service] = true
			}
			continue
		}
		setRejection(v.rejected, r)
		newly = append(newly, r)
		changed[r.Record.Service] = true
	}
	for k := range endpointsOf {
		if changed[k] {
			delete(endpointsOf, k) // more than endpoints changed
		} else {
			changed[k] = true
		}
	}
	// Every export record u added or removed, shown or hidden.
	for _, id := range u.DeletedExports {
		v.index(id.Service)
	}
	for _, e := range u.Exports {
		v.index(e.Service)
	}
	for _, r := range u.Rejected {
		if r.Kind == registry.KindExport {
			v.index(r.Record.Service)
		}
	}
	return changed, endpointsOf, newly
}

// accept takes in rec, the record id of kind, kept in m: it ends any
// rejection of the record and puts rec into m unless m holds an equal
// record. It reports whether either changed what the View shows: a record
// of a cluster whose other record of the Service is refused is kept, not
// shown (hidden), until that refusal ends. v.mu is held.
func accept[T any](v *View, m map[registry.ServiceKey]map[string]T, kind registry.RecordKind, id registry.RecordID, rec T, equal func(a, b T) bool) bool {
	cleared := clearRejection(v.rejected, kind, id)
	if old, ok := m[id.Service][id.Cluster]; !ok || !equal(old, rec) {
		put(m, id.Service, id.Cluster, rec)
		return cleared || !v.hidden(id)
	}
	return cleared
}

// deleteRecord removes the record id of kind, kept in m, and ends its
// rejection. It reports whether that changed what the View shows. v.mu is
// held.
func deleteRecord[T any](v *View, m map[registry.ServiceKey]map[string]T, kind registry.RecordKind, id registry.RecordID) bool {
	hidden := v.hidden(id)
	removed := remove(m, id)
	return clearRejection(v.rejected, kind, id) || (removed && !hidden)
}

// hidden reports whether the records of id's cluster and Service are kept
// but not shown: one of them is refused. v.mu is held.
func (v *View) hidden(id registry.RecordID) bool {
	_, refused := v.rejected[id.Service][id.Cluster]
	return refused
}

// notify tells every subscriber of c.
func (v *View) notify(c Change) {
	for _, f := range v.subs.list() {
		f(c)
	}
}

// diff marks in changed every Service whose records differ between old and
// cur, comparing one cluster's records with equal.
func diff[T any](changed map[registry.ServiceKey]bool, old, cur map[registry.ServiceKey]map[string]T, equal func(a, b T) bool) {
	for k := range old {
		if !maps.EqualFunc(old[k], cur[k], equal) {
			changed[k] = true
		}
	}
	for k := range cur {
		if !maps.EqualFunc(old[k], cur[k], equal) {
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
