package imports

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcsd-io/mcsd/internal/clusterset"
	"github.com/mcsd-io/mcsd/internal/conditions"
	"github.com/mcsd-io/mcsd/pkg/registry"
)

// sliceAddresses returns the addresses of cluster's slices of web, ready
// ones as "addr", others as "addr (not ready)".
func (e *env) sliceAddresses(cluster string) []string {
	e.t.Helper()
	var out []string
	for _, s := range e.slices("web")[cluster] {
		for _, ep := range s.Endpoints {
			a := ep.Addresses[0]
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				a += " (not ready)"
			}
			out = append(out, a)
		}
	}
	slices.Sort(out)
	return out
}

// TestOwnEndpointsFromLocal: this cluster's part of an import follows its
// own endpoints as its export controller builds them (Local), before the
// registry has them and while it cannot be read; the other clusters' parts,
// the ServiceImport and the derived Service stay as the registry last said.
func TestOwnEndpointsFromLocal(t *testing.T) {
	e := built(t)
	e.r.Local = clusterset.NewLocal()
	ports := []registry.EndpointPort{epPort("http", 8080), epPort("metrics", 9091)}
	eastSlices := func() []string {
		var out []string
		for _, s := range e.slices("web")["east"] {
			out = append(out, s.Name)
		}
		return out
	}
	updatesOfEast := func(w []string) (n int, others []string) {
		names := eastSlices()
		for _, x := range w {
			if f := strings.Fields(x); f[0] == "update" && f[1] == "*v1.EndpointSlice" && slices.Contains(names, f[2]) {
				n++
			} else {
				others = append(others, x)
			}
		}
		return n, others
	}
	westBefore := e.slices("web")["west"]
	var east registry.ServiceSpec // east's export as the registry holds it
	for _, x := range e.view.Exports(webKey) {
		if x.Cluster == "east" {
			east = x.Spec
		}
	}

	// The same endpoints as the registry's: nothing to write.
	e.r.Local.Set(webKey, east, []registry.EndpointGroup{group(discoveryv1.AddressTypeIPv4, ports,
		ready("10.1.0.1"), registry.Endpoint{Addresses: []string{"10.1.0.2"}, Terminating: true, NodeName: "n1", Zone: "z1"})})
	e.steady("web")

	// 10.1.0.1 turns not ready and 10.1.0.3 comes, here: east's slice
	// follows before the registry has heard of it.
	e.r.Local.Set(webKey, east, []registry.EndpointGroup{group(discoveryv1.AddressTypeIPv4, ports,
		registry.Endpoint{Addresses: []string{"10.1.0.1"}}, ready("10.1.0.3"))})
	n, others := updatesOfEast(e.reconcile("web"))
	if n != 1 || len(others) != 0 {
		t.Errorf("writes: %d updates of east's slice (want 1), and %v (want none)", n, others)
	}
	if d := cmp.Diff([]string{"10.1.0.1 (not ready)", "10.1.0.3"}, e.sliceAddresses("east")); d != "" {
		t.Errorf("east's slice (-want +got):\n%s", d)
	}
	e.steady("web")

	// Endpoints built for another spec of east's export (a port renamed,
	// not yet in the registry): the registry's endpoints stay.
	renamed := east
	renamed.Ports = slices.Clone(east.Ports)
	renamed.Ports[0].Name = "web"
	e.r.Local.Set(webKey, renamed, []registry.EndpointGroup{group(discoveryv1.AddressTypeIPv4, ports, ready("10.1.0.7"))})
	e.reconcile("web")
	if d := cmp.Diff([]string{"10.1.0.1", "10.1.0.2 (not ready)"}, e.sliceAddresses("east")); d != "" {
		t.Errorf("east's slice with Local built for another spec (-want +got):\n%s", d)
	}
	e.r.Local.Set(webKey, east, []registry.EndpointGroup{group(discoveryv1.AddressTypeIPv4, ports,
		registry.Endpoint{Addresses: []string{"10.1.0.1"}}, ready("10.1.0.3"))})
	e.reconcile("web")
	e.steady("web")

	// The registry goes: east's own endpoints still reach its import.
	e.disconnect(errors.New("etcd: context deadline exceeded"))
	e.r.Local.Set(webKey, east, []registry.EndpointGroup{group(discoveryv1.AddressTypeIPv4, ports, ready("10.1.0.3"), ready("10.1.0.4"))})
	n, others = updatesOfEast(e.reconcile("web"))
	if d := cmp.Diff([]string{"patch/status *v1beta1.ServiceImport web"}, others); n != 1 || d != "" {
		t.Errorf("writes while disconnected: %d updates of east's slice (want 1), others (-want +got):\n%s", n, d)
	}
	if d := cmp.Diff([]string{"10.1.0.3", "10.1.0.4"}, e.sliceAddresses("east")); d != "" {
		t.Errorf("east's slice while disconnected (-want +got):\n%s", d)
	}
	if d := cmp.Diff(westBefore, e.slices("web")["west"]); d != "" {
		t.Errorf("west's slices changed while disconnected (-before +after):\n%s", d)
	}
	e.intact()
	c := wantCondition(t, e.serviceImport("web"), conditions.RegistryReachable, metav1.ConditionFalse, conditions.ReasonRegistryUnreachable)
	if !strings.Contains(c.Message, "this cluster's own endpoints") {
		t.Errorf("message %q does not say that this cluster's endpoints are kept current", c.Message)
	}
	e.steady("web")

	// A Service this cluster withdrew while disconnected: its slices stay
	// as they are, no older than the registry's last word.
	e.r.Local.Delete(webKey)
	e.steady("web")
	if d := cmp.Diff([]string{"10.1.0.3", "10.1.0.4"}, e.sliceAddresses("east")); d != "" {
		t.Errorf("east's slice after Local forgot web (-want +got):\n%s", d)
	}

	// Back: Local still comes before the registry's record of east (whose
	// controller does not publish in this test).
	e.r.Local.Set(webKey, east, []registry.EndpointGroup{group(discoveryv1.AddressTypeIPv4, ports, ready("10.1.0.5"))})
	e.reconnect()
	n, others = updatesOfEast(e.reconcile("web"))
	if d := cmp.Diff([]string{"patch/status *v1beta1.ServiceImport web"}, others); n != 1 || d != "" {
		t.Errorf("writes after reconnecting: %d updates of east's slice (want 1), others (-want +got):\n%s", n, d)
	}
	if d := cmp.Diff([]string{"10.1.0.5"}, e.sliceAddresses("east")); d != "" {
		t.Errorf("east's slice after reconnecting (-want +got):\n%s", d)
	}
	e.steady("web")
}
