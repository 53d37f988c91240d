package metrics

import (
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/conditions"
)

// ExportReady is the state of a ServiceExport's Ready condition.
type ExportReady string

// ExportReady values.
const (
	ExportReadyExported ExportReady = "exported" // Ready=True
	ExportReadyPending  ExportReady = "pending"  // Ready=False Pending, or no Ready condition
	ExportReadyFailed   ExportReady = "failed"   // Ready=False Failed: the registry write failed
	ExportReadyUnknown  ExportReady = "unknown"  // Ready=Unknown: the cluster's records may have lapsed in the registry
)

// ExportState is what the export metrics count of one ServiceExport.
type ExportState struct {
	// Valid is whether the Valid condition is True.
	Valid bool
	Ready ExportReady
	// Conflicts holds the reasons of a True Conflict condition; it is empty
	// when there is no conflict.
	Conflicts []string
}

// Export condition states that are not ExportReady values.
const (
	exportValid      = "valid"
	exportInvalid    = "invalid"
	exportConflict   = "conflict"
	exportNoConflict = "none"
)

// Exports keeps mcsd_service_exports and mcsd_service_export_conflicts for
// one cluster. The export controller reports every ServiceExport it
// reconciles with Set and every one that is gone with Forget. A nil *Exports
// counts nothing.
type Exports struct {
	states    *objectStates
	conflicts *objectStates
}

// NewExports returns the export metrics of cluster, registered (Register).
func NewExports(cluster string) *Exports {
	Register()
	return newExports(std, cluster)
}

func newExports(c *collectors, cluster string) *Exports {
	e := &Exports{
		states:    newObjectStates(c.exports, cluster),
		conflicts: newObjectStates(c.exportConflicts, cluster),
	}
	for _, s := range [][]string{
		{string(mcsv1beta1.ServiceExportConditionValid), exportValid},
		{string(mcsv1beta1.ServiceExportConditionValid), exportInvalid},
		{string(mcsv1beta1.ServiceExportConditionReady), string(ExportReadyExported)},
		{string(mcsv1beta1.ServiceExportConditionReady), string(ExportReadyPending)},
		{string(mcsv1beta1.ServiceExportConditionReady), string(ExportReadyFailed)},
		{string(mcsv1beta1.ServiceExportConditionReady), string(ExportReadyUnknown)},
		{string(mcsv1beta1.ServiceExportConditionConflict), exportConflict},
		{string(mcsv1beta1.ServiceExportConditionConflict), exportNoConflict},
	} {
		e.states.declare(s...)
	}
	for _, r := range conditions.ConflictReasons {
		e.conflicts.declare(string(r))
	}
	return e
}

// Set records the state of the ServiceExport key.
func (e *Exports) Set(key types.NamespacedName, st ExportState) {
	if e == nil {
		return
	}
	valid := exportInvalid
	if st.Valid {
		valid = exportValid
	}
	ready := st.Ready
	if ready == "" {
		ready = ExportReadyPending
	}
	conflict := exportNoConflict
	if len(st.Conflicts) > 0 {
		conflict = exportConflict
	}
	e.states.set(key,
		[]string{string(mcsv1beta1.ServiceExportConditionValid), valid},
		[]string{string(mcsv1beta1.ServiceExportConditionReady), string(ready)},
		[]string{string(mcsv1beta1.ServiceExportConditionConflict), conflict},
	)
	reasons := make([][]string, 0, len(st.Conflicts))
	for _, r := range st.Conflicts {
		reasons = append(reasons, []string{r})
	}
	e.conflicts.set(key, reasons...)
}

// Forget stops counting the ServiceExport key.
func (e *Exports) Forget(key types.NamespacedName) {
	if e == nil {
		return
	}
	e.states.forget(key)
	e.conflicts.forget(key)
}

// Close takes every ServiceExport out of the counts and ignores later calls:
// the controller has stopped, and another may count the cluster's exports.
func (e *Exports) Close() {
	if e == nil {
		return
	}
	e.states.close()
	e.conflicts.close()
}

// ImportState is the state a ServiceImport is counted in.
type ImportState string

// ImportState values.
const (
	ImportReady                  ImportState = "ready"
	ImportPending                ImportState = "pending"
	ImportIPFamilyNotSupported   ImportState = "ipfamily-not-supported"
	ImportDerivedServiceConflict ImportState = "derived-service-conflict"
	// ImportRegistryUnreachable: the registry cannot be read, and the
	// import is kept as last seen (whatever its Ready condition says).
	ImportRegistryUnreachable ImportState = "registry-unreachable"
)

// Imports keeps mcsd_service_imports for one cluster. The import controller
// reports every ServiceImport it manages with Set and every one that is
// gone with Forget. A nil *Imports counts nothing.
type Imports struct {
	states *objectStates
}

// NewImports returns the import metrics of cluster, registered (Register).
func NewImports(cluster string) *Imports {
	Register()
	return newImports(std, cluster)
}

func newImports(c *collectors, cluster string) *Imports {
	i := &Imports{states: newObjectStates(c.imports, cluster)}
	for _, s := range []ImportState{ImportReady, ImportPending, ImportIPFamilyNotSupported, ImportDerivedServiceConflict, ImportRegistryUnreachable} {
		i.states.declare(string(s))
	}
	return i
}

// Set records the state of the ServiceImport key.
func (i *Imports) Set(key types.NamespacedName, st ImportState) {
	if i == nil {
		return
	}
	i.states.set(key, []string{string(st)})
}

// Forget stops counting the ServiceImport key.
func (i *Imports) Forget(key types.NamespacedName) {
	if i == nil {
		return
	}
	i.states.forget(key)
}

// Close takes every ServiceImport out of the count and ignores later calls.
func (i *Imports) Close() {
	if i == nil {
		return
	}
	i.states.close()
}

// CloseOnStop has mgr close counts (an *Exports or *Imports) when it stops:
// the counts are the run's, and go with it.
func CloseOnStop(mgr manager.Manager, counts interface{ Close() }) error {
	return mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		<-ctx.Done()
		counts.Close()
		return nil
	}))
}

// objectStates counts one cluster's objects in the series of a gauge. An
// object is in any number of series, each named by its label values after
// the cluster. set moves an object (decrementing the series it leaves,
// incrementing those it enters) and forget takes it out: the counts follow
// the reconciles, and nothing lists the objects again. Counting is additive,
// so that two instances for one cluster (a controller stopping while its
// successor starts) never undo each other's counts.
type objectStates struct {
	gauge   *prometheus.GaugeVec
	cluster string

	mu      sync.Mutex
	closed  bool
	objects map[types.NamespacedName][]string // series keys, sorted
}

// seriesSep joins label values into a series key; it appears in no label
// value mcsd writes.
const seriesSep = "\x00"

func newObjectStates(g *prometheus.GaugeVec, cluster string) *objectStates {
	return &objectStates{gauge: g, cluster: cluster, objects: map[types.NamespacedName][]string{}}
}

// declare makes a series exist at its current value (zero when new), so that
// a state no object is in reads 0 rather than nothing.
func (s *objectStates) declare(values ...string) {
	s.gauge.WithLabelValues(append([]string{s.cluster}, values...)...).Add(0)
}

func (s *objectStates) set(key types.NamespacedName, series ...[]string) {
	keys := make([]string, 0, len(series))
	for _, v := range series {
		keys = append(keys, strings.Join(v, seriesSep))
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	old := s.objects[key]
	for _, k := range old {
		if !slices.Contains(keys, k) {
			s.add(k, -1)
		}
	}
	for _, k := range keys {
		if !slices.Contains(old, k) {
			s.add(k, 1)
		}
	}
	s.objects[key] = keys
}

func (s *objectStates) forget(key types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	for _, k := range s.objects[key] {
		s.add(k, -1)
	}
	delete(s.objects, key)
}

func (s *objectStates) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	for _, keys := range s.objects {
		for _, k := range keys {
			s.add(k, -1)
		}
	}
	s.objects = nil
	s.closed = true
}

// add changes the series k by d; s.mu is held.
func (s *objectStates) add(k string, d float64) {
	s.gauge.WithLabelValues(append([]string{s.cluster}, strings.Split(k, seriesSep)...)...).Add(d)
}
