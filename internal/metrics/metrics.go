package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Label names.
const (
	labelCluster       = "cluster"
	labelCondition     = "condition"
	labelState         = "state"
	labelReason        = "reason"
	labelBackend       = "backend"
	labelOperation     = "operation"
	labelSourceCluster = "source_cluster"
)

// collectors are mcsd's metrics. The process has one set, std; tests make
// their own.
type collectors struct {
	exports           *prometheus.GaugeVec
	exportConflicts   *prometheus.GaugeVec
	imports           *prometheus.GaugeVec
	registryOps       *prometheus.CounterVec
	registryErrors    *prometheus.CounterVec
	registryDuration  *prometheus.HistogramVec
	registryConnected *prometheus.GaugeVec
	recordsRejected   *prometheus.CounterVec
	propagation       *prometheus.HistogramVec
}

func newCollectors() *collectors {
	return &collectors{
		exports: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mcsd_service_exports",
			Help: "ServiceExports of the cluster by the state of each condition: " +
				"condition Valid (state valid, invalid), Ready (exported, pending, failed, unknown), Conflict (conflict, none). " +
				"Every ServiceExport counts once per condition.",
		}, []string{labelCluster, labelCondition, labelState}),
		exportConflicts: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mcsd_service_export_conflicts",
			Help: "ServiceExports of the cluster whose Conflict condition holds the reason (one ServiceExport may hold several).",
		}, []string{labelCluster, labelReason}),
		imports: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mcsd_service_imports",
			Help: "ServiceImports mcsd manages in the cluster by state: ready, pending, ipfamily-not-supported, " +
				"derived-service-conflict, or registry-unreachable (kept as last seen while the registry cannot be read).",
		}, []string{labelCluster, labelState}),
		registryOps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcsd_registry_operations_total",
			Help: "Registry operations: PutExport, PutEndpoints, Publish, DeleteExport, Exported, " +
				"and the updates the watch delivered (WatchUpdate; WatchResync for a full state).",
		}, []string{labelCluster, labelBackend, labelOperation}),
		registryErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcsd_registry_operation_errors_total",
			Help: "Registry operations that failed; for operation Watch, the times the watch lost the registry or stopped with an error.",
		}, []string{labelCluster, labelBackend, labelOperation}),
		registryDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "mcsd_registry_operation_duration_seconds",
			Help: "Time registry operations took; for watch updates, the time mcsd took to take the update in.",
			// 1ms to about 16s.
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
		}, []string{labelCluster, labelBackend, labelOperation}),
		registryConnected: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mcsd_registry_connected",
			Help: "1 while the registry watch can read the registry, 0 otherwise.",
		}, []string{labelCluster, labelBackend}),
		recordsRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcsd_registry_records_rejected_total",
			Help: "Registry records of other clusters (or this one) that this cluster refused, each version once, by reason: " +
				"unreadable, invalid, invalidAddress, tooLarge, tooManyEndpoints, notMember. " +
				"While a cluster has a refused record of a Service, none of its records of that Service are imported.",
		}, []string{labelCluster, labelReason}),
		propagation: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "mcsd_propagation_seconds",
			Help: "Time from a change of the source cluster's endpoints (when it published them, by its clock) " +
				"to this cluster's EndpointSlices reflecting it.",
			// 10ms to about 5.5min.
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 16),
		}, []string{labelCluster, labelSourceCluster}),
	}
}

func (c *collectors) all() []prometheus.Collector {
	return []prometheus.Collector{
		c.exports, c.exportConflicts, c.imports,
		c.registryOps, c.registryErrors, c.registryDuration, c.registryConnected,
		c.recordsRejected, c.propagation,
	}
}

// std are the collectors the process registers.
var std = newCollectors()

var registerOnce sync.Once

// Register registers mcsd's metrics with controller-runtime's registry, which
// the manager's metrics endpoint serves. Only the first call registers; the
// constructors of this package call it, so that every metric in use is
// served.
func Register() {
	registerOnce.Do(func() {
		ctrlmetrics.Registry.MustRegister(std.all()...)
	})
}
