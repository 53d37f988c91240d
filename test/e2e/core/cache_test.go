package core

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcsd-io/mcsd/internal/manager"
	"github.com/mcsd-io/mcsd/internal/testutil/poll"
)

// TestCacheKeepsSlicesManagedFieldsAlone: the controller's cache, on a
// real API server (which records managedFields at every write), holds no
// managedFields but on EndpointSlices, whose field managers the import
// controller reads.
func TestCacheKeepsSlicesManagedFieldsAlone(t *testing.T) {
	ns, c1 := setUpTest(t, "cache-fields")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opts := manager.CacheOptions(nil)
	opts.Scheme = manager.Scheme
	c, err := cache.New(env.TB.Cluster("c1").Config, opts)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.Start(ctx) }()

	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fields"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
	slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fields-1"},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.1.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}}}
	for _, o := range []client.Object{svc, slice} {
		if err := c1.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		if len(o.GetManagedFields()) == 0 {
			t.Fatalf("the API server recorded no managedFields for %T", o)
		}
	}
	poll.Until(t, timeout, "the Service, the EndpointSlice and a Node's metadata in the cache", func() (bool, string) {
		var gotSvc corev1.Service
		var gotSlice discoveryv1.EndpointSlice
		nodes := &metav1.PartialObjectMetadataList{}
		nodes.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NodeList"))
		if err := c.Get(ctx, client.ObjectKeyFromObject(svc), &gotSvc); err != nil {
			return false, err.Error()
		}
		if err := c.Get(ctx, client.ObjectKeyFromObject(slice), &gotSlice); err != nil {
			return false, err.Error()
		}
		if err := c.List(ctx, nodes); err != nil || len(nodes.Items) == 0 {
			return false, fmt.Sprintf("nodes: %v, %d", err, len(nodes.Items))
		}
		if len(gotSvc.ManagedFields) != 0 || len(nodes.Items[0].ManagedFields) != 0 {
			t.Fatalf("managedFields kept: Service %v, Node %v", gotSvc.ManagedFields, nodes.Items[0].ManagedFields)
		}
		if len(gotSlice.ManagedFields) == 0 {
			t.Fatal("the EndpointSlice's managedFields dropped: the import controller reads them")
		}
		return true, ""
	})
}
