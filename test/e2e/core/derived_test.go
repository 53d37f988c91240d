package core

import (
	"context"
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcsd-io/mcsd/internal/wellknown"
	fw "github.com/mcsd-io/mcsd/test/e2e/framework"
)

// TestGatewayResolvesServiceImport follows a ServiceImport to its endpoints
// the way a Gateway API implementation resolves an HTTPRoute backendRef of
// kind ServiceImport: the annotation multicluster.kubernetes.io/derived-service
// names a Service, whose cluster IPs are the import's, and whose
// EndpointSlices (label kubernetes.io/service-name) hold every exporting
// cluster's endpoints.
func TestGatewayResolvesServiceImport(t *testing.T) {
	t.Parallel()
	ns := "gateway"
	namespaceEverywhere(t, ns)
	c1, c2 := env.Client(t, "c1"), env.Client(t, "c2")
	fw.Deploy(t, c1, fw.App{Namespace: ns, Name: "web", Replicas: 2})
	fw.Deploy(t, c2, fw.App{Namespace: ns, Name: "web", Replicas: 1})
	want := append(waitPods(t, c1, ns, "web", 2), waitPods(t, c2, ns, "web", 1)...)
	slices.Sort(want)
	fw.Export(t, c1, ns, "web")
	fw.Export(t, c2, ns, "web")

	inEveryCluster(t, "ServiceImport resolved through its derived Service", func(id string, cl client.Client) (bool, string) {
		ctx := context.Background()
		si := fw.GetImport(t, cl, ns, "web")
		if si == nil {
			return false, "no ServiceImport"
		}
		if _, ok := si.Annotations[wellknown.AnnotationLegacyDerivedService]; ok {
			return false, fmt.Sprintf("legacy annotation written: %v", si.Annotations)
		}
		name := si.Annotations["multicluster.kubernetes.io/derived-service"]
		if name == "" {
			return false, fmt.Sprintf("no derived-service annotation: %v", si.Annotations)
		}
		svc := &corev1.Service{}
		if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, svc); err != nil {
			return false, fmt.Sprintf("derived Service %s: %v", name, err)
		}
		if len(si.Spec.IPs) == 0 || !slices.Equal(svc.Spec.ClusterIPs, si.Spec.IPs) {
			return false, fmt.Sprintf("Service %s cluster IPs %v, import IPs %v", name, svc.Spec.ClusterIPs, si.Spec.IPs)
		}
		var list discoveryv1.EndpointSliceList
		if err := cl.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: name}); err != nil {
			return false, err.Error()
		}
		if got := readyAddresses(list.Items); !slices.Equal(got, want) {
			return false, fmt.Sprintf("endpoints of %s: %v, want %v", name, got, want)
		}
		return true, ""
	})
}
