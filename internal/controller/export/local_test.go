package export

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/clusterset"
	"github.com/mcsd-io/mcsd/pkg/registry"
)

// TestLocalFollowsPublishedEndpoints: the export controller hands this
// cluster's imports (clusterset.Local) the endpoints it publishes, also
// when the registry fails the write, none when it withholds them, and
// forgets them when the Service is no longer exported.
func TestLocalFollowsPublishedEndpoints(t *testing.T) {
	e := newEnv(t, newServiceExport(), newService(),
		newSlice("web-a", svcName, discoveryv1.AddressTypeIPv4, httpPort(), ep("10.1.0.1", nil), ep("10.1.0.2", ptr.To(false))))
	local := clusterset.NewLocal()
	e.r.Local = local
	setEndpoints := func(eps ...discoveryv1.Endpoint) {
		t.Helper()
		sl := &discoveryv1.EndpointSlice{}
		if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "web-a"}, sl); err != nil {
			t.Fatal(err)
		}
		sl.Endpoints = eps
		if err := e.c.Update(context.Background(), sl); err != nil {
			t.Fatal(err)
		}
	}
	var spec registry.ServiceSpec // as published
	// told counts Local's changes.
	var told int
	if err := local.Source(func(context.Context, registry.ServiceKey) []reconcile.Request {
		told++
		return nil
	}).Start(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	addresses := func() []string {
		t.Helper()
		rec, ok := local.Endpoints(thisID, webKey, spec)
		if !ok {
			return nil
		}
		out := []string{}
		for _, g := range rec.Groups {
			for _, ep := range g.Endpoints {
				out = append(out, ep.Addresses[0])
			}
		}
		return out
	}

	e.mustReconcile()
	spec, _ = e.reg.export(webKey)
	if d := cmp.Diff([]string{"10.1.0.1", "10.1.0.2"}, addresses()); d != "" {
		t.Errorf("Local after publishing (-want +got):\n%s", d)
	}
	if rec, _ := local.Endpoints(thisID, webKey, spec); !cmp.Equal(e.reg.groups(webKey), rec.Groups) {
		d := cmp.Diff(e.reg.groups(webKey), rec.Groups)
		t.Errorf("Local differs from what was published (-registry +Local):\n%s", d)
	}

	// The registry fails: Local has the new endpoints all the same.
	e.reg.setErr(errors.New("etcd: context deadline exceeded"))
	setEndpoints(ep("10.1.0.3", nil))
	if err := e.reconcile(); err == nil {
		t.Fatal("reconcile succeeded with the registry failing")
	}
	if d := cmp.Diff([]string{"10.1.0.3"}, addresses()); d != "" {
		t.Errorf("Local while the registry fails (-want +got):\n%s", d)
	}
	e.reg.setErr(nil)
	e.mustReconcile()

	// Too many endpoints for the registry: withheld, and none here either.
	e.reg.setLargest(1)
	setEndpoints(ep("10.1.0.3", nil), ep("10.1.0.4", nil))
	e.mustReconcile()
	if got, ok := local.Endpoints(thisID, webKey, spec); !ok || len(got.Groups) != 0 {
		t.Errorf("Local with the endpoints withheld: %v (held: %t), want no endpoints", got.Groups, ok)
	}
	// Looked at again, unchanged: Local does not flap through the refused
	// endpoints (each flap would have this cluster's imports written twice).
	told = 0
	e.mustReconcile()
	if told != 0 {
		t.Errorf("withheld endpoints reconciled again: Local changed %d times, want 0", told)
	}
	e.reg.setLargest(0)

	// The View reports the registry unreachable: no write is tried (it
	// would wait out the request timeout), Local follows, Ready says why.
	e.view.OnConnection(false, errors.New("etcd: context deadline exceeded"))
	e.reg.setErr(errors.New("the registry was called"))
	setEndpoints(ep("10.1.0.9", nil))
	e.mustReconcile()
	if d := cmp.Diff([]string{"10.1.0.9"}, addresses()); d != "" {
		t.Errorf("Local with the registry unreachable (-want +got):\n%s", d)
	}
	if c := assertCondition(t, e.serviceExport(), readyType, metav1.ConditionFalse, string(mcsv1beta1.ServiceExportReasonFailed)); !strings.Contains(c.Message, "unreachable") {
		t.Errorf("Ready message %q does not say the registry is unreachable", c.Message)
	}
	e.reg.setErr(nil)
	e.view.OnConnection(true, nil)
	e.mustReconcile()
	if g := e.reg.groups(webKey); len(g) != 1 || len(g[0].Endpoints) != 1 || g[0].Endpoints[0].Addresses[0] != "10.1.0.9" {
		t.Errorf("registry after it came back: %v, want 10.1.0.9", g)
	}
	assertCondition(t, e.serviceExport(), readyType, metav1.ConditionTrue, string(mcsv1beta1.ServiceExportReasonExported))

	// Unexported: kept while the registry fails the withdrawal (the View
	// still shows the export, with endpoints no fresher than these), then
	// forgotten.
	if err := e.c.Delete(context.Background(), e.serviceExport()); err != nil {
		t.Fatal(err)
	}
	e.reg.setErr(errors.New("etcd: context deadline exceeded"))
	if err := e.reconcile(); err == nil {
		t.Fatal("withdrawal succeeded with the registry failing")
	}
	if d := cmp.Diff([]string{"10.1.0.9"}, addresses()); d != "" {
		t.Errorf("Local while the withdrawal waits for the registry (-want +got):\n%s", d)
	}
	e.reg.setErr(nil)
	e.mustReconcile()
	if _, ok := local.Endpoints(thisID, webKey, spec); ok {
		t.Error("Local still holds the endpoints of a Service no longer exported")
	}
}
