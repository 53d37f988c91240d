package framework

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/wellknown"
)

// PodIPs returns the sorted primary IPs of an app's running pods (label
// app=app) that are not being deleted.
func PodIPs(t testing.TB, cl client.Client, ns, app string) []string {
	t.Helper()
	var pods corev1.PodList
	if err := cl.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{"app": app}); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range pods.Items {
		if p.Status.PodIP != "" && p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			out = append(out, p.Status.PodIP)
		}
	}
	slices.Sort(out)
	return out
}

// ImportedSlices returns the EndpointSlices mcsd made in a cluster for the
// import ns/name, by source cluster.
func ImportedSlices(cl client.Client, ns, name string) (map[string][]discoveryv1.EndpointSlice, error) {
	var list discoveryv1.EndpointSliceList
	if err := cl.List(context.Background(), &list, client.InNamespace(ns),
		client.MatchingLabels{mcsv1beta1.LabelServiceName: name, discoveryv1.LabelManagedBy: wellknown.ManagedBy}); err != nil {
		return nil, err
	}
	out := map[string][]discoveryv1.EndpointSlice{}
	for _, s := range list.Items {
		src := s.Labels[mcsv1beta1.LabelSourceCluster]
		out[src] = append(out[src], s)
	}
	return out, nil
}

// ReadyAddresses returns the sorted addresses of the ready endpoints of
// slices (an endpoint without a ready condition counts as ready, as
// Kubernetes reads it).
func ReadyAddresses(eps []discoveryv1.EndpointSlice) []string {
	var out []string
	for _, s := range eps {
		for _, ep := range s.Endpoints {
			if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
				out = append(out, ep.Addresses...)
			}
		}
	}
	slices.Sort(out)
	return out
}
