package cloudmap

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

// serviceRecords is what the instances of one Cloud Map service say about
// one cluster.
type serviceRecords struct {
	// MCSD is set when mcsd wrote any of the instances: the records then
	// live only while the cluster's heartbeat does.
	MCSD bool
	// Export is the cluster's export, nil when there is none.
	Export *registry.Export
	// Endpoints is the cluster's endpoints, nil when there are none.
	Endpoints *registry.Endpoints
}

// decodeService reads the instances of the Cloud Map service of key into
// each cluster's records. Instances of another clusterset and instances it
// cannot read are skipped.
func decodeService(clusterSet string, key registry.ServiceKey, insts []instance) map[string]*serviceRecords {
	type acc struct {
		mcsd      bool
		record    map[string]string
		endpoints bool
		eps       endpointSet
		awsCount  int
		awsOrder  int64
		awsType   registry.ServiceType
		awsPorts  map[registry.Port]bool
		awsBy     string
	}
	byCluster := map[string]*acc{}
	get := func(c string) *acc {
		a := byCluster[c]
		if a == nil {
			a = &acc{eps: endpointSet{}, awsPorts: map[registry.Port]bool{}}
			byCluster[c] = a
		}
		return a
	}
	// Sorted, so that what is taken from "any" instance is stable.
	slices.SortFunc(insts, func(a, b instance) int { return cmp.Compare(a.ID, b.ID) })
	for _, in := range insts {
		at := in.Attrs
		cluster := at[attrClusterID]
		if cluster == "" || at[attrClusterSetID] != clusterSet {
			continue
		}
		switch at[attrRecord] {
		case recordService:
			a := get(cluster)
			a.mcsd = true
			a.record = at
			if at[attrEndpoints] == "true" {
				a.endpoints = true
			}
		case recordEndpoint:
			a := get(cluster)
			a.mcsd = true
			if a.eps.add(at) {
				a.endpoints = true
			}
		case "":
			// The AWS controller's instance: an endpoint and its export.
			created, err := strconv.ParseInt(at[attrCreation], 10, 64)
			if err != nil {
				continue
			}
			a := get(cluster)
			if !a.eps.add(at) {
				continue
			}
			a.endpoints = true
			if a.awsCount == 0 || created < a.awsOrder {
				a.awsOrder = created
			}
			a.awsCount++
			if a.awsType == "" {
				a.awsType = registry.ServiceType(at[attrServiceType])
			}
			if a.awsBy == "" {
				a.awsBy = cmp.Or(at[attrController], awsControllerName)
			}
			if p, ok := servicePort(at); ok {
				a.awsPorts[p] = true
			}
		}
	}

	out := make(map[string]*serviceRecords, len(byCluster))
	for cluster, a := range byCluster {
		r := &serviceRecords{MCSD: a.mcsd}
		var groups []registry.EndpointGroup
		if a.endpoints {
			groups = a.eps.groups()
		}
		if a.record != nil {
			if spec, ok := decodeSpec(a.record); ok {
				order, err := strconv.ParseInt(a.record[attrCreation], 10, 64)
				if err != nil || order <= 0 {
					// No age it can be ranked by: after every export
					// that has one, so that it wins no conflict.
					order = orderUnknown
				}
				// Instances of the AWS controller beside mcsd's (a take-over
				// that did not finish) make the export not wholly mcsd's:
				// it is published again, which withdraws them.
				r.Export = &registry.Export{Cluster: cluster, Service: key, Spec: spec, Order: order, WrittenBy: a.awsBy}
			}
		} else if a.awsCount > 0 {
			spec := registry.ServiceSpec{Type: a.awsType}
			if spec.Type != registry.Headless {
				spec.Type = registry.ClusterSetIP
			}
			spec.Ports = slices.SortedFunc(maps.Keys(a.awsPorts), comparePorts)
			// Its families are those of its endpoints.
			for _, g := range groups {
				if f := corev1.IPFamily(g.AddressType); (f == corev1.IPv4Protocol || f == corev1.IPv6Protocol) && !slices.Contains(spec.IPFamilies, f) {
					spec.IPFamilies = append(spec.IPFamilies, f)
				}
			}
			slices.Sort(spec.IPFamilies) // IPv4 before IPv6
			// The AWS controller records the type and ports alone.
			r.Export = &registry.Export{Cluster: cluster, Service: key, Spec: spec, Order: a.awsOrder, WrittenBy: a.awsBy, Partial: true}
		}
		if a.endpoints {
			r.Endpoints = &registry.Endpoints{Cluster: cluster, Service: key, Groups: groups}
			if ms, err := strconv.ParseInt(a.record[attrEndpointsUpdated], 10, 64); err == nil && ms > 0 {
				r.Endpoints.Updated = time.UnixMilli(ms).UTC()
			}
		}
		if r.Export != nil || r.Endpoints != nil {
			out[cluster] = r
		}
	}
	return out
}

// orderUnknown is the Order of an mcsd export whose service record has no
// valid creation time: the last.
const orderUnknown = math.MaxInt64

// decodeSpec reads the export of a service record.
func decodeSpec(rec map[string]string) (registry.ServiceSpec, bool) {
	var b strings.Builder
	for i := 0; ; i++ {
		c, ok := rec[attrSpec+strconv.Itoa(i)]
		if !ok {
			break
		}
		b.WriteString(c)
	}
	if b.Len() == 0 {
		return registry.ServiceSpec{}, false
	}
	var spec registry.ServiceSpec
	if err := json.Unmarshal([]byte(b.String()), &spec); err != nil {
		return registry.ServiceSpec{}, false
	}
	return spec, true
}

// servicePort reads the Service port attributes of an AWS controller
// instance.
func servicePort(at map[string]string) (registry.Port, bool) {
	port, err := strconv.ParseUint(at[attrServicePort], 10, 16)
	if err != nil {
		return registry.Port{}, false
	}
	return registry.Port{
		Name:     at[attrServicePortName],
		Protocol: registry.ProtocolOrTCP(corev1.Protocol(at[attrServiceProtocol])),
		Port:     int32(port),
	}, true
}

func comparePorts(a, b registry.Port) int {
	return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Protocol, b.Protocol), cmp.Compare(a.Port, b.Port))
}

func compareEndpointPorts(a, b registry.EndpointPort) int {
	return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Protocol, b.Protocol), cmp.Compare(a.Port, b.Port),
		cmp.Compare(deref(a.AppProtocol), deref(b.AppProtocol)))
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// endpointSet collects endpoint instances by address.
type endpointSet map[addrKey]*addrEndpoint

type addrKey struct {
	typ  discoveryv1.AddressType
	addr string
}

type addrEndpoint struct {
	ep    registry.Endpoint
	ports map[string]registry.EndpointPort
}

// add reads an endpoint instance; it reports false for one it cannot read.
func (s endpointSet) add(at map[string]string) bool {
	k := addrKey{typ: discoveryv1.AddressTypeIPv4, addr: at[attrIPv4]}
	if v6, ok := at[attrIPv6]; ok {
		k = addrKey{typ: discoveryv1.AddressTypeIPv6, addr: v6}
	}
	if _, err := netip.ParseAddr(k.addr); err != nil {
		return false
	}
	var port *registry.EndpointPort
	if v, ok := at[attrPort]; ok {
		n, err := strconv.ParseUint(v, 10, 16)
		if err != nil {
			return false
		}
		port = &registry.EndpointPort{
			Name:     at[attrEndpointPortName],
			Protocol: registry.ProtocolOrTCP(corev1.Protocol(at[attrEndpointProtocol])),
			Port:     int32(n),
		}
		if ap, ok := at[attrAppProtocol]; ok {
			port.AppProtocol = &ap
		}
	}
	ready := true
	if v, ok := at[attrReady]; ok {
		ready, _ = strconv.ParseBool(v)
	}
	serving := ready
	if v, ok := at[attrServing]; ok {
		serving, _ = strconv.ParseBool(v)
	}
	terminating, _ := strconv.ParseBool(at[attrTerminating])
	a := s[k]
	if a == nil {
		a = &addrEndpoint{
			ep: registry.Endpoint{
				Addresses:   []string{k.addr},
				Ready:       ready,
				Serving:     serving,
				Terminating: terminating,
				Hostname:    at[attrHostname],
				NodeName:    at[attrNodeName],
				Zone:        at[attrZone],
			},
			ports: map[string]registry.EndpointPort{},
		}
		s[k] = a
	}
	if port != nil {
		a.ports[fmt.Sprintf("%s/%s/%d", port.Name, port.Protocol, port.Port)] = *port
	}
	return true
}

// groups returns the endpoints in canonical groups: one group per address
// type and port list, ports and endpoints sorted, one address per endpoint.
func (s endpointSet) groups() []registry.EndpointGroup {
	type groupKey struct {
		typ   discoveryv1.AddressType
		ports string
	}
	byKey := map[groupKey]*registry.EndpointGroup{}
	for k, a := range s {
		ports := slices.SortedFunc(maps.Values(a.ports), compareEndpointPorts)
		sig, _ := json.Marshal(ports)
		gk := groupKey{typ: k.typ, ports: string(sig)}
		g := byKey[gk]
		if g == nil {
			g = &registry.EndpointGroup{AddressType: k.typ, Ports: ports}
			byKey[gk] = g
		}
		g.Endpoints = append(g.Endpoints, a.ep)
	}
	keys := slices.SortedFunc(maps.Keys(byKey), func(a, b groupKey) int {
		return cmp.Or(cmp.Compare(a.typ, b.typ), cmp.Compare(a.ports, b.ports))
	})
	out := make([]registry.EndpointGroup, 0, len(keys))
	for _, k := range keys {
		g := byKey[k]
		slices.SortFunc(g.Endpoints, func(a, b registry.Endpoint) int { return cmp.Compare(a.Addresses[0], b.Addresses[0]) })
		out = append(out, *g)
	}
	return out
}

// endpointGroups decodes the endpoint instances of insts (the service
// record and others' instances are skipped) as a watcher would.
func endpointGroups(insts map[string]instance) []registry.EndpointGroup {
	eps := endpointSet{}
	for _, in := range insts {
		if in.Attrs[attrRecord] == recordEndpoint {
			eps.add(in.Attrs)
		}
	}
	return eps.groups()
}

// decodeOwn reads this cluster's state of one Service back from its
// instances, for a backend that takes over after a restart.
func decodeOwn(id registry.Identity, key registry.ServiceKey, insts []instance) (state, bool) {
	recs := decodeService(id.ClusterSet, key, insts)[id.Cluster]
	var st state
	found := false
	for _, in := range insts {
		switch in.Attrs[attrRecord] {
		case recordService:
			if c, err := strconv.ParseInt(in.Attrs[attrCreation], 10, 64); err == nil && c > 0 {
				st.Created = c
			}
			st.EndpointsUpdated, _ = strconv.ParseInt(in.Attrs[attrEndpointsUpdated], 10, 64)
			found = true
		case "":
			// The AWS Cloud Map MCS controller's: its export is read from
			// its endpoints (decodeService).
			found = true
		}
	}
	if !found {
		return state{}, false
	}
	if recs != nil && recs.Export != nil {
		spec := recs.Export.Spec
		st.Spec = &spec
		if st.Created == 0 && recs.Export.Order != orderUnknown {
			st.Created = recs.Export.Order
		}
	}
	if recs != nil && recs.Endpoints != nil {
		st.HasEndpoints = true
		st.Groups = recs.Endpoints.Groups
	}
	return st, true
}
