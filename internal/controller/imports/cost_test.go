package imports

import (
	"fmt"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/merge"
	"github.com/mcsd-io/mcsd/internal/wellknown"
	"github.com/mcsd-io/mcsd/pkg/registry"
)

// BenchmarkImportFromClusters is the in-memory work of one import's
// reconcile when one of its source clusters changed: the merge, the plan of
// its EndpointSlices (planSlices) and the status, for an import of n
// clusters with 10 endpoints each (the API reads and the one write are not
// in it). With digests, the slices in place are as an API server returns
// them (one field manager): only the changed cluster's are built and
// compared. Without, as slices of another writer or of an mcsd before the
// digests: every cluster's are.
func BenchmarkImportFromClusters(b *testing.B) {
	for _, digests := range []bool{true, false} {
		for _, n := range []int{3, 10, 30, 100} {
			b.Run(fmt.Sprintf("digests=%t/clusters=%d", digests, n), func(b *testing.B) {
				s, exports, flip := importFromClusters(n)
				var existing []discoveryv1.EndpointSlice
				for _, sl := range planSlices(s, nil).create {
					if digests {
						sl.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: wellknown.FieldManager, Operation: metav1.ManagedFieldsOperationUpdate}}
					}
					existing = append(existing, *sl)
				}
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					flip()
					s.res = merge.Merge(exports)
					// planSlices applies the update to existing, as the
					// write would.
					plan := planSlices(s, existing)
					if len(plan.grow)+len(plan.update) != 1 || len(plan.create)+len(plan.remove)+len(plan.replace) != 0 {
						b.Fatalf("plan %+v, want one update", plan)
					}
					if want := map[bool]int{true: 1, false: n}[digests]; len(plan.built) != want {
						b.Fatalf("built the slices of %d clusters, want %d", len(plan.built), want)
					}
					s.si.Status = mcsv1beta1.ServiceImportStatus{}
					(&Reconciler{}).setStatus(s)
				}
			})
		}
	}
}

// importFromClusters is the scope of an import of n clusters with 10
// endpoints each, its exports, and a function that changes the endpoints
// of one of its clusters (a readiness flip).
func importFromClusters(n int) (*scope, []registry.Export, func()) {
	var exports []registry.Export
	eps := map[string]registry.Endpoints{}
	for c := range n {
		id := fmt.Sprintf("c%03d", c)
		x := export(id, registry.ClusterSetIP, v4, port("http", "TCP", 80))
		x.Order = int64(c + 1)
		exports = append(exports, x)
		var list []registry.Endpoint
		for i := range 10 {
			list = append(list, ready(fmt.Sprintf("10.%d.%d.%d", c/250, c%250, i+1)))
		}
		eps[id] = endpoints(id, group(discoveryv1.AddressTypeIPv4, []registry.EndpointPort{epPort("http", 8080)}, list...))
	}
	s := &scope{localCluster: "c000", key: webKey, res: merge.Merge(exports), endpoints: eps,
		si: &mcsv1beta1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: webKey.Namespace, Name: webKey.Name, UID: "uid"}}}
	s.derivedName = derivedServiceOf(s.si, s.key)
	setSliceOwners(s, false)
	changed := fmt.Sprintf("c%03d", n-1)
	flip := func() {
		e := eps[changed]
		g := e.Groups[0]
		g.Endpoints = append([]registry.Endpoint(nil), g.Endpoints...)
		g.Endpoints[0].Ready = !g.Endpoints[0].Ready
		e.Groups = []registry.EndpointGroup{g}
		eps[changed] = e
	}
	return s, exports, flip
}
