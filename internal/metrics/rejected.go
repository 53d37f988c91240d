package metrics

import "github.com/mcsd-io/mcsd/pkg/registry"

// RecordsRejected returns the function that counts, in
// mcsd_registry_records_rejected_total of cluster, each record the cluster
// refused (for clusterset.View.OnReject). Every reason's series exists from
// the start, at zero.
func RecordsRejected(cluster string) func(registry.Rejection) {
	Register()
	return recordsRejected(std, cluster)
}

func recordsRejected(c *collectors, cluster string) func(registry.Rejection) {
	for _, r := range registry.RejectReasons {
		c.recordsRejected.WithLabelValues(cluster, string(r)).Add(0)
	}
	return func(r registry.Rejection) {
		c.recordsRejected.WithLabelValues(cluster, string(r.Reason)).Inc()
	}
}
