package clusterset

import (
	"fmt"
	"testing"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

// BenchmarkKeysNamespace: one namespace's Services, out of 5,000 Services
// in 1,000 namespaces exported by 3 clusters each (what a Namespace event
// costs the import controller).
func BenchmarkKeysNamespace(b *testing.B) {
	u := registry.Update{Full: true}
	for i := range 5000 {
		k := registry.ServiceKey{Namespace: fmt.Sprint("ns", i%1000), Name: fmt.Sprint("s", i)}
		for _, c := range []string{"east", "west", "north"} {
			u.Exports = append(u.Exports, registry.Export{Cluster: c, Service: k, Spec: registry.ServiceSpec{Type: registry.ClusterSetIP}})
		}
	}
	v := NewView()
	v.OnUpdate(u)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if got := v.Keys(fmt.Sprint("ns", i%1000)); len(got) != 5 {
			b.Fatalf("%d keys, want 5", len(got))
		}
	}
}
