package topology

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

func ep(addr, zone, node string, ready bool) registry.Endpoint {
	return registry.Endpoint{Addresses: []string{addr}, Zone: zone, NodeName: node, Ready: ready, Serving: ready}
}

var (
	v4http = Port{AddressType: discoveryv1.AddressTypeIPv4, Name: "http", Protocol: corev1.ProtocolTCP}
	v6http = Port{AddressType: discoveryv1.AddressTypeIPv6, Name: "http", Protocol: corev1.ProtocolTCP}
	v4adm  = Port{AddressType: discoveryv1.AddressTypeIPv4, Name: "admin", Protocol: corev1.ProtocolTCP}
)

// withGroups is in with its local cluster's endpoints as one group of the
// IPv4 port http, unless it has groups of its own.
func withGroups(in Input) Input {
	if in.LocalGroups == nil && in.LocalCluster != "" {
		in.LocalGroups = []Group{{Ports: []Port{v4http}, Endpoints: in.Endpoints[in.LocalCluster]}}
	}
	return in
}

// portsOf returns the Ports of the local group that holds e.
func portsOf(in Input, e registry.Endpoint) []Port {
	for _, g := range in.LocalGroups {
		if slices.ContainsFunc(g.Endpoints, func(x registry.Endpoint) bool { return x.Addresses[0] == e.Addresses[0] }) {
			return g.Ports
		}
	}
	return nil
}

// hintsOf renders the hints of every endpoint as "zones|nodes", by address.
func hintsOf(h Hints, in Input) map[string]string {
	out := map[string]string{}
	for c, list := range in.Endpoints {
		for _, e := range list {
			var ports []Port
			if c == in.LocalCluster {
				ports = portsOf(in, e)
			}
			sets := h.PortSets(c, ports)
			if len(sets) == 1 {
				out[e.Addresses[0]] = render(h.For(c, ports, e))
				continue
			}
			for _, set := range sets {
				var sub []Port
				var names []string
				for _, i := range set {
					sub = append(sub, ports[i])
					names = append(names, ports[i].Name)
				}
				out[e.Addresses[0]+" "+strings.Join(names, ",")] = render(h.For(c, sub, e))
			}
		}
	}
	return out
}

// render renders hints as "zones|nodes", "-" for none.
func render(hh *discoveryv1.EndpointHints) string {
	if hh == nil {
		return "-"
	}
	var z, n []string
	for _, f := range hh.ForZones {
		z = append(z, f.Name)
	}
	for _, f := range hh.ForNodes {
		n = append(n, f.Name)
	}
	return strings.Join(z, ",") + "|" + strings.Join(n, ",")
}

func TestPlan(t *testing.T) {
	// c2 imports; zones a and b are shared by every cluster.
	eps := map[string][]registry.Endpoint{
		"c1": {ep("10.1.0.1", "a", "n1", true), ep("10.1.0.2", "b", "n2", true)},
		"c2": {ep("10.2.0.1", "a", "c2-n0", true), ep("10.2.0.2", "b", "c2-n1", true)},
		"c3": {ep("10.3.0.1", "a", "n1", true), ep("10.3.0.2", "b", "n2", false)},
	}
	c2aDown := map[string][]registry.Endpoint{
		"c1": eps["c1"],
		"c2": {ep("10.2.0.1", "a", "c2-n0", false), ep("10.2.0.2", "b", "c2-n1", true)},
	}
	dual := map[string][]registry.Endpoint{
		"c1": {ep("10.1.0.1", "a", "n1", true)},
		"c2": {ep("10.2.0.1", "a", "c2-n0", true), ep("10.2.0.2", "b", "c2-n1", true), ep("fd00::2:1", "a", "c2-n0", false), ep("fd00::2:2", "b", "c2-n1", true)},
	}
	noZone := map[string][]registry.Endpoint{
		"c1": {ep("10.1.0.1", "", "n1", true), ep("10.1.0.2", "", "n1", false)},
		"c2": eps["c2"],
	}
	el := Elsewhere
	tests := []struct {
		name       string
		in         Input
		want       map[string]string // address -> "zones|nodes", "-" for none
		wantReason string            // "" for no condition
		wantStatus metav1.ConditionStatus
		wantMsg    string
	}{{
		name: "nothing asked: no hints, no condition",
		in:   Input{Endpoints: eps},
		want: map[string]string{"10.1.0.1": "-", "10.1.0.2": "-", "10.2.0.1": "-", "10.2.0.2": "-", "10.3.0.1": "-", "10.3.0.2": "-"},
	}, {
		name:       "PreferSameZone: each endpoint its own zone, every cluster",
		in:         Input{TrafficDistribution: "PreferSameZone", Endpoints: eps},
		want:       map[string]string{"10.1.0.1": "a|", "10.1.0.2": "b|", "10.2.0.1": "a|", "10.2.0.2": "b|", "10.3.0.1": "a|", "10.3.0.2": "b|"},
		wantReason: ReasonHinted, wantStatus: metav1.ConditionTrue, wantMsg: "in the client's zone",
	}, {
		name:       "PreferClose is PreferSameZone",
		in:         Input{TrafficDistribution: "PreferClose", Endpoints: eps},
		want:       map[string]string{"10.1.0.1": "a|", "10.1.0.2": "b|", "10.2.0.1": "a|", "10.2.0.2": "b|", "10.3.0.1": "a|", "10.3.0.2": "b|"},
		wantReason: ReasonHinted, wantStatus: metav1.ConditionTrue,
	}, {
		name:       "a ready endpoint without a zone: no hints at all, and the condition names it",
		in:         Input{TrafficDistribution: "PreferSameZone", Endpoints: noZone},
		want:       map[string]string{"10.1.0.1": "-", "10.1.0.2": "-", "10.2.0.1": "-", "10.2.0.2": "-"},
		wantReason: ReasonEndpointsWithoutZone, wantStatus: metav1.ConditionFalse, wantMsg: "without a zone in cluster c1:",
	}, {
		name: "PreferSameNode: node hints for this cluster's endpoints, Elsewhere for the others",
		in:   Input{TrafficDistribution: "PreferSameNode", LocalCluster: "c2", Endpoints: eps},
		want: map[string]string{"10.1.0.1": "a|" + el, "10.1.0.2": "b|" + el, "10.2.0.1": "a|c2-n0", "10.2.0.2": "b|c2-n1",
			"10.3.0.1": "a|" + el, "10.3.0.2": "b|" + el},
		wantReason: ReasonHinted, wantStatus: metav1.ConditionTrue, wantMsg: "on the client's node",
	}, {
		name: "PreferSameNode with an endpoint of this cluster without a node: zone hints alone, and the condition says why",
		in: Input{TrafficDistribution: "PreferSameNode", LocalCluster: "c2", Endpoints: map[string][]registry.Endpoint{
			"c1": eps["c1"], "c2": {ep("10.2.0.1", "a", "c2-n0", true), ep("10.2.0.2", "b", "", true)}}},
		want:       map[string]string{"10.1.0.1": "a|", "10.1.0.2": "b|", "10.2.0.1": "a|", "10.2.0.2": "b|"},
		wantReason: ReasonEndpointsWithoutNode, wantStatus: metav1.ConditionFalse, wantMsg: "without a node: no node hints",
	}, {
		name: "PreferSameCluster: this cluster's endpoints serve its zones, the others none",
		in:   Input{Preference: PreferSameCluster, LocalCluster: "c2", LocalZones: []string{"b", "a", "a"}, Endpoints: eps},
		want: map[string]string{"10.1.0.1": el + "|", "10.1.0.2": el + "|", "10.2.0.1": "a,b|", "10.2.0.2": "a,b|",
			"10.3.0.1": el + "|", "10.3.0.2": el + "|"},
		wantReason: ReasonHinted, wantStatus: metav1.ConditionTrue, wantMsg: "to this cluster's endpoints",
	}, {
		name:       "PreferSameCluster does not need endpoint zones",
		in:         Input{Preference: PreferSameCluster, LocalCluster: "c2", LocalZones: []string{"a", "b"}, Endpoints: noZone},
		want:       map[string]string{"10.1.0.1": el + "|", "10.1.0.2": el + "|", "10.2.0.1": "a,b|", "10.2.0.2": "a,b|"},
		wantReason: ReasonHinted, wantStatus: metav1.ConditionTrue,
	}, {
		name: "same cluster and zone: own zone, and a zone without a ready local endpoint spills to the ready ones",
		in: Input{TrafficDistribution: "PreferSameZone", Preference: PreferSameCluster, LocalCluster: "c2",
			LocalZones: []string{"a", "b", "c"}, Endpoints: c2aDown},
		want:       map[string]string{"10.1.0.1": el + "|", "10.1.0.2": el + "|", "10.2.0.1": "a|", "10.2.0.2": "a,b,c|"},
		wantReason: ReasonHinted, wantStatus: metav1.ConditionTrue, wantMsg: "to this cluster's endpoints while any is ready, then to endpoints in the client's zone",
	}, {
		// Other clusters' endpoints are hinted Elsewhere: their zones
		// do not matter.
		name: "same cluster and zone: another cluster's endpoints without a zone keep this cluster's zone hints",
		in: Input{TrafficDistribution: "PreferSameZone", Preference: PreferSameCluster, LocalCluster: "c2",
			LocalZones: []string{"a", "b"}, Endpoints: noZone},
		want:       map[string]string{"10.1.0.1": el + "|", "10.1.0.2": el + "|", "10.2.0.1": "a|", "10.2.0.2": "b|"},
		wantReason: ReasonHinted, wantStatus: metav1.ConditionTrue, wantMsg: "then to endpoints in the client's zone",
	}, {
		name: "same cluster and zone: this cluster's endpoints without a zone turn zone hints off",
		in: Input{TrafficDistribution: "PreferSameZone", Preference: PreferSameCluster, LocalCluster: "c1",
			LocalZones: []string{"a", "b"}, Endpoints: noZone},
		want:       map[string]string{"10.1.0.1": "a,b|", "10.1.0.2": "a,b|", "10.2.0.1": el + "|", "10.2.0.2": el + "|"},
		wantReason: ReasonEndpointsWithoutZone, wantStatus: metav1.ConditionFalse, wantMsg: "without a zone in cluster c1:",
	}, {
		// kube-proxy picks per IP family: zone a has a ready IPv4
		// endpoint here but no IPv6 one, so for IPv6 it spills to b's.
		name: "same cluster and zone: a zone spills per IP family",
		in: Input{TrafficDistribution: "PreferSameZone", Preference: PreferSameCluster, LocalCluster: "c2", LocalZones: []string{"a", "b"},
			Endpoints: dual, LocalGroups: []Group{
				{Ports: []Port{v4http}, Endpoints: dual["c2"][:2]},
				{Ports: []Port{v6http}, Endpoints: dual["c2"][2:]},
			}},
		want:       map[string]string{"10.1.0.1": el + "|", "10.2.0.1": "a|", "10.2.0.2": "b|", "fd00::2:1": "a|", "fd00::2:2": "a,b|"},
		wantReason: ReasonHinted, wantStatus: metav1.ConditionTrue,
	}, {
		// and per port: a rollout adds admin, which only b's endpoint
		// serves so far; it serves zone a for admin alone, in slices of
		// their own (PortSets).
		name: "same cluster and zone: a zone spills per port",
		in: Input{TrafficDistribution: "PreferSameZone", Preference: PreferSameCluster, LocalCluster: "c2", LocalZones: []string{"a", "b"},
			Endpoints: eps, LocalGroups: []Group{
				{Ports: []Port{v4http}, Endpoints: eps["c2"][:1]},
				{Ports: []Port{v4http, v4adm}, Endpoints: eps["c2"][1:]},
			}},
		want: map[string]string{"10.1.0.1": el + "|", "10.1.0.2": el + "|", "10.2.0.1": "a|", "10.2.0.2 http": "b|", "10.2.0.2 admin": "a,b|",
			"10.3.0.1": el + "|", "10.3.0.2": el + "|"},
		wantReason: ReasonHinted, wantStatus: metav1.ConditionTrue,
	}, {
		name:       "PreferSameCluster on nodes without zones: no hints",
		in:         Input{Preference: PreferSameCluster, LocalCluster: "c2", Endpoints: eps},
		want:       map[string]string{"10.1.0.1": "-", "10.1.0.2": "-", "10.2.0.1": "-", "10.2.0.2": "-", "10.3.0.1": "-", "10.3.0.2": "-"},
		wantReason: ReasonNodesWithoutZone, wantStatus: metav1.ConditionFalse, wantMsg: "nodes have 0 zones",
	}, {
		name: "more zones than a hint may name: no same-cluster hints",
		in: Input{Preference: PreferSameCluster, LocalCluster: "c2", LocalZones: []string{"z1", "z2", "z3", "z4", "z5", "z6", "z7", "z8", "z9"},
			Endpoints: eps},
		want:       map[string]string{"10.1.0.1": "-", "10.1.0.2": "-", "10.2.0.1": "-", "10.2.0.2": "-", "10.3.0.1": "-", "10.3.0.2": "-"},
		wantReason: ReasonTooManyZones, wantStatus: metav1.ConditionFalse, wantMsg: "nodes have 9 zones",
	}, {
		name:       "unknown preference: said so, zone hints still written",
		in:         Input{TrafficDistribution: "PreferSameZone", Preference: "Nearest", LocalCluster: "c2", Endpoints: eps},
		want:       map[string]string{"10.1.0.1": "a|", "10.1.0.2": "b|", "10.2.0.1": "a|", "10.2.0.2": "b|", "10.3.0.1": "a|", "10.3.0.2": "b|"},
		wantReason: ReasonUnknownPreference, wantStatus: metav1.ConditionFalse, wantMsg: `"Nearest" is not known`,
	}, {
		name:       "unknown trafficDistribution: said so, no hints",
		in:         Input{TrafficDistribution: "PreferSameRegion", Endpoints: eps},
		want:       map[string]string{"10.1.0.1": "-", "10.1.0.2": "-", "10.2.0.1": "-", "10.2.0.2": "-", "10.3.0.1": "-", "10.3.0.2": "-"},
		wantReason: ReasonUnknownDistribution, wantStatus: metav1.ConditionFalse, wantMsg: `"PreferSameRegion" is not known`,
	}, {
		name: "unknown trafficDistribution with the same-cluster preference: that one still written",
		in:   Input{TrafficDistribution: "PreferSameRegion", Preference: PreferSameCluster, LocalCluster: "c2", LocalZones: []string{"a", "b"}, Endpoints: eps},
		want: map[string]string{"10.1.0.1": el + "|", "10.1.0.2": el + "|", "10.2.0.1": "a,b|", "10.2.0.2": "a,b|",
			"10.3.0.1": el + "|", "10.3.0.2": el + "|"},
		wantReason: ReasonUnknownDistribution, wantStatus: metav1.ConditionFalse, wantMsg: "no hints for it",
	}, {
		name:       "headless: no hints, said so",
		in:         Input{Headless: true, TrafficDistribution: "PreferSameZone", Endpoints: eps},
		want:       map[string]string{"10.1.0.1": "-", "10.1.0.2": "-", "10.2.0.1": "-", "10.2.0.2": "-", "10.3.0.1": "-", "10.3.0.2": "-"},
		wantReason: ReasonHeadless, wantStatus: metav1.ConditionFalse, wantMsg: "DNS answers",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := withGroups(tt.in)
			h := Plan(in)
			if d := cmp.Diff(tt.want, hintsOf(h, in)); d != "" {
				t.Errorf("hints (-want +got):\n%s", d)
			}
			c := h.Condition
			switch {
			case tt.wantReason == "" && c != nil:
				t.Errorf("condition %+v, want none", c)
			case tt.wantReason != "" && c == nil:
				t.Errorf("no condition, want %s", tt.wantReason)
			case c != nil:
				if c.Type != ConditionHints || c.Reason != tt.wantReason || c.Status != tt.wantStatus || !strings.Contains(c.Message, tt.wantMsg) {
					t.Errorf("condition %s=%s %s %q, want %s %s containing %q", c.Type, c.Status, c.Reason, c.Message, tt.wantStatus, tt.wantReason, tt.wantMsg)
				}
			}
		})
	}
}

// TestEveryReadyEndpointHinted checks, over many inputs, kube-proxy's
// requirement: either no endpoint has zone hints, or every ready one has.
func TestEveryReadyEndpointHinted(t *testing.T) {
	zones := []string{"", "a", "b"}
	for mask := range 1 << 6 {
		eps := map[string][]registry.Endpoint{}
		for i := range 3 {
			c := []string{"c1", "c2", "c3"}[i]
			bits := mask >> (2 * i)
			eps[c] = []registry.Endpoint{ep("10.0.0."+c, zones[bits%3], "n", bits&2 == 0)}
		}
		for _, in := range []Input{
			{TrafficDistribution: "PreferSameZone", Endpoints: eps},
			{TrafficDistribution: "PreferSameNode", LocalCluster: "c2", Endpoints: eps},
			{Preference: PreferSameCluster, LocalCluster: "c2", LocalZones: []string{"a"}, Endpoints: eps},
			{TrafficDistribution: "PreferSameZone", Preference: PreferSameCluster, LocalCluster: "c2", LocalZones: []string{"a", "b"}, Endpoints: eps},
		} {
			in = withGroups(in)
			h := Plan(in)
			hinted, unhinted := 0, 0
			for c, list := range eps {
				for _, e := range list {
					var ports []Port
					if c == in.LocalCluster {
						ports = portsOf(in, e)
					}
					if hh := h.For(c, ports, e); hh != nil {
						for _, z := range hh.ForZones {
							if z.Name == "" {
								t.Errorf("%+v: an empty zone hint for %v", in, e)
							}
						}
						for _, n := range hh.ForNodes {
							if n.Name == "" {
								t.Errorf("%+v: an empty node hint for %v", in, e)
							}
						}
					}
					if !e.Ready {
						continue
					}
					if hh := h.For(c, ports, e); hh != nil && len(hh.ForZones) > 0 && hh.ForZones[0].Name != "" {
						hinted++
					} else {
						unhinted++
					}
				}
			}
			if hinted > 0 && unhinted > 0 {
				t.Errorf("%+v: %d ready endpoints hinted, %d not", in, hinted, unhinted)
			}
		}
	}
}

// TestOwnZoneKept: with many spilled zones, an endpoint keeps its own.
func TestOwnZoneKept(t *testing.T) {
	zones := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	eps := map[string][]registry.Endpoint{"c2": {ep("10.2.0.1", "z", "n", true)}}
	h := Plan(withGroups(Input{TrafficDistribution: "PreferSameZone", Preference: PreferSameCluster, LocalCluster: "c2",
		LocalZones: zones, Endpoints: eps})) // its zone is no node's: all eight spill to it
	got := h.For("c2", []Port{v4http}, eps["c2"][0])
	var names []string
	for _, z := range got.ForZones {
		names = append(names, z.Name)
	}
	if len(names) != MaxHints || !slices.Contains(names, "z") {
		t.Errorf("zones %v: want %d, its own zone z among them", names, MaxHints)
	}
}

// TestPortSets: only the ports whose hints differ get slices of their own;
// the ports hinted alike stay together.
func TestPortSets(t *testing.T) {
	v4grpc := Port{AddressType: discoveryv1.AddressTypeIPv4, Name: "grpc", Protocol: corev1.ProtocolTCP}
	ports := []Port{v4http, v4grpc, v4adm}
	eps := map[string][]registry.Endpoint{"c2": {ep("10.2.0.1", "a", "n1", true), ep("10.2.0.2", "b", "n2", true)}}
	in := Input{TrafficDistribution: "PreferSameZone", Preference: PreferSameCluster, LocalCluster: "c2", LocalZones: []string{"a", "b"},
		Endpoints: eps, LocalGroups: []Group{
			{Ports: []Port{v4http, v4grpc}, Endpoints: eps["c2"][:1]},
			{Ports: ports, Endpoints: eps["c2"][1:]},
		}}
	for _, tc := range []struct {
		name    string
		in      Input
		cluster string
		want    [][]int
	}{
		{"admin spills zone a, http and grpc none", in, "c2", [][]int{{0, 1}, {2}}},
		{"another cluster's endpoints", in, "c1", [][]int{{0, 1, 2}}},
		{"the same-cluster preference alone", Input{Preference: PreferSameCluster, LocalCluster: "c2", LocalZones: []string{"a", "b"}, Endpoints: eps, LocalGroups: in.LocalGroups}, "c2", [][]int{{0, 1, 2}}},
	} {
		if got := Plan(tc.in).PortSets(tc.cluster, ports); !cmp.Equal(got, tc.want) {
			t.Errorf("%s: port sets %v, want %v", tc.name, got, tc.want)
		}
	}
}
