package clusterset

import (
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

func exportEqual(a, b registry.Export) bool {
	return a.Order == b.Order && equality.Semantic.DeepEqual(a, b)
}

// endpointsOneEqual compares the groups semantically and the Updated stamps
// as instants: a record that only got a new stamp is a change, so that the
// View holds the stamp its content was published with.
func endpointsOneEqual(a, b registry.Endpoints) bool {
	return a.Cluster == b.Cluster && a.Service == b.Service && a.Updated.Equal(b.Updated) &&
		equality.Semantic.DeepEqual(a.Groups, b.Groups)
}
