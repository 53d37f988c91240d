package imports

import (
	"fmt"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/merge"
	"github.com/mcsd-io/mcsd/pkg/registry"
)

// BenchmarkImportFromClusters is the in-memory work of one import's
// reconcile when one of its source clusters changed: the merge, the desired
// EndpointSlices of every source cluster and their comparison with those in
// place, and the status, for an import of n clusters with 10 endpoints each
// (the API reads and the one write are not in it).
func BenchmarkImportFromClusters(b *testing.B) {
	for _, n := range []int{3, 10, 30, 100} {
		b.Run(fmt.Sprintf("clusters=%d", n), func(b *testing.B) {
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
			inPlace := map[string]*discoveryv1.EndpointSlice{}
			for _, sl := range desiredEndpointSlices(s, eps) {
				inPlace[sl.Name] = sl.DeepCopy()
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				s.res = merge.Merge(exports)
				stale := 0
				for _, want := range desiredEndpointSlices(s, s.endpoints) {
					if have := inPlace[want.Name]; have == nil || !sliceUpToDate(have, want, s.sliceOwners) {
						stale++
					}
				}
				if stale != 0 {
					b.Fatalf("%d slices stale", stale)
				}
				s.si.Status = mcsv1beta1.ServiceImportStatus{}
				(&Reconciler{}).setStatus(s)
			}
		})
	}
}
