package imports

import (
	"strings"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/merge"
	"github.com/mcsd-io/mcsd/pkg/registry"
)

func TestEndpointsCondition(t *testing.T) {
	notReady := registry.Endpoint{Addresses: []string{"10.0.0.9"}}
	eps := func(cluster string, e ...registry.Endpoint) registry.Endpoints {
		return endpoints(cluster, group(discoveryv1.AddressTypeIPv4, nil, e...))
	}
	tests := []struct {
		name     string
		clusters []string
		eps      []registry.Endpoints
		status   metav1.ConditionStatus
		msg      string
	}{
		{"every cluster ready", []string{"c1", "c2"}, []registry.Endpoints{eps("c1", ready("10.1.0.1")), eps("c2", notReady, ready("10.2.0.1"))},
			metav1.ConditionTrue, "Every exporting cluster"},
		{"one scaled to zero", []string{"c1", "c2"}, []registry.Endpoints{eps("c1", ready("10.1.0.1")), eps("c2")},
			metav1.ConditionFalse, "exporting cluster c2 has no ready endpoint"},
		{"one without a record, one not ready", []string{"c1", "c2", "c3"}, []registry.Endpoints{eps("c1", ready("10.1.0.1")), eps("c3", notReady)},
			metav1.ConditionFalse, "exporting clusters c2, c3 have no ready endpoint"},
		{"none ready", []string{"c1"}, []registry.Endpoints{eps("c1", notReady)}, metav1.ConditionFalse, "requests to it fail"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := map[string]registry.Endpoints{}
			for _, e := range tc.eps {
				m[e.Cluster] = e
			}
			res := merge.Result{Clusters: tc.clusters, Served: map[string][]string{}}
			for _, c := range tc.clusters {
				res.Served[c] = []string{"http"}
			}
			res.Spec.Ports = []mcsv1beta1.ServicePort{{Name: "http", Port: 80}}
			c := endpointsCondition(res, m)
			if c.Status != tc.status || !strings.Contains(c.Message, tc.msg) {
				t.Errorf("%s %s %q, want %s with %q", c.Status, c.Reason, c.Message, tc.status, tc.msg)
			}
		})
	}
}

func TestEndpointsConditionPortless(t *testing.T) {
	res := merge.Result{Clusters: []string{"c1", "c2"}, Served: map[string][]string{"c1": {"http"}, "c2": nil}}
	res.Spec.Ports = []mcsv1beta1.ServicePort{{Name: "http", Port: 80}}
	m := map[string]registry.Endpoints{
		"c1": endpoints("c1", group(discoveryv1.AddressTypeIPv4, nil, ready("10.1.0.1"))),
		"c2": endpoints("c2", group(discoveryv1.AddressTypeIPv4, nil, ready("10.2.0.1"))),
	}
	c := endpointsCondition(res, m)
	if c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "cluster c2 serves none of the import's ports") {
		t.Errorf("%s %q, want c2 named as serving no port", c.Status, c.Message)
	}
}
