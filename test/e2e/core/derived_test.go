package core

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/manager"
	"github.com/mcsd-io/mcsd/internal/wellknown"
	fw "github.com/mcsd-io/mcsd/test/framework"
)

// TestGatewayResolvesServiceImport follows a ServiceImport to its endpoints
// the way a Gateway API implementation resolves an HTTPRoute backendRef of
// kind ServiceImport: the annotation multicluster.kubernetes.io/derived-service
// names a Service, whose cluster IPs are the import's, and whose
// EndpointSlices (label kubernetes.io/service-name) hold every exporting
// cluster's endpoints.
func TestGatewayResolvesServiceImport(t *testing.T) {
	ns, c1 := setUpTest(t, "gateway")
	c2 := env.Client(t, "c2")
	fw.Deploy(t, c1, fw.App{Namespace: ns, Name: "web", Replicas: 2})
	fw.Deploy(t, c2, fw.App{Namespace: ns, Name: "web", Replicas: 1})
	want := append(waitPods(t, c1, ns, "web", 2), waitPods(t, c2, ns, "web", 1)...)
	slices.Sort(want)
	// Watched from before the export: the import appears whole.
	first := map[string]*firstImport{}
	for _, id := range env.ClusterIDs() {
		first[id] = watchFirstImport(t, id, ns, "web")
	}
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
		if got := fw.ReadyAddresses(list.Items); !slices.Equal(got, want) {
			return false, fmt.Sprintf("endpoints of %s: %v, want %v", name, got, want)
		}
		return true, ""
	})
	for id, f := range first {
		si := f.get()
		if si == nil {
			t.Errorf("%s: the watch saw no ServiceImport", id)
			continue
		}
		if len(si.Spec.IPs) == 0 || si.Annotations[wellknown.AnnotationDerivedService] == "" {
			t.Errorf("%s: the first ServiceImport a watch saw was not whole: IPs %v, annotations %v", id, si.Spec.IPs, si.Annotations)
		}
	}
}

// firstImport is the first version of a ServiceImport that a watch saw.
type firstImport struct {
	mu sync.Mutex
	si *mcsv1beta1.ServiceImport
}

func (f *firstImport) get() *mcsv1beta1.ServiceImport {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.si
}

// watchFirstImport watches ServiceImport ns/name in cluster id until the
// test ends and keeps the first version it sees. The ServiceImport must not
// exist yet.
func watchFirstImport(t *testing.T, id, ns, name string) *firstImport {
	t.Helper()
	cl, err := client.NewWithWatch(env.TB.Cluster(id).Config, client.Options{Scheme: manager.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w, err := cl.Watch(ctx, &mcsv1beta1.ServiceImportList{}, client.InNamespace(ns),
		client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("metadata.name", name)})
	if err != nil {
		cancel()
		t.Fatalf("watch ServiceImports in %s: %v", id, err)
	}
	f := &firstImport{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			si, ok := ev.Object.(*mcsv1beta1.ServiceImport)
			if !ok {
				continue
			}
			f.mu.Lock()
			if f.si == nil {
				f.si = si
			}
			f.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		w.Stop()
		cancel()
		<-done
	})
	return f
}

// TestEmptySlicePerFamily: a dual-stack import gets, from every source
// cluster, one EndpointSlice per family of the import, empty where the
// cluster has no endpoints of that family. The testbed's pods have IPv4 and
// IPv6 addresses, so a cluster without IPv6 endpoints is one whose Service is
// single-stack IPv4 (c2, which also raises IPFamilyConflict: c1's dual-stack
// export is older and wins), and one without endpoints at all runs no pods
// (c3).
func TestEmptySlicePerFamily(t *testing.T) {
	ns, c1 := setUpTest(t, "dualstack-empty")
	ips := map[string][]string{"c1": exportFirst(t, c1, fw.App{Namespace: ns, Name: "web", Replicas: 1, IPFamilyPolicy: corev1.IPFamilyPolicyPreferDualStack})}
	c2, c3 := env.Client(t, "c2"), env.Client(t, "c3")
	ips["c2"] = deployExported(t, c2, fw.App{Namespace: ns, Name: "web", Replicas: 1, IPFamilyPolicy: corev1.IPFamilyPolicySingleStack})
	noPods := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "none"}, IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicyPreferDualStack),
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
	if err := c3.Create(context.Background(), noPods); err != nil {
		t.Fatal(err)
	}
	fw.Export(t, c3, ns, "web")

	// Endpoints per source cluster and address type.
	want := map[string]map[discoveryv1.AddressType]int{
		"c1": {discoveryv1.AddressTypeIPv4: 1, discoveryv1.AddressTypeIPv6: 1},
		"c2": {discoveryv1.AddressTypeIPv4: 1, discoveryv1.AddressTypeIPv6: 0},
		"c3": {discoveryv1.AddressTypeIPv4: 0, discoveryv1.AddressTypeIPv6: 0},
	}
	dual := []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	inEveryCluster(t, "one slice per family and source cluster, empty ones included", func(id string, cl client.Client) (bool, string) {
		si := fw.GetImport(t, cl, ns, "web")
		if si == nil || !slices.Equal(si.Spec.IPFamilies, dual) || len(si.Status.Clusters) != 3 {
			return false, fmt.Sprintf("ServiceImport %v", si)
		}
		bySource := importedSlices(t, cl, ns, "web")
		for src, wantTypes := range want {
			got := map[discoveryv1.AddressType]int{}
			for _, s := range bySource[src] {
				if _, dup := got[s.AddressType]; dup {
					return false, fmt.Sprintf("two %s slices from %s", s.AddressType, src)
				}
				got[s.AddressType] = len(s.Endpoints)
				if s.Labels[discoveryv1.LabelServiceName] != si.Annotations[wellknown.AnnotationDerivedService] ||
					s.Labels[discoveryv1.LabelManagedBy] != wellknown.ManagedBy {
					return false, fmt.Sprintf("slice %s from %s: labels %v", s.Name, src, s.Labels)
				}
				if s.AddressType == discoveryv1.AddressTypeIPv4 && len(ips[src]) > 0 && !slices.Equal(fw.ReadyAddresses([]discoveryv1.EndpointSlice{s}), ips[src]) {
					return false, fmt.Sprintf("IPv4 endpoints from %s: %v, want %v", src, fw.ReadyAddresses([]discoveryv1.EndpointSlice{s}), ips[src])
				}
			}
			if !maps.Equal(got, wantTypes) {
				return false, fmt.Sprintf("endpoints per address type from %s: %v, want %v", src, got, wantTypes)
			}
		}
		return true, ""
	})

	for _, id := range []string{"c1", "c2", "c3"} {
		fw.Unexport(t, env.Client(t, id), ns, "web")
	}
	inEveryCluster(t, "import and its slices, empty ones included, deleted", func(id string, cl client.Client) (bool, string) {
		return importGone(t, cl, ns, "web")
	})
}

// TestSecondaryFamilyInPlace: the exported Service turns dual-stack, then
// single-stack again. In every cluster the derived Service gets an IPv6
// cluster IP, and loses it, in place: the import keeps its IPv4 IP, and its
// derived Service its UID.
func TestSecondaryFamilyInPlace(t *testing.T) {
	ns, c1 := setUpTest(t, "family-in-place")
	exportFirst(t, c1, fw.App{Namespace: ns, Name: "web", Replicas: 1, IPFamilyPolicy: corev1.IPFamilyPolicySingleStack})
	type derived struct {
		ip  string
		uid string
	}
	first := map[string]derived{}
	inEveryCluster(t, "an IPv4 import", func(id string, cl client.Client) (bool, string) {
		si, svc := fw.GetImport(t, cl, ns, "web"), derivedService(t, cl, ns, "web")
		if si == nil || svc == nil || !slices.Equal(si.Spec.IPFamilies, []corev1.IPFamily{corev1.IPv4Protocol}) || len(si.Spec.IPs) != 1 {
			return false, fmt.Sprintf("ServiceImport %v", si)
		}
		first[id] = derived{ip: si.Spec.IPs[0], uid: string(svc.UID)}
		return true, ""
	})
	same := func(id string, cl client.Client, families ...corev1.IPFamily) (bool, string) {
		si, svc := fw.GetImport(t, cl, ns, "web"), derivedService(t, cl, ns, "web")
		if si == nil || svc == nil {
			return false, "no import or derived Service"
		}
		if string(svc.UID) != first[id].uid {
			return false, "derived Service recreated"
		}
		if !slices.Equal(si.Spec.IPFamilies, families) || len(si.Spec.IPs) != len(families) || si.Spec.IPs[0] != first[id].ip {
			return false, fmt.Sprintf("import families %v IPs %v, want %v with %s first", si.Spec.IPFamilies, si.Spec.IPs, families, first[id].ip)
		}
		return true, ""
	}
	setFamilies := func(policy corev1.IPFamilyPolicy, families ...corev1.IPFamily) {
		t.Helper()
		fw.Patch(t, c1, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}}, func(svc *corev1.Service) {
			svc.Spec.IPFamilyPolicy = &policy
			svc.Spec.IPFamilies = families
			svc.Spec.ClusterIPs = svc.Spec.ClusterIPs[:1]
		})
	}
	setFamilies(corev1.IPFamilyPolicyRequireDualStack, corev1.IPv4Protocol, corev1.IPv6Protocol)
	inEveryCluster(t, "the import dual-stack, its IPv4 IP kept", func(id string, cl client.Client) (bool, string) {
		return same(id, cl, corev1.IPv4Protocol, corev1.IPv6Protocol)
	})
	setFamilies(corev1.IPFamilyPolicySingleStack, corev1.IPv4Protocol)
	inEveryCluster(t, "the import IPv4 alone again, its IP kept", func(id string, cl client.Client) (bool, string) {
		return same(id, cl, corev1.IPv4Protocol)
	})
	fw.Unexport(t, c1, ns, "web")
	inEveryCluster(t, "import gone", func(id string, cl client.Client) (bool, string) {
		return importGone(t, cl, ns, "web")
	})
}

// TestFamilyOrderKeepsIPs: c1's dual-stack export lists IPv4 first, c2's
// IPv6 first. When c1's export, the oldest, is withdrawn, the import's
// families are c2's, in another order: every cluster keeps its derived
// Service and the import its IPs, IPv4 still first (Kubernetes cannot
// change a Service's primary family; new IPs would break clients that
// resolved the old ones).
func TestFamilyOrderKeepsIPs(t *testing.T) {
	ns, c1 := setUpTest(t, "family-order")
	exportFirst(t, c1, fw.App{Namespace: ns, Name: "web", Replicas: 1, IPFamilyPolicy: corev1.IPFamilyPolicyRequireDualStack})
	c2 := env.Client(t, "c2")
	v6First := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "none"},
			IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicyRequireDualStack),
			IPFamilies:     []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol},
			Ports:          []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
	if err := c2.Create(context.Background(), v6First); err != nil {
		t.Fatal(err)
	}
	fw.Export(t, c2, ns, "web")

	dual := []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	type derived struct {
		ips []string
		uid string
	}
	first := map[string]derived{}
	inEveryCluster(t, "a dual-stack import of both clusters, IPv4 first", func(id string, cl client.Client) (bool, string) {
		si, svc := fw.GetImport(t, cl, ns, "web"), derivedService(t, cl, ns, "web")
		if si == nil || svc == nil || len(si.Status.Clusters) != 2 || !slices.Equal(si.Spec.IPFamilies, dual) || len(si.Spec.IPs) != 2 {
			return false, fmt.Sprintf("ServiceImport %v", si)
		}
		first[id] = derived{ips: slices.Clone(si.Spec.IPs), uid: string(svc.UID)}
		return true, ""
	})

	fw.Unexport(t, c1, ns, "web")
	inEveryCluster(t, "c2's import alone, with the same IPs and derived Service", func(id string, cl client.Client) (bool, string) {
		si, svc := fw.GetImport(t, cl, ns, "web"), derivedService(t, cl, ns, "web")
		if si == nil || svc == nil || len(si.Status.Clusters) != 1 || si.Status.Clusters[0].Cluster != "c2" {
			return false, fmt.Sprintf("ServiceImport %v", si)
		}
		if string(svc.UID) != first[id].uid {
			return false, "derived Service recreated"
		}
		if !slices.Equal(si.Spec.IPFamilies, dual) || !slices.Equal(si.Spec.IPs, first[id].ips) {
			return false, fmt.Sprintf("import families %v IPs %v, want %v %v", si.Spec.IPFamilies, si.Spec.IPs, dual, first[id].ips)
		}
		return true, ""
	})
	fw.Unexport(t, c2, ns, "web")
	inEveryCluster(t, "import gone", func(id string, cl client.Client) (bool, string) {
		return importGone(t, cl, ns, "web")
	})
}
