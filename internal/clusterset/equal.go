package clusterset

import (
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

func exportEqual(a, b registry.Export) bool {
	return a.Order == b.Order && equality.Semantic.DeepEqual(a, b)
}

func exportsEqual(a, b map[string]registry.Export) bool {
	if len(a) != len(b) {
		return false
	}
	for c, e := range a {
		o, ok := b[c]
		if !ok || !exportEqual(e, o) {
			return false
		}
	}
	return true
}

// endpointsOneEqual compares the groups semantically and the Updated stamps
// as instants: a record that only got a new stamp is a change, so that the
// View holds the stamp its content was published with.
func endpointsOneEqual(a, b registry.Endpoints) bool {
	return a.Cluster == b.Cluster && a.Service == b.Service && a.Updated.Equal(b.Updated) &&
		equality.Semantic.DeepEqual(a.Groups, b.Groups)
}

func endpointsEqual(a, b map[string]registry.Endpoints) bool {
	if len(a) != len(b) {
		return false
	}
	for c, e := range a {
		o, ok := b[c]
		if !ok || !endpointsOneEqual(e, o) {
			return false
		}
	}
	return true
}
