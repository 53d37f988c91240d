package clusterset

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
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
	if n := changes(); n != 0 {
		t.Fatalf("first read: %d changes of a Service, want 0 (it is announced as a Reachability change)", n)
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

// TestFirstReadNotified: the View announces, as one Reachability change,
// that it became usable (read in full and connected, in either order) or
// stopped being connected; its first full read announces no Service one by
// one, later full updates announce the Services that changed.
func TestFirstReadNotified(t *testing.T) {
	a := registry.ServiceKey{Namespace: "shop", Name: "a"}
	b := registry.ServiceKey{Namespace: "shop", Name: "b"}
	full := registry.Update{Full: true, Exports: []registry.Export{{Cluster: "east", Service: a, Spec: registry.ServiceSpec{Type: registry.ClusterSetIP}}}}
	withB := full
	withB.Exports = append(slices.Clone(full.Exports), registry.Export{Cluster: "east", Service: b, Spec: registry.ServiceSpec{Type: registry.ClusterSetIP}})
	subscribe := func(v *View) *[]string {
		var got []string
		v.Subscribe(func(c Change) {
			if c.Reachability {
				got = append(got, "reachability")
				return
			}
			got = append(got, c.Service.String())
		})
		return &got
	}
	tests := []struct {
		name  string
		steps func(v *View)
		want  []string
	}{
		{name: "read, then connected", steps: func(v *View) {
			v.OnUpdate(full)
			v.OnConnection(true, nil)
		}, want: []string{"reachability"}},
		{name: "connected, then read", steps: func(v *View) {
			v.OnConnection(true, nil)
			v.OnUpdate(full)
		}, want: []string{"reachability"}},
		{name: "read again, one Service new", steps: func(v *View) {
			v.OnConnection(true, nil)
			v.OnUpdate(full)
			v.OnUpdate(withB)
		}, want: []string{"reachability", "shop/b"}},
		{name: "an outage and the registry back", steps: func(v *View) {
			v.OnConnection(true, nil)
			v.OnUpdate(full)
			v.OnConnection(false, errors.New("down"))
			v.OnConnection(false, errors.New("still down"))
			v.OnUpdate(withB)
			v.OnConnection(true, nil)
		}, want: []string{"reachability", "reachability", "shop/b", "reachability"}},
		{name: "not read: no news", steps: func(v *View) {
			v.OnConnection(true, nil)
			v.OnConnection(false, errors.New("down"))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := NewView()
			got := subscribe(v)
			tt.steps(v)
			if d := cmp.Diff(tt.want, *got); d != "" {
				t.Errorf("changes (-want +got):\n%s", d)
			}
		})
	}
}

// TestHiddenChangesNotAnnounced: while a cluster's export of a Service is
// refused, its other records of it are kept but not shown, so their
// changes are not announced (each would cost every controller a reconcile
// that finds nothing new); the refusal's end is, and shows the latest.
func TestHiddenChangesNotAnnounced(t *testing.T) {
	key := registry.ServiceKey{Namespace: "shop", Name: "web"}
	eps := func(addr string) registry.Endpoints {
		return registry.Endpoints{Cluster: "evil", Service: key, Groups: []registry.EndpointGroup{{
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []registry.Endpoint{{Addresses: []string{addr}, Ready: true}},
		}}}
	}
	v := NewView()
	var changed int
	v.Subscribe(func(c Change) {
		if !c.Reachability {
			changed++
		}
	})
	v.OnUpdate(registry.Update{Full: true, Endpoints: []registry.Endpoints{eps("10.0.0.1")}, Rejected: []registry.Rejection{{
		Kind: registry.KindExport, Record: registry.RecordID{Cluster: "evil", Service: key}, Reason: registry.RejectUnreadable, Message: "bad json",
	}}})
	changed = 0
	v.OnUpdate(registry.Update{Endpoints: []registry.Endpoints{eps("10.0.0.2")}})
	v.OnUpdate(registry.Update{DeletedEndpoints: []registry.RecordID{{Cluster: "evil", Service: key}}})
	v.OnUpdate(registry.Update{Endpoints: []registry.Endpoints{eps("10.0.0.3")}})
	if changed != 0 || len(v.Endpoints(key)) != 0 {
		t.Errorf("hidden records changed: %d changes announced (want 0), endpoints shown %v", changed, v.Endpoints(key))
	}
	v.OnUpdate(registry.Update{Exports: []registry.Export{{Cluster: "evil", Service: key, Spec: registry.ServiceSpec{Type: registry.ClusterSetIP}}}})
	if got := v.Endpoints(key)["evil"]; changed != 1 || len(got.Groups) != 1 || got.Groups[0].Endpoints[0].Addresses[0] != "10.0.0.3" {
		t.Errorf("refusal ended: %d changes (want 1), endpoints %+v (want 10.0.0.3)", changed, got)
	}
}

// TestChangeTellsEndpointsOnly: a change of some clusters' endpoints alone
// names them; one that changes anything else of the Service names none.
func TestChangeTellsEndpointsOnly(t *testing.T) {
	key := registry.ServiceKey{Namespace: "shop", Name: "web"}
	eps := func(cluster, addr string) registry.Endpoints {
		return registry.Endpoints{Cluster: cluster, Service: key, Groups: []registry.EndpointGroup{{
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []registry.Endpoint{{Addresses: []string{addr}, Ready: true}},
		}}}
	}
	export := func(cluster string) registry.Export {
		return registry.Export{Cluster: cluster, Service: key, Spec: registry.ServiceSpec{Type: registry.ClusterSetIP}}
	}
	v := NewView()
	var got []Change
	v.Subscribe(func(c Change) {
		if !c.Reachability {
			slices.Sort(c.EndpointsOf)
			got = append(got, c)
		}
	})
	v.OnUpdate(registry.Update{Full: true, Exports: []registry.Export{export("east"), export("west")},
		Endpoints: []registry.Endpoints{eps("east", "10.0.0.1"), eps("west", "10.1.0.1")}})
	for _, tc := range []struct {
		name string
		u    registry.Update
		want []string
	}{
		{"one cluster's endpoints", registry.Update{Endpoints: []registry.Endpoints{eps("east", "10.0.0.2")}}, []string{"east"}},
		{"two clusters' endpoints", registry.Update{Endpoints: []registry.Endpoints{eps("west", "10.1.0.2")},
			DeletedEndpoints: []registry.RecordID{{Cluster: "east", Service: key}}}, []string{"east", "west"}},
		{"endpoints and an export", registry.Update{Endpoints: []registry.Endpoints{eps("east", "10.0.0.3")},
			Exports: []registry.Export{export("north")}}, nil},
		{"an export withdrawn", registry.Update{DeletedExports: []registry.RecordID{{Cluster: "north", Service: key}}}, nil},
		{"endpoints refused", registry.Update{Rejected: []registry.Rejection{{Kind: registry.KindEndpoints,
			Record: registry.RecordID{Cluster: "west", Service: key}, Reason: registry.RejectUnreadable, Message: "bad json"}}}, nil},
		// West's export shows again.
		{"the refused endpoints put right", registry.Update{Endpoints: []registry.Endpoints{eps("west", "10.1.0.3")}}, nil},
	} {
		got = nil
		v.OnUpdate(tc.u)
		want := []Change{{Service: key, EndpointsOf: tc.want}}
		if !cmp.Equal(got, want) {
			t.Errorf("%s: changes %+v, want %+v", tc.name, got, want)
		}
	}
}

// TestRejected: a cluster with a refused record of a Service (refused by the
// backend, or by the View's own checks) counts for nothing in that Service,
// while the other clusters' records of it keep counting; the refusal is
// reported once per new rejection, and ends with a good record or a
// deletion.
func TestRejected(t *testing.T) {
	key := registry.ServiceKey{Namespace: "shop", Name: "web"}
	spec := registry.ServiceSpec{Type: registry.ClusterSetIP}
	eps := func(cluster, addr string) registry.Endpoints {
		return registry.Endpoints{Cluster: cluster, Service: key, Groups: []registry.EndpointGroup{{
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []registry.Endpoint{{Addresses: []string{addr}, Ready: true}},
		}}}
	}
	v := NewView()
	var reported []registry.Rejection
	v.OnReject(func(r registry.Rejection) { reported = append(reported, r) })
	var changed int
	v.Subscribe(func(Change) { changed++ })
	clusters := func() []string {
		t.Helper()
		// Service reads the three at once, and agrees with each.
		byCluster := func(e registry.Export) string { return e.Cluster }
		svc := v.Service(key)
		if got, want := slices.Sorted(slices.Values(mapped(svc.Exports, byCluster))), slices.Sorted(slices.Values(mapped(v.Exports(key), byCluster))); !slices.Equal(got, want) {
			t.Errorf("Service's exports %v, Exports' %v", got, want)
		}
		if !reflect.DeepEqual(svc.Rejected, v.Rejected(key)) || !reflect.DeepEqual(svc.Endpoints, v.Endpoints(key)) {
			t.Errorf("Service %+v, Rejected %+v, Endpoints %+v", svc, v.Rejected(key), v.Endpoints(key))
		}
		var out []string
		for _, e := range v.Exports(key) {
			out = append(out, e.Cluster)
		}
		for c := range v.Endpoints(key) {
			out = append(out, "eps:"+c)
		}
		slices.Sort(out)
		return out
	}
	reasons := func() []string {
		var out []string
		for _, r := range v.Rejected(key) {
			out = append(out, r.Record.Cluster+"/"+string(r.Kind)+"/"+string(r.Reason))
		}
		return out
	}

	v.OnUpdate(registry.Update{Full: true,
		Exports:   []registry.Export{{Cluster: "good", Service: key, Spec: spec}, {Cluster: "evil", Service: key, Spec: spec}},
		Endpoints: []registry.Endpoints{eps("good", "10.0.0.1"), eps("evil", "127.0.0.1")},
	})
	if got, want := clusters(), []string{"eps:good", "good"}; !slices.Equal(got, want) {
		t.Errorf("counted %v, want %v", got, want)
	}
	if got, want := reasons(), []string{"evil/endpoints/invalidAddress"}; !slices.Equal(got, want) {
		t.Errorf("rejected %v, want %v", got, want)
	}
	if len(reported) != 1 {
		t.Errorf("%d rejections reported, want 1", len(reported))
	}
	if got := v.Keys(""); len(got) != 1 {
		t.Errorf("keys %v, want %s", got, key)
	}

	// The same again, as after a resync: nothing new to report or notify.
	changed = 0
	v.OnUpdate(registry.Update{Full: true,
		Exports:   []registry.Export{{Cluster: "good", Service: key, Spec: spec}, {Cluster: "evil", Service: key, Spec: spec}},
		Endpoints: []registry.Endpoints{eps("good", "10.0.0.1"), eps("evil", "127.0.0.1")},
	})
	if len(reported) != 1 || changed != 0 {
		t.Errorf("same state again: %d rejections reported (want 1), %d changes (want 0)", len(reported), changed)
	}

	// A backend's rejection replaces the good record it had delivered.
	v.OnUpdate(registry.Update{Rejected: []registry.Rejection{{
		Kind: registry.KindExport, Record: registry.RecordID{Cluster: "good", Service: key}, Reason: registry.RejectUnreadable, Message: "bad json",
	}}})
	if got := clusters(); len(got) != 0 {
		t.Errorf("counted %v, want none", got)
	}
	if got := v.Keys(""); len(got) != 0 {
		t.Errorf("keys %v, want none: every export is refused", got)
	}
	// Good records end the rejections.
	v.OnUpdate(registry.Update{
		Exports:   []registry.Export{{Cluster: "good", Service: key, Spec: spec}},
		Endpoints: []registry.Endpoints{eps("evil", "10.0.0.2")},
	})
	if got, want := clusters(), []string{"eps:evil", "eps:good", "evil", "good"}; !slices.Equal(got, want) {
		t.Errorf("counted %v, want %v", got, want)
	}
	if got := reasons(); len(got) != 0 {
		t.Errorf("rejected %v, want none", got)
	}
	// A deletion ends a rejection too.
	v.OnUpdate(registry.Update{Endpoints: []registry.Endpoints{eps("evil", "224.0.0.1")}})
	v.OnUpdate(registry.Update{DeletedEndpoints: []registry.RecordID{{Cluster: "evil", Service: key}}})
	if got, want := clusters(), []string{"eps:good", "evil", "good"}; !slices.Equal(got, want) {
		t.Errorf("counted %v, want %v", got, want)
	}
	if len(reported) != 3 {
		t.Errorf("%d rejections reported, want 3", len(reported))
	}
}

func mapped[T, U any](in []T, f func(T) U) []U {
	out := make([]U, len(in))
	for i, x := range in {
		out[i] = f(x)
	}
	return out
}

// TestKeysByNamespace: Keys(namespace), read from the namespace index,
// lists what a pass over every Service would (Keys("") of that namespace)
// after any sequence of full and incremental updates: exports added and
// deleted, records refused (export or endpoints) and refusals ended.
func TestKeysByNamespace(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	namespaces := []string{"a", "b", "c"}
	clusters := []string{"east", "west", "north"}
	spec := registry.ServiceSpec{Type: registry.ClusterSetIP}
	key := func() registry.ServiceKey {
		return registry.ServiceKey{Namespace: namespaces[rng.IntN(len(namespaces))], Name: fmt.Sprint("s", rng.IntN(4))}
	}
	id := func() registry.RecordID {
		return registry.RecordID{Cluster: clusters[rng.IntN(len(clusters))], Service: key()}
	}
	endpoints := func(id registry.RecordID) registry.Endpoints {
		return registry.Endpoints{Cluster: id.Cluster, Service: id.Service, Groups: []registry.EndpointGroup{{
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []registry.Endpoint{{Addresses: []string{"10.1.0.1"}, Ready: true}},
		}}}
	}
	random := func(full bool) registry.Update {
		u := registry.Update{Full: full}
		for range rng.IntN(6) {
			switch id := id(); rng.IntN(5) {
			case 0, 1:
				u.Exports = append(u.Exports, registry.Export{Cluster: id.Cluster, Service: id.Service, Spec: spec})
			case 2:
				u.Endpoints = append(u.Endpoints, endpoints(id))
			case 3:
				kind := []registry.RecordKind{registry.KindExport, registry.KindEndpoints}[rng.IntN(2)]
				u.Rejected = append(u.Rejected, registry.Rejection{Kind: kind, Record: id, Reason: registry.RejectUnreadable, Message: "bad json"})
			case 4:
				if !full {
					u.DeletedExports = append(u.DeletedExports, id)
					u.DeletedEndpoints = append(u.DeletedEndpoints, id)
				}
			}
		}
		return u
	}
	v := NewView()
	for i := range 2000 {
		v.OnUpdate(random(i%50 == 0))
		all := v.Keys("")
		for _, ns := range namespaces {
			want := slices.DeleteFunc(slices.Clone(all), func(k registry.ServiceKey) bool { return k.Namespace != ns })
			if got := v.Keys(ns); !slices.Equal(got, want) {
				t.Fatalf("update %d: Keys(%q) = %v, want %v", i, ns, got, want)
			}
		}
		for ns, names := range v.byNamespace {
			for k := range names {
				if k.Namespace != ns || len(v.exports[k]) == 0 {
					t.Fatalf("update %d: the index lists %v under %q with %d export records", i, k, ns, len(v.exports[k]))
				}
			}
		}
	}
}
