package imports

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/conditions"
	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	"github.com/mcsd-io/mcsd/internal/wellknown"
	"github.com/mcsd-io/mcsd/pkg/registry"
)

// TestHostileRecordsDropOnlyTheirCluster: for each kind of record a peer may
// write that Kubernetes or mcsd refuses, the import keeps the good cluster's
// endpoints, leaves the hostile cluster out, and says which cluster was
// refused and why (RecordsAccepted=False and a Warning event); when the
// hostile cluster publishes a good record, it is imported and the
// condition goes.
func TestHostileRecordsDropOnlyTheirCluster(t *testing.T) {
	httpPort := []registry.EndpointPort{epPort("http", 8080)}
	goodExport := export("evil", registry.ClusterSetIP, v4, port("http", corev1.ProtocolTCP, 80))
	goodEndpoints := endpoints("evil", group(discoveryv1.AddressTypeIPv4, httpPort, ready("10.9.0.1")))
	many := make([]registry.Endpoint, 20000)
	for i := range many {
		many[i] = ready(fmt.Sprintf("10.%d.%d.%d", 100+i>>16, i>>8&255, i&127+1))
	}
	tests := []struct {
		name      string
		export    func(*registry.Export)
		endpoints func(*registry.Endpoints)
		want      string // in the condition's message
	}{
		{"loopback endpoint", nil, func(e *registry.Endpoints) { e.Groups[0].Endpoints[0].Addresses = []string{"127.0.0.1"} }, "loopback"},
		{"link-local endpoint", nil, func(e *registry.Endpoints) { e.Groups[0].Endpoints[0].Addresses = []string{"169.254.1.1"} }, "link-local"},
		{"unspecified endpoint", nil, func(e *registry.Endpoints) { e.Groups[0].Endpoints[0].Addresses = []string{"0.0.0.0"} }, "unspecified"},
		{"multicast endpoint", nil, func(e *registry.Endpoints) { e.Groups[0].Endpoints[0].Addresses = []string{"239.1.1.1"} }, "multicast"},
		{"tens of thousands of endpoints", nil, func(e *registry.Endpoints) { e.Groups[0].Endpoints = many }, "tooManyEndpoints"},
		{"endpoint port out of range", nil, func(e *registry.Endpoints) { e.Groups[0].Ports[0].Port = 99999 }, "out of range"},
		{"port out of range", func(e *registry.Export) { e.Spec.Ports[0].Port = 0 }, nil, "out of range"},
		{"unknown protocol", func(e *registry.Export) { e.Spec.Ports[0].Protocol = "ICMP" }, nil, "protocol"},
		{"unknown type", func(e *registry.Export) { e.Spec.Type = "ExternalName" }, nil, "service type"},
		{"invalid label key", func(e *registry.Export) { e.Spec.ExportedLabels = map[string]string{"not a key": "x"} }, nil, "exported label"},
		{"invalid annotation key", func(e *registry.Export) { e.Spec.ExportedAnnotations = map[string]string{"a/b/c": "x"} }, nil, "exported annotation"},
		{"mcsd's own annotation", func(e *registry.Export) {
			e.Spec.ExportedAnnotations = map[string]string{wellknown.AnnotationRetiring: "payments"}
		}, nil, "exported annotation"},
		{"the derived-service annotation", func(e *registry.Export) {
			e.Spec.ExportedAnnotations = map[string]string{wellknown.AnnotationDerivedService: "payments"}
		}, nil, "exported annotation"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, namespace(testNS))
			e.publish([]registry.Export{export("east", registry.ClusterSetIP, v4, port("http", corev1.ProtocolTCP, 80))},
				endpoints("east", group(discoveryv1.AddressTypeIPv4, httpPort, ready("10.1.0.1"))))
			e.reconcile("web")
			e.allocate("web", "10.96.0.10")
			e.reconcile("web")
			e.events()

			ex := export("evil", registry.ClusterSetIP, v4, port("http", corev1.ProtocolTCP, 80))
			eps := goodEndpoints
			eps.Groups = []registry.EndpointGroup{{AddressType: discoveryv1.AddressTypeIPv4, Ports: append([]registry.EndpointPort(nil), httpPort...),
				Endpoints: []registry.Endpoint{ready("10.9.0.1")}}}
			if tt.export != nil {
				tt.export(&ex)
			}
			if tt.endpoints != nil {
				tt.endpoints(&eps)
			}
			evil := e.publisher("evil")
			if err := evil.PutExport(e.ctx, webKey, ex.Spec); err != nil {
				t.Fatal(err)
			}
			if err := evil.PutEndpoints(e.ctx, webKey, eps.Groups); err != nil {
				t.Fatal(err)
			}
			poll.Until(t, settleTimeout, "the View to refuse evil's record", func() (bool, string) {
				return len(e.view.Rejected(webKey)) > 0, fmt.Sprint(e.view.Exports(webKey))
			})
			e.reconcile("web")

			si := e.serviceImport("web")
			if len(si.Status.Clusters) != 1 || si.Status.Clusters[0].Cluster != "east" {
				t.Errorf("clusters %v, want east only", si.Status.Clusters)
			}
			wantCondition(t, si, "Ready", metav1.ConditionTrue, "Ready")
			c := wantCondition(t, si, conditions.RecordsAccepted, metav1.ConditionFalse, conditions.ReasonRecordsRejected)
			if !strings.Contains(c.Message, "cluster evil") || !strings.Contains(c.Message, tt.want) {
				t.Errorf("condition message %q does not name cluster evil and %q", c.Message, tt.want)
			}
			slices := e.slices("web")
			if len(slices["evil"]) != 0 {
				t.Errorf("evil has %d EndpointSlices", len(slices["evil"]))
			}
			if got := addresses(slices["east"]); len(got) != 1 || got[0] != "10.1.0.1" {
				t.Errorf("east's addresses %v", got)
			}
			if ev := e.events(); len(ev) != 1 || !strings.Contains(ev[0], eventRecordsRejected) || !strings.Contains(ev[0], "cluster evil") {
				t.Errorf("events %v, want one %s naming cluster evil", ev, eventRecordsRejected)
			}
			e.steady("web")
			if ev := e.events(); len(ev) != 0 {
				t.Errorf("events without a change: %v", ev)
			}

			// evil mends its records: it is imported, the condition goes.
			e.publish([]registry.Export{goodExport}, goodEndpoints)
			e.reconcile("web")
			si = e.serviceImport("web")
			if c := condition(si, conditions.RecordsAccepted); c != nil {
				t.Errorf("RecordsAccepted still set: %+v", c)
			}
			if len(si.Status.Clusters) != 2 {
				t.Errorf("clusters %v, want east and evil", si.Status.Clusters)
			}
			if got := addresses(e.slices("web")["evil"]); len(got) != 1 || got[0] != "10.9.0.1" {
				t.Errorf("evil's addresses %v", got)
			}
		})
	}
}

// An export whose exported annotations carry a take-over's retirement is
// refused: copied onto the ServiceImport, they would have every importer
// delete the local Service they name (a date past), or send that Service's
// traffic to the import's endpoints (a date to come).
func TestExportedRetirementCannotReachALocalService(t *testing.T) {
	for _, tc := range []struct{ name, after string }{
		{"past: the Service deleted", "2000-01-01T00:00:00Z"},
		{"to come: its traffic sent to the import", time.Now().Add(time.Hour).UTC().Format(time.RFC3339)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			local := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "payments"},
				Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 443}}}}
			e := newEnv(t, namespace(testNS), local)
			x := export("west", registry.ClusterSetIP, v4, port("http", corev1.ProtocolTCP, 80))
			x.Spec.ExportedAnnotations = map[string]string{
				wellknown.AnnotationRetiring:    "payments",
				wellknown.AnnotationRetireAfter: tc.after,
			}
			west := e.publisher("west")
			if err := west.PutExport(e.ctx, webKey, x.Spec); err != nil {
				t.Fatal(err)
			}
			if err := west.PutEndpoints(e.ctx, webKey, []registry.EndpointGroup{group(discoveryv1.AddressTypeIPv4, []registry.EndpointPort{epPort("http", 8080)}, ready("10.2.0.1"))}); err != nil {
				t.Fatal(err)
			}
			poll.Until(t, settleTimeout, "the View to refuse west's export", func() (bool, string) {
				return len(e.view.Rejected(webKey)) > 0, fmt.Sprint(e.view.Exports(webKey))
			})
			e.reconcile("web")
			e.reconcile("web") // a later look
			if e.service("payments") == nil {
				t.Error("the local Service payments was deleted")
			}
			list := &discoveryv1.EndpointSliceList{}
			if err := e.api.List(e.ctx, list, client.InNamespace(testNS), client.MatchingLabels{discoveryv1.LabelServiceName: "payments"}); err != nil {
				t.Fatal(err)
			}
			if len(list.Items) > 0 {
				t.Errorf("%d EndpointSlices of the import are labelled for the local Service payments", len(list.Items))
			}
			si := &mcsv1beta1.ServiceImport{}
			if err := e.api.Get(e.ctx, client.ObjectKey{Namespace: testNS, Name: "web"}, si); !apierrors.IsNotFound(err) {
				t.Errorf("imported a refused export: %v, annotations %v", err, si.Annotations)
			}
		})
	}
}
