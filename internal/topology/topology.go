package topology

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcsd-io/mcsd/internal/conditions"
	"github.com/mcsd-io/mcsd/pkg/registry"
)

// AnnotationPreference on an exported Service's ServiceExport, listed in its
// spec.exportedAnnotations, asks every importing cluster to prefer its own
// endpoints: PreferSameCluster. The annotation reaches the ServiceImport like
// any exported annotation, so every cluster agrees on it and a disagreement
// is an AnnotationsConflict, won by the oldest export.
const AnnotationPreference = "multicluster.mcsd.io/traffic-preference"

// PreferSameCluster is the value of AnnotationPreference that prefers the
// importing cluster's own endpoints while any is ready.
const PreferSameCluster = "PreferSameCluster"

// Elsewhere is the zone and node hint of endpoints that topology must not
// pick in this cluster: no node is in such a zone or has such a name
// (".invalid" is a reserved top-level domain), so kube-proxy never chooses
// them by their hint, and uses them when it falls back to every endpoint.
const Elsewhere = "elsewhere.mcsd.invalid"

// MaxHints is the most zones (and nodes) one endpoint's hints may name: the
// API server refuses more.
const MaxHints = 8

// The condition that says whether the import's EndpointSlices carry hints.
const (
	// ConditionHints is set on a ServiceImport whose traffic distribution
	// or preference asks for hints.
	ConditionHints = "TopologyHints"
	// ReasonHinted: the slices carry every hint asked for.
	ReasonHinted = "Hinted"
	// ReasonEndpointsWithoutZone: a ready endpoint has no zone, so zone
	// hints would be incomplete, which kube-proxy ignores silently.
	ReasonEndpointsWithoutZone = "EndpointsWithoutZone"
	// ReasonEndpointsWithoutNode: a ready endpoint of this cluster has no
	// node, so node hints would be incomplete (zone hints are still
	// written).
	ReasonEndpointsWithoutNode = "EndpointsWithoutNode"
	// ReasonNodesWithoutZone: this cluster's nodes have no zone label, so
	// the same-cluster preference cannot be expressed as zone hints.
	ReasonNodesWithoutZone = "NodesWithoutZone"
	// ReasonTooManyZones: this cluster's nodes have more zones than a hint
	// may name (MaxHints), so the same-cluster preference cannot be
	// expressed as zone hints.
	ReasonTooManyZones = "TooManyZones"
	// ReasonUnknownPreference: the traffic-preference annotation has a value
	// mcsd does not know.
	ReasonUnknownPreference = "UnknownTrafficPreference"
	// ReasonUnknownDistribution: trafficDistribution has a value mcsd
	// does not know (a later Kubernetes'), for which it writes no hints.
	ReasonUnknownDistribution = "UnknownTrafficDistribution"
	// ReasonHeadless: hints steer kube-proxy, and a headless import has no
	// cluster IP; DNS answers are not filtered.
	ReasonHeadless = "Headless"
)

// Input is what the hints of one import in this cluster depend on.
type Input struct {
	// Headless is set for a headless import.
	Headless bool
	// TrafficDistribution is the import's (merge.Result), "" for none.
	TrafficDistribution string
	// Preference is the import's AnnotationPreference value, "" for none.
	Preference string
	// LocalCluster is this cluster's id.
	LocalCluster string
	// LocalZones are the zones of this cluster's nodes; needed only with
	// PreferSameCluster.
	LocalZones []string
	// Endpoints are the endpoints the import's slices hold, by cluster.
	Endpoints map[string][]registry.Endpoint
	// LocalGroups are this cluster's endpoints (Endpoints[LocalCluster])
	// with the ports their slices carry them under; needed only with
	// PreferSameCluster and zone hints, where a zone spills per Port.
	LocalGroups []Group
}

// Port is how kube-proxy groups an import's endpoints: for each IP family
// (the slices' address type) and each port of the import, it picks among
// the endpoints of the slices that carry that port, by their hints alone.
type Port struct {
	AddressType discoveryv1.AddressType
	Name        string
	Protocol    corev1.Protocol
}

func (p Port) String() string { return string(p.AddressType) + "/" + p.Name + "/" + string(p.Protocol) }

// Group is endpoints that the same slices carry, with those slices' ports.
type Group struct {
	Ports     []Port
	Endpoints []registry.Endpoint
}

// NeedsLocalZones reports whether Plan needs Input.LocalZones: reading the
// nodes is left to imports that ask for the same-cluster preference.
func NeedsLocalZones(preference string) bool { return preference == PreferSameCluster }

// Hints is the hints plan of one import in this cluster. The zero Hints
// writes no hint and no condition.
type Hints struct {
	zone, node, sameCluster bool
	local                   string
	localZones              []string
	// spill are, for each Port, this cluster's zones without a ready local
	// endpoint of that Port: with zone and same-cluster hints, every ready
	// local endpoint of the Port also serves them, so that a client there
	// stays in its cluster.
	spill map[Port][]string
	// Condition is the ConditionHints condition to set; nil to remove it.
	Condition *metav1.Condition
}

// Plan decides the hints of an import's endpoints:
//
//   - trafficDistribution PreferSameZone (or PreferClose): every endpoint is
//     hinted with its own zone, so a client is served by endpoints of its
//     zone, from any cluster, while there are any; PreferSameNode also hints
//     this cluster's own endpoints with their node (other clusters'
//     endpoints with Elsewhere).
//   - PreferSameCluster: this cluster's endpoints are hinted with every
//     zone of its nodes (with zone hints too: their own zone, and the zones
//     without a ready local endpoint), other clusters' with Elsewhere, so a
//     client is served in its own cluster while any endpoint there is ready.
//
// kube-proxy uses hints only when every ready endpoint has them and one
// names the client's zone (node), and otherwise every ready endpoint: that
// is the fail-over, with no controller in the loop. A set in which some ready
// endpoint would lack its hint is never written: a ready endpoint without a
// zone turns zone hints off, and the condition says why.
func Plan(in Input) Hints {
	td := in.TrafficDistribution
	zone := td == corev1.ServiceTrafficDistributionPreferSameZone || td == corev1.ServiceTrafficDistributionPreferClose ||
		td == corev1.ServiceTrafficDistributionPreferSameNode
	node := td == corev1.ServiceTrafficDistributionPreferSameNode
	same := in.Preference == PreferSameCluster
	unknownTD := td != "" && !zone
	if !zone && !same && in.Preference == "" && !unknownTD {
		return Hints{}
	}
	var asked []string
	if td != "" {
		asked = append(asked, "trafficDistribution "+td)
	}
	if in.Preference != "" {
		asked = append(asked, AnnotationPreference+" "+in.Preference)
	}
	cond := func(status metav1.ConditionStatus, reason, format string, args ...any) *metav1.Condition {
		return &metav1.Condition{Type: ConditionHints, Status: status, Reason: reason,
			Message: conditions.Cap(fmt.Sprintf("Asked for by %s. ", strings.Join(asked, " and "))+fmt.Sprintf(format, args...), 1024)}
	}
	if in.Headless {
		return Hints{Condition: cond(metav1.ConditionFalse, ReasonHeadless,
			"A headless import has no cluster IP for kube-proxy to steer: DNS answers list every exporting cluster's endpoints, unfiltered.")}
	}
	var problems []string
	reason := ""
	problem := func(r, msg string) {
		if reason == "" {
			reason = r
		}
		problems = append(problems, msg)
	}
	if unknownTD {
		problem(ReasonUnknownDistribution, fmt.Sprintf("trafficDistribution %q is not known to this mcsd (it knows %s, %s and %s): no hints for it.", td,
			corev1.ServiceTrafficDistributionPreferSameZone, corev1.ServiceTrafficDistributionPreferClose, corev1.ServiceTrafficDistributionPreferSameNode))
	}
	if in.Preference != "" && !same {
		problem(ReasonUnknownPreference, fmt.Sprintf("%s %q is not known (the one value is %s): no same-cluster hints.", AnnotationPreference, in.Preference, PreferSameCluster))
	}
	zones := slices.Compact(slices.Sorted(slices.Values(in.LocalZones)))
	zones = slices.DeleteFunc(zones, func(z string) bool { return z == "" })
	if same && (len(zones) == 0 || len(zones) > MaxHints) {
		same = false
		r := ReasonNodesWithoutZone
		if len(zones) > MaxHints {
			r = ReasonTooManyZones
		}
		problem(r, fmt.Sprintf("This cluster's nodes have %d zones (label %s); same-cluster hints need 1 to %d: none are written.",
			len(zones), corev1.LabelTopologyZone, MaxHints))
	}
	if zone {
		// With same-cluster hints, other clusters' endpoints are hinted
		// Elsewhere whatever their zone: only this cluster's need one.
		zoned := in.Endpoints
		if same {
			zoned = map[string][]registry.Endpoint{in.LocalCluster: in.Endpoints[in.LocalCluster]}
		}
		if missing := readyWithout(zoned, func(e registry.Endpoint) bool { return e.Zone != "" }); len(missing) > 0 {
			zone, node = false, false
			problem(ReasonEndpointsWithoutZone, fmt.Sprintf("Ready endpoints without a zone in %s: kube-proxy ignores zone hints unless every ready endpoint has one, so none are written.",
				strings.Join(missing, ", ")))
		}
	}
	if node {
		local := map[string][]registry.Endpoint{in.LocalCluster: in.Endpoints[in.LocalCluster]}
		if missing := readyWithout(local, func(e registry.Endpoint) bool { return e.NodeName != "" }); len(missing) > 0 {
			node = false
			problem(ReasonEndpointsWithoutNode, fmt.Sprintf("Ready endpoints of this cluster (%s) without a node: no node hints.", strings.Join(missing, ", ")))
		}
	}
	h := Hints{zone: zone, node: node, sameCluster: same, local: in.LocalCluster, localZones: zones}
	if same && zone {
		h.spill = spillZones(in.LocalGroups, zones)
	}
	if reason != "" {
		h.Condition = cond(metav1.ConditionFalse, reason, "%s", strings.Join(problems, " "))
		return h
	}
	var does []string
	if same {
		does = append(does, "to this cluster's endpoints while any is ready")
	}
	if zone {
		does = append(does, "to endpoints in the client's zone while any is ready")
	}
	if node {
		does = append(does, "to an endpoint on the client's node first")
	}
	h.Condition = cond(metav1.ConditionTrue, ReasonHinted, "The EndpointSlices carry hints: kube-proxy sends traffic %s, and to every ready endpoint otherwise.",
		strings.Join(does, ", then "))
	return h
}

// spillZones returns, for each Port of the local groups, the zones without
// a ready endpoint of that Port.
func spillZones(groups []Group, zones []string) map[Port][]string {
	ready := map[Port]map[string]bool{}
	for _, g := range groups {
		for _, p := range g.Ports {
			if ready[p] == nil {
				ready[p] = map[string]bool{}
			}
			for _, e := range g.Endpoints {
				if e.Ready {
					ready[p][e.Zone] = true
				}
			}
		}
	}
	out := map[Port][]string{}
	for p, in := range ready {
		for _, z := range zones {
			if !in[z] {
				out[p] = append(out[p], z)
			}
		}
	}
	return out
}

// KeyFor is a key of how For hints cluster's endpoints: two Hints with the
// same KeyFor(cluster) give every endpoint of cluster the same hints.
func (h Hints) KeyFor(cluster string) string {
	if !h.zone && !h.sameCluster {
		return "none"
	}
	local := cluster == h.local
	k := fmt.Sprintf("zone=%t sameCluster=%t node=%t local=%t", h.zone, h.sameCluster, h.node, local)
	if local && h.sameCluster {
		var spill []string
		for _, p := range slices.SortedFunc(maps.Keys(h.spill), func(a, b Port) int { return strings.Compare(a.String(), b.String()) }) {
			spill = append(spill, p.String()+":"+strings.Join(h.spill[p], ","))
		}
		k += " spill=" + strings.Join(spill, ";") + " localZones=" + strings.Join(h.localZones, ",")
	}
	return k
}

// Nodes reports whether the hints name nodes (PreferSameNode).
func (h Hints) Nodes() bool { return h.node }

// PortSets splits ports, under which slices carry endpoints of cluster,
// into the sets whose endpoints need slices of their own, as indexes into
// ports in their order: the ports whose hints differ (with the same-cluster
// and same-zone preferences, a zone without a ready local endpoint of one
// port, and with one of another). Hints are per endpoint, so one slice of
// both ports would send a client that has a ready endpoint of one in its
// zone to the endpoints of other zones too. Mostly one set of them all.
func (h Hints) PortSets(cluster string, ports []Port) [][]int {
	all := make([]int, len(ports))
	for i := range ports {
		all[i] = i
	}
	if cluster != h.local || !h.sameCluster || !h.zone {
		return [][]int{all}
	}
	var sets [][]int
	for i, p := range ports {
		j := slices.IndexFunc(sets, func(set []int) bool { return slices.Equal(h.spill[ports[set[0]]], h.spill[p]) })
		if j < 0 {
			sets = append(sets, nil)
			j = len(sets) - 1
		}
		sets[j] = append(sets[j], i)
	}
	if len(sets) == 0 {
		return [][]int{all}
	}
	return sets
}

// For returns the hints of endpoint e of cluster, nil for none; ports are
// the Ports of the slice that carries it, one set of PortSets.
func (h Hints) For(cluster string, ports []Port, e registry.Endpoint) *discoveryv1.EndpointHints {
	if !h.zone && !h.sameCluster {
		return nil
	}
	local := cluster == h.local
	var zones []string
	switch {
	case h.sameCluster && !local:
		zones = []string{Elsewhere}
	case h.sameCluster && h.zone:
		zones = []string{e.Zone}
		if e.Ready {
			// Its own zone always; as many spilled zones as fit beside it
			// (the ports of one slice spill the same zones: PortSets).
			var spill []string
			if len(ports) > 0 {
				spill = slices.DeleteFunc(slices.Clone(h.spill[ports[0]]), func(z string) bool { return z == e.Zone })
			}
			zones = append(zones, spill[:min(len(spill), MaxHints-1)]...)
		}
	case h.sameCluster:
		zones = h.localZones
	default:
		zones = []string{e.Zone}
	}
	// A zone or node the endpoint does not have (only an endpoint that is
	// not ready lacks one: Plan checked the ready ones) is no hint.
	zones = slices.DeleteFunc(slices.Compact(slices.Sorted(slices.Values(zones))), func(z string) bool { return z == "" })
	if len(zones) > MaxHints {
		zones = zones[:MaxHints]
	}
	out := &discoveryv1.EndpointHints{}
	for _, z := range zones {
		out.ForZones = append(out.ForZones, discoveryv1.ForZone{Name: z})
	}
	if h.node {
		n := Elsewhere
		if local {
			n = e.NodeName
		}
		if n != "" {
			out.ForNodes = []discoveryv1.ForNode{{Name: n}}
		}
	}
	if len(out.ForZones) == 0 && len(out.ForNodes) == 0 {
		return nil
	}
	return out
}

// readyWithout lists the clusters with a ready endpoint ok refuses: names
// only, so that the message changes when the set of clusters does, not
// with every endpoint.
func readyWithout(eps map[string][]registry.Endpoint, ok func(registry.Endpoint) bool) []string {
	var out []string
	for _, c := range slices.Sorted(maps.Keys(eps)) {
		if slices.ContainsFunc(eps[c], func(e registry.Endpoint) bool { return e.Ready && !ok(e) }) {
			out = append(out, "cluster "+c)
		}
	}
	return out
}
