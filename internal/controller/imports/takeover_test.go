package imports

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/clusterset"
	"github.com/mcsd-io/mcsd/internal/wellknown"
	"github.com/mcsd-io/mcsd/pkg/registry"
)

// awsImport is what the AWS Cloud Map MCS controller leaves in a cluster
// for the import of shop/web from clusters (one derived Service per
// cluster, "imported-<cluster>" here, with the cluster IP ips[i] and one
// EndpointSlice holding addrs[i]); listed lists the clusters its annotation
// names (those at the import's creation).
func awsImport(typ mcsv1beta1.ServiceImportType, clusters, ips, addrs []string, listed int) []client.Object {
	si := &mcsv1beta1.ServiceImport{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "web", UID: "aws-si"},
		Spec:       mcsv1beta1.ServiceImportSpec{Type: typ, Ports: []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}},
	}
	var entries []map[string]string
	objs := []client.Object{si}
	owner := metav1.OwnerReference{APIVersion: "multicluster.x-k8s.io/v1alpha1", Kind: "ServiceImport", Name: "web", UID: si.UID, Controller: ptr.To(true)}
	for i, c := range clusters {
		name := "imported-" + c
		if i < listed {
			entries = append(entries, map[string]string{"cluster": c, "derived-service": name})
		}
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name, UID: types.UID("aws-" + c),
				Labels:          map[string]string{mcsv1beta1.LabelSourceCluster: c, mcsv1beta1.LabelServiceName: "web"},
				OwnerReferences: []metav1.OwnerReference{owner}},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: ips[i], ClusterIPs: []string{ips[i]}, IPFamilies: v4,
				Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(80)}}},
		}
		if typ == mcsv1beta1.Headless {
			svc.Spec.ClusterIP, svc.Spec.ClusterIPs = corev1.ClusterIPNone, []string{corev1.ClusterIPNone}
		} else {
			si.Spec.IPs = append(si.Spec.IPs, ips[i])
		}
		slice := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name + "-abcde",
				Labels: map[string]string{discoveryv1.LabelServiceName: name, mcsv1beta1.LabelServiceName: "web",
					discoveryv1.LabelManagedBy: wellknown.AWSManagedBy, mcsv1beta1.LabelSourceCluster: c}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{addrs[i]}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)}},
		}
		objs = append(objs, svc, slice)
	}
	raw, _ := json.Marshal(entries)
	si.Annotations = map[string]string{wellknown.AWSAnnotationDerivedService: string(raw)}
	return objs
}

// newAWSEnv is an env whose cluster holds the namespace shop and what the
// AWS controller leaves there for the import of shop/web (awsImport).
func newAWSEnv(t *testing.T, typ mcsv1beta1.ServiceImportType, clusters, ips, addrs []string, listed int) *env {
	t.Helper()
	return newEnv(t, append([]client.Object{namespace(testNS)}, awsImport(typ, clusters, ips, addrs, listed)...)...)
}

// awsSliceNames lists the AWS controller's EndpointSlices left in the
// namespace.
func (e *env) awsSliceNames() []string {
	e.t.Helper()
	list := &discoveryv1.EndpointSliceList{}
	if err := e.api.List(e.ctx, list, client.InNamespace(testNS), client.MatchingLabels{discoveryv1.LabelManagedBy: wellknown.AWSManagedBy}); err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, s := range list.Items {
		out = append(out, s.Name)
	}
	return out
}

// routed returns, by Service name, the addresses of the slices that
// kube-proxy would route that Service to (its kubernetes.io/service-name).
func (e *env) routed() map[string][]string {
	e.t.Helper()
	list := &discoveryv1.EndpointSliceList{}
	if err := e.api.List(e.ctx, list, client.InNamespace(testNS)); err != nil {
		e.t.Fatal(err)
	}
	out := map[string][]string{}
	for _, s := range list.Items {
		n := s.Labels[discoveryv1.LabelServiceName]
		if n == "" {
			continue
		}
		for _, ep := range s.Endpoints {
			out[n] = append(out[n], ep.Addresses...)
		}
		slices.Sort(out[n])
		out[n] = slices.Compact(out[n])
	}
	return out
}

func TestTakeOverAWSImport(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	// "imported-west" exported later: the annotation lists east only.
	e := newAWSEnv(t, mcsv1beta1.ClusterSetIP,
		[]string{"east", "west"}, []string{"10.96.0.20", "10.96.0.30"}, []string{"10.1.0.1", "10.2.0.1"}, 1)
	e.r.Now = func() time.Time { return now }
	e.r.RetireGrace = time.Minute
	twoClusters(e)

	res, err := e.r.Reconcile(e.ctx, request(testNS, "web"))
	if err != nil {
		t.Fatal(err)
	}
	si := e.serviceImport("web")
	if !isManaged(si) || si.UID != "aws-si" {
		t.Fatalf("ServiceImport not taken over in place: %+v", si.ObjectMeta)
	}
	if _, ok := si.Annotations[wellknown.AWSAnnotationDerivedService]; ok {
		t.Error("the AWS controller's annotation is still there")
	}
	if got := si.Annotations[wellknown.AnnotationDerivedService]; got != "imported-east" {
		t.Errorf("derived-service = %q, want the adopted imported-east", got)
	}
	if !slices.Equal(si.Spec.IPs, []string{"10.96.0.20"}) {
		t.Errorf("ips = %v, want the adopted Service's 10.96.0.20 only", si.Spec.IPs)
	}
	if got, want := si.Annotations[wellknown.AnnotationRetiring], "imported-west"; got != want {
		t.Errorf("retiring = %q, want %q", got, want)
	}
	if got, want := si.Annotations[wellknown.AnnotationRetireAfter], "2026-11-25T12:01:00Z"; got != want {
		t.Errorf("retire-after = %q, want %q", got, want)
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > time.Minute {
		t.Errorf("requeue after %v, want within the grace", res.RequeueAfter)
	}
	wantCondition(t, si, "Ready", metav1.ConditionTrue, "Ready")

	adopted := e.service("imported-east")
	if !isOurService(adopted, "web") || !metav1.IsControlledBy(adopted, si) || adopted.Spec.ClusterIP != "10.96.0.20" {
		t.Errorf("adopted Service: annotations %v owners %v ip %s", adopted.Annotations, adopted.OwnerReferences, adopted.Spec.ClusterIP)
	}
	if _, ok := adopted.Labels[mcsv1beta1.LabelSourceCluster]; ok {
		t.Errorf("adopted Service keeps the AWS controller's labels: %v", adopted.Labels)
	}
	if e.service(DerivedServiceName("web")) != nil {
		t.Error("a new derived Service was created beside the adopted one")
	}
	// Both Services route to the whole import, through mcsd's slices; the
	// AWS controller's are gone, once mcsd's were written.
	all := []string{"10.1.0.1", "10.1.0.2", "10.2.0.1"}
	if got := e.routed(); !slices.Equal(got["imported-east"], all) || !slices.Equal(got["imported-west"], all) {
		t.Errorf("routed = %v, want both Services to %v", got, all)
	}
	if left := e.awsSliceNames(); len(left) > 0 {
		t.Errorf("AWS slices left: %v", left)
	}
	if ev := strings.Join(e.events(), "\n"); !strings.Contains(ev, eventTakenOver) {
		t.Errorf("events = %s, want %s", ev, eventTakenOver)
	}
	e.steady("web")

	// The grace ends: the retiring Service and its slices go, and so does
	// the record of the retirement.
	now = now.Add(time.Minute)
	e.reconcile("web")
	if e.service("imported-west") != nil {
		t.Error("retiring Service not deleted after its grace")
	}
	si = e.serviceImport("web")
	if _, ok := si.Annotations[wellknown.AnnotationRetiring]; ok {
		t.Errorf("retirement still recorded: %v", si.Annotations)
	}
	if got := e.routed(); len(got) != 1 || !slices.Equal(got["imported-east"], all) {
		t.Errorf("routed = %v, want imported-east only", got)
	}
	e.steady("web")
	// A restart finds the adopted Service by the annotation.
	e.r = &Reconciler{Client: e.r.Client, View: e.view, ClusterID: "east"}
	e.steady("web")
}

func TestTakeOverAWSHeadlessImport(t *testing.T) {
	e := newAWSEnv(t, mcsv1beta1.Headless,
		[]string{"east", "west"}, []string{"", ""}, []string{"10.1.0.1", "10.2.0.1"}, 2)
	twoHeadless(e)
	e.reconcile("web")
	if left := e.awsSliceNames(); len(left) > 0 {
		t.Errorf("AWS slices left after mcsd's were written: %v", left)
	}
	if got := e.slices("web"); len(got["east"]) == 0 || len(got["west"]) == 0 {
		t.Errorf("mcsd's headless slices = %v", got)
	}
	// No grace for Services without a cluster IP.
	e.reconcile("web")
	for _, n := range []string{"imported-east", "imported-west"} {
		if e.service(n) != nil {
			t.Errorf("%s not deleted", n)
		}
	}
	si := e.serviceImport("web")
	if !isManaged(si) || si.Annotations[wellknown.AnnotationRetireAfter] != "" {
		t.Errorf("annotations = %v", si.Annotations)
	}
	e.steady("web")
}

// twoHeadless exports shop/web as headless from east and west.
func twoHeadless(e *env) {
	e.publish([]registry.Export{
		export("east", registry.Headless, v4, port("http", corev1.ProtocolTCP, 80)),
		export("west", registry.Headless, v4, port("http", corev1.ProtocolTCP, 80)),
	},
		endpoints("east", group(discoveryv1.AddressTypeIPv4, []registry.EndpointPort{epPort("http", 8080)}, ready("10.1.0.1"))),
		endpoints("west", group(discoveryv1.AddressTypeIPv4, []registry.EndpointPort{epPort("http", 8080)}, ready("10.2.0.1"))),
	)
}

func TestAWSImportOfUnexportedServiceDeleted(t *testing.T) {
	e := newAWSEnv(t, mcsv1beta1.ClusterSetIP,
		[]string{"east"}, []string{"10.96.0.20"}, []string{"10.1.0.1"}, 1)
	e.publish(nil)
	// Its reconcile waits for the View to hold the namespace; the
	// namespace's arrival names it, though no cluster exports it.
	want := []ctrl.Request{request(testNS, "web")}
	if got := e.r.changeToImports(e.ctx, clusterset.Change{Namespace: testNS}); !cmp.Equal(got, want) {
		t.Errorf("changeToImports(namespace) = %v, want %v", got, want)
	}
	e.reconcile("web")
	if e.exists(&mcsv1beta1.ServiceImport{}, "web") {
		t.Error("the AWS controller's import of a Service nobody exports is still there")
	}
}

// TestNeedsRecreateClusterChosen: a derived Service created while the
// import named no families (the cluster chose, or the AWS controller made
// it) is kept when the import's families turn out to be those it has.
func TestNeedsRecreateClusterChosen(t *testing.T) {
	svc := func(requested string, has ...corev1.IPFamily) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{wellknown.AnnotationIPFamilies: requested}},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.96.0.1", IPFamilies: has}}
	}
	v6 := []corev1.IPFamily{corev1.IPv6Protocol}
	dual := []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	for _, c := range []struct {
		name     string
		svc      *corev1.Service
		families []corev1.IPFamily
		want     bool
	}{
		{"cluster chose what the import asks", svc("", corev1.IPv4Protocol), v4, false},
		{"cluster chose another family", svc("", corev1.IPv4Protocol), v6, true},
		{"cluster chose one, import asks two of its primary", svc("", corev1.IPv4Protocol), dual, false},
		{"cluster chose one, import asks two of another primary", svc("", corev1.IPv6Protocol), dual, true},
		{"asked for one, import asks two of its primary", svc("IPv4", corev1.IPv4Protocol), dual, false},
		{"asked for two, import asks them in the other order", svc("IPv4,IPv6", corev1.IPv4Protocol, corev1.IPv6Protocol), []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}, true},
		{"asked for two, import asks the secondary alone", svc("IPv4,IPv6", corev1.IPv4Protocol, corev1.IPv6Protocol), v6, true},
		{"asked for two, import asks the primary alone", svc("IPv4,IPv6", corev1.IPv4Protocol, corev1.IPv6Protocol), v4, false},
		{"asked for what the import asks", svc("IPv4", corev1.IPv4Protocol), v4, false},
		{"asked for another", svc("IPv4", corev1.IPv4Protocol), v6, true},
		{"import names none", svc("IPv4", corev1.IPv4Protocol), nil, false},
	} {
		if got := needsRecreate(c.svc, c.families); got != c.want {
			t.Errorf("%s: needsRecreate = %t, want %t", c.name, got, c.want)
		}
	}
}

// TestTakeOverStaleServiceCache: the reconcile after a take-over may read
// the adopted Service as the AWS controller left it (the cache shows the
// ServiceImport's update first): it adopts it again rather than calling it
// foreign, and the import keeps its IP and its endpoints.
func TestTakeOverStaleServiceCache(t *testing.T) {
	e := newAWSEnv(t, mcsv1beta1.ClusterSetIP,
		[]string{"east", "west"}, []string{"10.96.0.20", "10.96.0.30"}, []string{"10.1.0.1", "10.2.0.1"}, 2)
	twoClusters(e)
	e.reconcile("web")
	// The adopted Service as the cache may still show it.
	svc := e.service("imported-east")
	delete(svc.Annotations, wellknown.AnnotationManaged)
	delete(svc.Annotations, wellknown.AnnotationServiceImport)
	if err := e.api.Update(e.ctx, svc); err != nil {
		t.Fatal(err)
	}
	e.events()
	e.reconcile("web")
	si := e.serviceImport("web")
	if !slices.Equal(si.Spec.IPs, []string{"10.96.0.20"}) {
		t.Errorf("ips = %v, want the adopted Service's", si.Spec.IPs)
	}
	if got := e.routed()["imported-east"]; len(got) != 3 {
		t.Errorf("imported-east routes to %v, want the import's 3 endpoints", got)
	}
	if !isOurService(e.service("imported-east"), "web") {
		t.Error("the adopted Service was not marked mcsd's again")
	}
	if ev := strings.Join(e.events(), "\n"); strings.Contains(ev, eventServiceConflict) {
		t.Errorf("events = %s, want no %s", ev, eventServiceConflict)
	}
}

// TestTakeOverFamilies: the adopted Service keeps its IP when it has the
// import's primary family (a dual-stack import on its single-stack Service
// is not recreated: it gets its secondary family in place); one of another
// primary family retires with the rest, and mcsd makes its own derived
// Service.
func TestTakeOverFamilies(t *testing.T) {
	for _, tc := range []struct {
		name      string
		families  []corev1.IPFamily
		wantKept  string
		wantRetir string
	}{
		{"dual-stack import", []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}, "imported-east", "imported-west"},
		// The IPv4 Services can stay: the import keeps their family first.
		{"IPv6-first dual-stack import", []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}, "imported-east", "imported-west"},
		{"IPv6 import", []corev1.IPFamily{corev1.IPv6Protocol}, "", "imported-east,imported-west"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newAWSEnv(t, mcsv1beta1.ClusterSetIP,
				[]string{"east", "west"}, []string{"10.96.0.20", "10.96.0.30"}, []string{"10.1.0.1", "10.2.0.1"}, 2)
			e.publish([]registry.Export{export("east", registry.ClusterSetIP, tc.families, port("http", corev1.ProtocolTCP, 80))},
				endpoints("east", group(discoveryv1.AddressTypeIPv4, []registry.EndpointPort{epPort("http", 8080)}, ready("10.1.0.1"))))
			writes := strings.Join(e.reconcile("web"), "\n")
			e.reconcile("web")
			si := e.serviceImport("web")
			if got := si.Annotations[wellknown.AnnotationRetiring]; got != tc.wantRetir {
				t.Errorf("retiring = %q, want %q", got, tc.wantRetir)
			}
			if tc.wantKept == "" {
				if si.Annotations[wellknown.AnnotationDerivedService] != DerivedServiceName("web") || e.service(DerivedServiceName("web")) == nil {
					t.Errorf("derived-service = %q, want mcsd's own %s", si.Annotations[wellknown.AnnotationDerivedService], DerivedServiceName("web"))
				}
				return
			}
			if got := si.Annotations[wellknown.AnnotationDerivedService]; got != tc.wantKept {
				t.Errorf("derived-service = %q, want %q", got, tc.wantKept)
			}
			svc := e.service(tc.wantKept)
			if strings.Contains(writes, "delete *v1.Service "+tc.wantKept) || svc == nil || svc.Spec.ClusterIP != "10.96.0.20" {
				t.Fatalf("the adopted Service was recreated (writes %s)", writes)
			}
			want := []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
			if !slices.Equal(svc.Spec.IPFamilies, want) || ptr.Deref(svc.Spec.IPFamilyPolicy, "") != corev1.IPFamilyPolicyRequireDualStack {
				t.Errorf("adopted Service families %v policy %v, want %v RequireDualStack", svc.Spec.IPFamilies, svc.Spec.IPFamilyPolicy, want)
			}
			// The API server allocates the secondary family's IP.
			svc.Spec.ClusterIPs = []string{"10.96.0.20", "fd00::20"}
			if err := e.api.Update(e.ctx, svc); err != nil {
				t.Fatal(err)
			}
			e.reconcile("web")
			if ips := e.serviceImport("web").Spec.IPs; !slices.Equal(ips, []string{"10.96.0.20", "fd00::20"}) {
				t.Errorf("ips %v, want the adopted Service's IPv4 IP and its new IPv6 one", ips)
			}
		})
	}
}

// Of the AWS controller's derived Services, one whose family is the
// import's first is kept before one of its second family, first by name.
func TestTakeOverPrefersTheImportsFirstFamily(t *testing.T) {
	objs := awsImport(mcsv1beta1.ClusterSetIP, []string{"east", "west"}, []string{"fd00::20", "10.96.0.30"}, []string{"10.1.0.1", "10.2.0.1"}, 2)
	for _, o := range objs {
		if svc, ok := o.(*corev1.Service); ok && svc.Name == "imported-east" {
			svc.Spec.IPFamilies = v6
		}
	}
	e := newEnv(t, append([]client.Object{namespace(testNS)}, objs...)...)
	families := []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	e.publish([]registry.Export{export("east", registry.ClusterSetIP, families, port("http", corev1.ProtocolTCP, 80))},
		endpoints("east", group(discoveryv1.AddressTypeIPv4, []registry.EndpointPort{epPort("http", 8080)}, ready("10.1.0.1"))))
	e.reconcile("web")
	e.reconcile("web")
	si := e.serviceImport("web")
	if got := si.Annotations[wellknown.AnnotationDerivedService]; got != "imported-west" {
		t.Errorf("derived-service = %q, want imported-west (IPv4, the import's first family)", got)
	}
	if svc := e.service("imported-west"); svc == nil || svc.Spec.ClusterIP != "10.96.0.30" {
		t.Errorf("imported-west %+v, want it kept with its IPv4 IP", svc)
	}
}
