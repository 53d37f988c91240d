package clusterset

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

// TestEndpointsStamp: a record that differs only in its Updated stamp is a
// change, so that the View holds the stamp its content was published with.
func TestEndpointsStamp(t *testing.T) {
	key := registry.ServiceKey{Namespace: "shop", Name: "web"}
	at := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	eps := registry.Endpoints{Cluster: "east", Service: key, Updated: at, Groups: []registry.EndpointGroup{{
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []registry.Endpoint{{Addresses: []string{"10.1.0.1"}, Ready: true}},
	}}}
	v := NewView()
	var n int
	v.Subscribe(func(c Change) {
		if !c.Reachability {
			n++
		}
	})
	changes := func() int {
		defer func() { n = 0 }()
		return n
	}

	v.OnUpdate(registry.Update{Full: true, Endpoints: []registry.Endpoints{eps}})
	if n := changes(); n != 1 {
		t.Fatalf("first read: %d changes, want 1", n)
	}
	// The same instant in another location is no change.
	same := eps
	same.Updated = at.In(time.FixedZone("east", 3600))
	v.OnUpdate(registry.Update{Full: true, Endpoints: []registry.Endpoints{same}})
	v.OnUpdate(registry.Update{Endpoints: []registry.Endpoints{same}})
	if n := changes(); n != 0 {
		t.Errorf("same record again: %d changes, want 0", n)
	}
	restamped := eps
	restamped.Updated = at.Add(time.Second)
	v.OnUpdate(registry.Update{Endpoints: []registry.Endpoints{restamped}})
	if n := changes(); n != 1 {
		t.Errorf("new stamp: %d changes, want 1", n)
	}
	if got := v.Endpoints(key)["east"].Updated; !got.Equal(restamped.Updated) {
		t.Errorf("View holds stamp %v, want %v", got, restamped.Updated)
	}
}

// TestFirstReadNotified: the first full update is announced as a
// Reachability change, after the Services it brought; later full updates
// announce only the Services that changed.
func TestFirstReadNotified(t *testing.T) {
	a := registry.ServiceKey{Namespace: "shop", Name: "a"}
	v := NewView()
	var got []string
	defer v.Subscribe(func(c Change) {
		if c.Reachability {
			got = append(got, "reachability")
			return
		}
		got = append(got, c.Service.String())
	})()
	full := registry.Update{Full: true, Exports: []registry.Export{{Cluster: "east", Service: a}}}
	v.OnUpdate(full)
	v.OnUpdate(full)
	if d := cmp.Diff([]string{"shop/a", "reachability"}, got); d != "" {
		t.Errorf("changes (-want +got):\n%s", d)
	}
}
