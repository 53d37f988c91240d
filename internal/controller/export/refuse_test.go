package export

import (
	"context"
	"fmt"
	"strings"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/memory"
)

// TestRefusedExport: an export whose records every importer would refuse
// is not written (what was exported is withdrawn), Ready=False says why
// with a Warning event, once; once the cause goes, it is exported again.
func TestRefusedExport(t *testing.T) {
	tests := []struct {
		name   string
		objs   func() []client.Object
		reason mcsv1beta1.ServiceExportConditionReason
		want   string
		// endpointsOnly: the endpoints alone are refused; the export
		// stands, with none of them.
		endpointsOnly bool
	}{
		{
			name: "more endpoints than the limit",
			objs: func() []client.Object {
				// Slices of 1,000, as the EndpointSlice controller makes them.
				var out []client.Object
				for s := range registry.MaxEndpoints/1000 + 1 {
					eps := make([]discoveryv1.Endpoint, 1000)
					for i := range eps {
						eps[i] = ep(fmt.Sprintf("10.%d.%d.%d", s, i/200, i%200+1), nil)
					}
					out = append(out, newSlice(fmt.Sprintf("web-%d", s), svcName, discoveryv1.AddressTypeIPv4, httpPort(), eps...))
				}
				return out
			},
			reason:        ReasonTooManyEndpoints,
			want:          "6001 endpoints, more than 5000",
			endpointsOnly: true,
		},
		{
			name: "an exported label key importers refuse",
			objs: func() []client.Object {
				return []client.Object{newServiceExport(func(se *mcsv1beta1.ServiceExport) {
					se.Spec.ExportedLabels = map[string]string{"not a key": "x"}
				})}
			},
			reason: ReasonInvalidRecord,
			want:   "exported label",
		},
		{
			name: "an exported annotation importers set themselves",
			objs: func() []client.Object {
				return []client.Object{newServiceExport(func(se *mcsv1beta1.ServiceExport) {
					se.Spec.ExportedAnnotations = map[string]string{"multicluster.mcsd.io/retiring-services": "payments"}
				})}
			},
			reason: ReasonInvalidRecord,
			want:   `exported annotation "multicluster.mcsd.io/retiring-services"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs := tt.objs()
			good := newSlice("web-good", svcName, discoveryv1.AddressTypeIPv4, httpPort(), ep("10.9.0.1", nil))
			// Exported first, as it was before the cause appeared.
			e := newEnv(t, newServiceExport(), newService(), good)
			e.mustReconcile()
			e.syncView()
			if _, ok := e.reg.export(webKey); !ok {
				t.Fatal("not exported to begin with")
			}
			e.setCause(objs, true)
			e.mustReconcile()
			se := e.serviceExport()
			c := assertCondition(t, se, readyType, metav1.ConditionFalse, string(tt.reason))
			if !strings.Contains(c.Message, tt.want) {
				t.Errorf("Ready message %q does not say %q", c.Message, tt.want)
			}
			assertCondition(t, se, validType, metav1.ConditionTrue, string(mcsv1beta1.ServiceExportReasonValid))
			_, exported := e.reg.export(webKey)
			switch {
			case tt.endpointsOnly && !exported:
				t.Error("export withdrawn for its endpoints")
			case tt.endpointsOnly && len(e.reg.groups(webKey)) > 0:
				t.Errorf("refused endpoints kept in the registry: %v", e.reg.groups(webKey))
			case !tt.endpointsOnly && exported:
				t.Error("export still in the registry")
			}
			if ev := e.events(); len(ev) != 1 || !strings.HasPrefix(ev[0], "Warning "+EventReasonRefused) {
				t.Errorf("events = %q, want one %s warning", ev, EventReasonRefused)
			}
			e.syncView()
			e.mustReconcile()
			if ev := e.events(); len(ev) != 0 {
				t.Errorf("events without a change: %q", ev)
			}

			// The cause goes: exported again.
			e.setCause(objs, false)
			e.mustReconcile()
			assertCondition(t, e.serviceExport(), readyType, metav1.ConditionTrue, string(mcsv1beta1.ServiceExportReasonExported))
			if _, ok := e.reg.export(webKey); !ok || len(e.reg.groups(webKey)) == 0 {
				t.Error("not exported again, with its endpoints")
			}
		})
	}
}

// setCause puts the objects of a cause in place (on) or takes them away: a
// ServiceExport's spec becomes the ServiceExport's, or empty again; other
// objects are created, or deleted.
func (e *env) setCause(objs []client.Object, on bool) {
	e.t.Helper()
	ctx := context.Background()
	for _, o := range objs {
		var err error
		if se, ok := o.(*mcsv1beta1.ServiceExport); ok {
			cur := e.serviceExport()
			cur.Spec = mcsv1beta1.ServiceExportSpec{}
			if on {
				cur.Spec = se.Spec
			}
			err = e.c.Update(ctx, cur)
		} else if on {
			err = e.c.Create(ctx, o)
		} else {
			err = e.c.Delete(ctx, o)
		}
		if err != nil {
			e.t.Fatal(err)
		}
	}
}

// TestRefusedEndpointsKeepPrecedence: a Service whose endpoints every
// importer would refuse for a while (a link-local address) keeps its
// export in the registry, so that, the cause gone, it is still older than
// the exports made meanwhile, and the import keeps its type.
func TestRefusedEndpointsKeepPrecedence(t *testing.T) {
	e := newEnv(t, newServiceExport(), newService(),
		newSlice("web-a", svcName, discoveryv1.AddressTypeIPv4, httpPort(), ep("10.1.0.1", nil)))
	e.mustReconcile()
	other, err := e.reg.store.Open(memory.Options{Identity: registry.Identity{ClusterSet: clusterSet, Cluster: otherID}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	if err := other.Publish(context.Background(), webKey, registry.ServiceSpec{Type: registry.Headless}, nil); err != nil {
		t.Fatal(err)
	}
	order := func(cluster string) int64 {
		for _, x := range e.reg.stored().Exports {
			if x.Cluster == cluster {
				return x.Order
			}
		}
		t.Fatalf("no export of %s", cluster)
		return 0
	}
	before := order(thisID)
	if before > order(otherID) {
		t.Fatal("this cluster's export is not the older to begin with")
	}

	bad := []client.Object{newSlice("web-b", svcName, discoveryv1.AddressTypeIPv4, httpPort(), ep("169.254.1.1", nil))}
	e.setCause(bad, true)
	e.mustReconcile()
	assertCondition(t, e.serviceExport(), readyType, metav1.ConditionFalse, string(ReasonInvalidRecord))
	e.setCause(bad, false)
	e.mustReconcile()
	assertCondition(t, e.serviceExport(), readyType, metav1.ConditionTrue, string(mcsv1beta1.ServiceExportReasonExported))
	if after := order(thisID); after != before {
		t.Errorf("this cluster's export went from order %d to %d (the other's is %d): the import's type follows the younger export", before, after, order(otherID))
	}
}

// TestEndpointsTooLargeForTheBackendWithheld: a backend that refuses the
// endpoints record (too large for it) while the export alone is taken:
// the export stands, with no endpoints, and Ready=False says why.
func TestEndpointsTooLargeForTheBackendWithheld(t *testing.T) {
	e := newEnv(t, newServiceExport(), newService(),
		newSlice("web-a", svcName, discoveryv1.AddressTypeIPv4, httpPort(), ep("10.1.0.1", nil), ep("10.1.0.2", nil), ep("10.1.0.3", nil)))
	e.reg.setLargest(2)
	e.mustReconcile()
	c := assertCondition(t, e.serviceExport(), readyType, metav1.ConditionFalse, string(ReasonRecordTooLarge))
	if !strings.Contains(c.Message, "larger than this backend takes") {
		t.Errorf("Ready message %q does not say why", c.Message)
	}
	if _, ok := e.reg.export(webKey); !ok {
		t.Error("export withdrawn for its endpoints")
	}
	if g := e.reg.groups(webKey); len(g) > 0 {
		t.Errorf("endpoints in the registry: %v", g)
	}

	e.reg.setLargest(0)
	e.mustReconcile()
	assertCondition(t, e.serviceExport(), readyType, metav1.ConditionTrue, string(mcsv1beta1.ServiceExportReasonExported))
	if g := e.reg.groups(webKey); len(g) != 1 || len(g[0].Endpoints) != 3 {
		t.Errorf("endpoints in the registry: %v, want the three", g)
	}
}
