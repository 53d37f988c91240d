package testbed_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	aboutv1alpha1 "github.com/mcsd-io/mcsd/api/about/v1alpha1"
	aboutv1beta1 "github.com/mcsd-io/mcsd/api/about/v1beta1"
	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	"github.com/mcsd-io/mcsd/test/testbed"
)

var tb *testbed.Testbed

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx := context.Background()
	var err error
	tb, err = testbed.Start(ctx, testbed.Options{
		Name:      fmt.Sprintf("testbed-test-%d", os.Getpid()),
		Clusters:  2,
		Ephemeral: true,
		Log:       os.Stderr,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start testbed:", err)
		return 1
	}
	defer func() {
		if err := tb.Close(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, "close testbed:", err)
		}
	}()
	return m.Run()
}

func clientFor(t *testing.T, id string) client.Client {
	t.Helper()
	c := tb.Cluster(id)
	if c == nil {
		t.Fatalf("no cluster %s", id)
	}
	cl, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// deployWeb creates a Deployment and a Service in the cluster and returns
// the pod IPs once every pod runs and the EndpointSlice lists them as ready.
func deployWeb(t *testing.T, ctx context.Context, id string, replicas int32) []string {
	t.Helper()
	cl := clientFor(t, id)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "web"}}
	if err := cl.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "web"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "web", Image: "registry.k8s.io/e2e-test-images/agnhost:2.53", Args: []string{"netexec", "--http-port=8080"},
					Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
				}}},
			},
		},
	}
	if err := cl.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "web"},
		Spec: corev1.ServiceSpec{
			Selector:       labels,
			Ports:          []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}},
			IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicyPreferDualStack),
		},
	}
	if err := cl.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}

	var podIPs []string
	poll.Until(t, 90*time.Second, "pods of "+id+" to run", func() (bool, string) {
		var pods corev1.PodList
		if err := cl.List(ctx, &pods, client.InNamespace("web")); err != nil {
			return false, err.Error()
		}
		podIPs = nil
		for _, p := range pods.Items {
			if p.Status.Phase != corev1.PodRunning || len(p.Status.PodIPs) != 2 || p.Spec.NodeName == "" {
				return false, fmt.Sprintf("pod %s: phase %s ips %v node %q", p.Name, p.Status.Phase, p.Status.PodIPs, p.Spec.NodeName)
			}
			for _, ip := range p.Status.PodIPs {
				podIPs = append(podIPs, ip.IP)
			}
		}
		return len(podIPs) == 2*int(replicas), fmt.Sprintf("%d pod IPs of running pods", len(podIPs))
	})
	poll.Until(t, 60*time.Second, "EndpointSlice of "+id, func() (bool, string) {
		var slices discoveryv1.EndpointSliceList
		if err := cl.List(ctx, &slices, client.InNamespace("web"), client.MatchingLabels{discoveryv1.LabelServiceName: "web"}); err != nil {
			return false, err.Error()
		}
		ready := map[string]bool{}
		for _, s := range slices.Items {
			if s.Labels[discoveryv1.LabelManagedBy] != "endpointslice-controller.k8s.io" {
				return false, "slice not made by Kubernetes' controller: " + s.Labels[discoveryv1.LabelManagedBy]
			}
			for _, ep := range s.Endpoints {
				if ep.Conditions.Ready != nil && *ep.Conditions.Ready {
					for _, a := range ep.Addresses {
						ready[a] = true
					}
				}
			}
		}
		for _, ip := range podIPs {
			if !ready[ip] {
				return false, "pod IP " + ip + " not ready in any slice"
			}
		}
		return true, ""
	})
	return podIPs
}

func TestPodsGetIPsAndEndpointSlicesPerCluster(t *testing.T) {
	ctx := context.Background()
	ips := map[string][]string{}
	for _, c := range tb.Clusters {
		ips[c.ID] = deployWeb(t, ctx, c.ID, 3)
		// Dual-stack pods: an address of each family, from the cluster's own ranges.
		for _, ip := range ips[c.ID] {
			inside := false
			for _, r := range testbed.PodCIDRsFor(c.Index) {
				_, cidr, _ := net.ParseCIDR(r)
				inside = inside || cidr.Contains(net.ParseIP(ip))
			}
			if !inside {
				t.Errorf("%s: pod IP %s is outside the cluster's pod ranges %v", c.ID, ip, testbed.PodCIDRsFor(c.Index))
			}
		}
		// The Service's cluster IP comes from the cluster's own range.
		var svc corev1.Service
		if err := clientFor(t, c.ID).Get(ctx, client.ObjectKey{Namespace: "web", Name: "web"}, &svc); err != nil {
			t.Fatal(err)
		}
		_, scidr, _ := net.ParseCIDR(c.ServiceCIDRs[0])
		if !scidr.Contains(net.ParseIP(svc.Spec.ClusterIP)) {
			t.Errorf("%s: service IP %s is outside %s", c.ID, svc.Spec.ClusterIP, c.ServiceCIDRs[0])
		}
	}
	seen := map[string]string{}
	for id, list := range ips {
		for _, ip := range list {
			if other, dup := seen[ip]; dup {
				t.Errorf("pod IP %s is used in %s and %s", ip, other, id)
			}
			seen[ip] = id
		}
	}
}

func TestCRDsAcceptMCSObjectsInBothVersions(t *testing.T) {
	ctx := context.Background()
	cl := clientFor(t, "c2")
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "crds"}}
	if err := cl.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	objs := []client.Object{
		&mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "crds"},
			Spec: mcsv1beta1.ServiceExportSpec{ExportedLabels: map[string]string{"tier": "web"}}},
		&mcsv1alpha1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "crds"}},
		&mcsv1beta1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "crds"},
			Spec: mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.ClusterSetIP, IPs: []string{"10.1.2.3"},
				Ports: []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}}},
		&mcsv1alpha1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "crds"},
			Spec: mcsv1alpha1.ServiceImportSpec{Type: mcsv1alpha1.Headless,
				Ports: []mcsv1alpha1.ServicePort{{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53}}}},
	}
	for _, o := range objs {
		if err := cl.Create(ctx, o); err != nil {
			t.Fatalf("create %T %s: %v", o, o.GetName(), err)
		}
	}
	// Objects stored through one version read back through the other.
	var alpha mcsv1alpha1.ServiceImport
	if err := cl.Get(ctx, client.ObjectKey{Namespace: "crds", Name: "a"}, &alpha); err != nil {
		t.Fatal(err)
	}
	if len(alpha.Spec.IPs) != 1 || alpha.Spec.IPs[0] != "10.1.2.3" || alpha.Spec.Type != mcsv1alpha1.ClusterSetIP {
		t.Errorf("v1beta1 import read through v1alpha1: %+v", alpha.Spec)
	}
	var beta mcsv1beta1.ServiceExport
	if err := cl.Get(ctx, client.ObjectKey{Namespace: "crds", Name: "b"}, &beta); err != nil {
		t.Fatal(err)
	}
}

func TestClusterPropertyValidation(t *testing.T) {
	ctx := context.Background()
	cl := clientFor(t, "c1")

	// The testbed made both well-known properties.
	var id aboutv1alpha1.ClusterProperty
	if err := cl.Get(ctx, client.ObjectKey{Name: aboutv1beta1.ClusterIDName}, &id); err != nil {
		t.Fatal(err)
	}
	if id.Spec.Value != "c1" {
		t.Fatalf("cluster id = %q, want c1", id.Spec.Value)
	}
	var set aboutv1beta1.ClusterProperty
	if err := cl.Get(ctx, client.ObjectKey{Name: aboutv1beta1.ClusterSetIDName}, &set); err != nil {
		t.Fatal(err)
	}

	// Changing an id is refused with a message that says what to do.
	id2 := &aboutv1beta1.ClusterProperty{}
	if err := cl.Get(ctx, client.ObjectKey{Name: aboutv1beta1.ClusterIDName}, id2); err != nil {
		t.Fatal(err)
	}
	id2.Spec.Value = "other"
	err := cl.Update(ctx, id2)
	if err == nil || !strings.Contains(err.Error(), "cannot be changed") {
		t.Fatalf("changing the cluster id: got %v, want a 'cannot be changed' error", err)
	}

	// Deleting and creating again is allowed, also with a new value.
	if err := cl.Delete(ctx, id2); err != nil {
		t.Fatal(err)
	}
	recreated := &aboutv1beta1.ClusterProperty{ObjectMeta: metav1.ObjectMeta{Name: aboutv1beta1.ClusterIDName},
		Spec: aboutv1beta1.ClusterPropertySpec{Value: "c1-renamed.example"}}
	if err := cl.Create(ctx, recreated); err != nil {
		t.Fatalf("recreate cluster id: %v", err)
	}
	// Put c1 back for the other tests.
	if err := cl.Delete(ctx, recreated); err != nil {
		t.Fatal(err)
	}
	if err := cl.Create(ctx, &aboutv1beta1.ClusterProperty{ObjectMeta: metav1.ObjectMeta{Name: aboutv1beta1.ClusterIDName},
		Spec: aboutv1beta1.ClusterPropertySpec{Value: "c1"}}); err != nil {
		t.Fatal(err)
	}

	invalid := []struct{ name, value string }{
		{"upper case", "Cluster-1"},
		{"underscore", "cluster_1"},
		{"leading dash", "-c1"},
		{"trailing dot", "c1."},
		{"too long", strings.Repeat("a", 60) + "." + strings.Repeat("b", 60) + "." + strings.Repeat("c", 10)},
		{"label over 63", strings.Repeat("a", 64)},
	}
	for _, tc := range invalid {
		t.Run("rejects "+tc.name, func(t *testing.T) {
			// A fresh cluster has no ids yet: test on the clusterset id's
			// sibling by deleting nothing; use v1alpha1 to cover that version.
			p := &aboutv1alpha1.ClusterProperty{ObjectMeta: metav1.ObjectMeta{Name: aboutv1beta1.ClusterSetIDName},
				Spec: aboutv1alpha1.ClusterPropertySpec{Value: tc.value}}
			err := clientFor(t, "c2").Patch(ctx, p, client.Merge)
			if err == nil || !strings.Contains(err.Error(), "must be a DNS subdomain") && !strings.Contains(err.Error(), "cannot be changed") {
				t.Fatalf("value %q: got %v, want a validation error", tc.value, err)
			}
			if err := cl.Create(ctx, &aboutv1alpha1.ClusterProperty{ObjectMeta: metav1.ObjectMeta{Name: "cluster.clusterset.k8s.io"},
				Spec: aboutv1alpha1.ClusterPropertySpec{Value: tc.value}}); err == nil || !strings.Contains(err.Error(), "must be a DNS subdomain") && !strings.Contains(err.Error(), "already exists") {
				t.Fatalf("create with value %q: got %v", tc.value, err)
			}
		})
	}

	// A new cluster id with an invalid value is refused on create.
	if err := cl.Delete(ctx, &aboutv1beta1.ClusterProperty{ObjectMeta: metav1.ObjectMeta{Name: aboutv1beta1.ClusterIDName}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cl.Create(context.Background(), &aboutv1beta1.ClusterProperty{ObjectMeta: metav1.ObjectMeta{Name: aboutv1beta1.ClusterIDName},
			Spec: aboutv1beta1.ClusterPropertySpec{Value: "c1"}})
	})
	for _, tc := range invalid {
		err := cl.Create(ctx, &aboutv1beta1.ClusterProperty{ObjectMeta: metav1.ObjectMeta{Name: aboutv1beta1.ClusterIDName},
			Spec: aboutv1beta1.ClusterPropertySpec{Value: tc.value}})
		if err == nil || !strings.Contains(err.Error(), "must be a DNS subdomain") {
			t.Errorf("create cluster id %q (%s): got %v, want a DNS subdomain error", tc.value, tc.name, err)
		}
	}
	// A 128-character subdomain is accepted.
	ok := strings.Repeat("a", 63) + "." + strings.Repeat("b", 64-2)
	if len(ok) != 126 {
		t.Fatalf("bad test value length %d", len(ok))
	}
	if err := cl.Create(ctx, &aboutv1beta1.ClusterProperty{ObjectMeta: metav1.ObjectMeta{Name: aboutv1beta1.ClusterIDName},
		Spec: aboutv1beta1.ClusterPropertySpec{Value: ok}}); err != nil {
		t.Fatalf("create a valid long id: %v", err)
	}
	if err := cl.Delete(ctx, &aboutv1beta1.ClusterProperty{ObjectMeta: metav1.ObjectMeta{Name: aboutv1beta1.ClusterIDName}}); err != nil {
		t.Fatal(err)
	}

	// Other properties hold any value and may change.
	other := &aboutv1beta1.ClusterProperty{ObjectMeta: metav1.ObjectMeta{Name: "region.example.com"},
		Spec: aboutv1beta1.ClusterPropertySpec{Value: "Any Value_at all"}}
	if err := cl.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	other.Spec.Value = "changed"
	if err := cl.Update(ctx, other); err != nil {
		t.Fatalf("update an ordinary property: %v", err)
	}
}
