package export

import (
	"cmp"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/wellknown"
	"github.com/mcsd-io/mcsd/pkg/registry"
)

// serviceSpec is what this cluster publishes about svc. Labels and
// annotations come only from the ServiceExport's spec, never from either
// object's metadata.
func serviceSpec(svc *corev1.Service, se *mcsv1beta1.ServiceExport) registry.ServiceSpec {
	spec := registry.ServiceSpec{
		Type:                  registry.ClusterSetIP,
		SessionAffinity:       svc.Spec.SessionAffinity,
		SessionAffinityConfig: svc.Spec.SessionAffinityConfig.DeepCopy(),
		IPFamilies:            slices.Clone(svc.Spec.IPFamilies),
		ExportedLabels:        maps.Clone(se.Spec.ExportedLabels),
		ExportedAnnotations:   maps.Clone(se.Spec.ExportedAnnotations),
	}
	if svc.Spec.ClusterIP == corev1.ClusterIPNone {
		spec.Type = registry.Headless
	}
	for _, p := range svc.Spec.Ports {
		spec.Ports = append(spec.Ports, registry.Port{
			Name:        p.Name,
			Protocol:    registry.ProtocolOrTCP(p.Protocol),
			AppProtocol: clonePtr(p.AppProtocol),
			Port:        p.Port,
		})
	}
	spec.InternalTrafficPolicy = clonePtr(svc.Spec.InternalTrafficPolicy)
	spec.TrafficDistribution = clonePtr(svc.Spec.TrafficDistribution)
	return spec
}

// endpointGroups turns a Service's EndpointSlices into registry endpoint
// groups: one per address type (IPv4, IPv6; FQDN slices are skipped) and
// port list, endpoints deduplicated by address, everything sorted so that
// the result depends only on the slices' content. Slices that mcsd's import
// controller wrote are skipped, and groups without endpoints are left out.
func endpointGroups(list []discoveryv1.EndpointSlice) []registry.EndpointGroup {
	byKey := map[string]*registry.EndpointGroup{}
	for i := range list {
		s := &list[i]
		if s.Labels[discoveryv1.LabelManagedBy] == wellknown.ManagedBy {
			continue
		}
		if s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6 {
			continue
		}
		ports := endpointPorts(s.Ports)
		k := groupKey(s.AddressType, ports)
		g := byKey[k]
		if g == nil {
			g = &registry.EndpointGroup{AddressType: s.AddressType, Ports: ports}
			byKey[k] = g
		}
		for _, e := range s.Endpoints {
			if len(e.Addresses) == 0 {
				continue
			}
			g.Endpoints = append(g.Endpoints, endpoint(e))
		}
	}
	var groups []registry.EndpointGroup
	for _, g := range byKey {
		if len(g.Endpoints) == 0 {
			continue
		}
		g.Endpoints = dedupEndpoints(g.Endpoints)
		groups = append(groups, *g)
	}
	slices.SortFunc(groups, func(a, b registry.EndpointGroup) int {
		return cmp.Or(
			cmp.Compare(a.AddressType, b.AddressType),
			slices.CompareFunc(a.Ports, b.Ports, comparePorts),
		)
	})
	return groups
}

func endpointPorts(in []discoveryv1.EndpointPort) []registry.EndpointPort {
	if len(in) == 0 {
		return nil
	}
	out := make([]registry.EndpointPort, 0, len(in))
	for _, p := range in {
		var proto corev1.Protocol
		if p.Protocol != nil {
			proto = *p.Protocol
		}
		out = append(out, registry.EndpointPort{
			Name:        deref(p.Name),
			Protocol:    registry.ProtocolOrTCP(proto),
			Port:        deref(p.Port),
			AppProtocol: clonePtr(p.AppProtocol),
		})
	}
	slices.SortFunc(out, comparePorts)
	return out
}

func comparePorts(a, b registry.EndpointPort) int {
	return cmp.Or(
		cmp.Compare(a.Name, b.Name),
		cmp.Compare(a.Protocol, b.Protocol),
		cmp.Compare(a.Port, b.Port),
		cmp.Compare(deref(a.AppProtocol), deref(b.AppProtocol)),
		cmp.Compare(boolInt(a.AppProtocol != nil), boolInt(b.AppProtocol != nil)),
	)
}

// groupKey identifies an address type and a sorted port list.
func groupKey(t discoveryv1.AddressType, ports []registry.EndpointPort) string {
	var b strings.Builder
	b.WriteString(string(t))
	for _, p := range ports {
		b.WriteByte(0)
		b.WriteString(p.Name)
		b.WriteByte(1)
		b.WriteString(string(p.Protocol))
		b.WriteByte(1)
		b.WriteString(strconv.Itoa(int(p.Port)))
		b.WriteByte(1)
		if p.AppProtocol != nil {
			b.WriteString("=" + *p.AppProtocol)
		}
	}
	return b.String()
}

// endpoint converts an EndpointSlice endpoint with the API's defaults for
// unset conditions, as kube-proxy reads them: ready and serving unless said
// otherwise, not terminating.
func endpoint(e discoveryv1.Endpoint) registry.Endpoint {
	ready := e.Conditions.Ready == nil || *e.Conditions.Ready
	serving := e.Conditions.Serving == nil || *e.Conditions.Serving
	addrs := slices.Clone(e.Addresses)
	slices.Sort(addrs)
	return registry.Endpoint{
		Addresses:   addrs,
		Ready:       ready,
		Serving:     serving,
		Terminating: e.Conditions.Terminating != nil && *e.Conditions.Terminating,
		Hostname:    deref(e.Hostname),
		NodeName:    deref(e.NodeName),
		Zone:        deref(e.Zone),
	}
}

// dedupEndpoints sorts endpoints by address and keeps one per address list:
// an endpoint can sit in two slices while the EndpointSlice controller moves
// it, and then the most available copy (ready, serving, not terminating)
// wins.
func dedupEndpoints(eps []registry.Endpoint) []registry.Endpoint {
	slices.SortFunc(eps, func(a, b registry.Endpoint) int {
		return cmp.Or(
			slices.Compare(a.Addresses, b.Addresses),
			cmp.Compare(boolInt(b.Ready), boolInt(a.Ready)),
			cmp.Compare(boolInt(b.Serving), boolInt(a.Serving)),
			cmp.Compare(boolInt(a.Terminating), boolInt(b.Terminating)),
			cmp.Compare(a.Hostname, b.Hostname),
			cmp.Compare(a.NodeName, b.NodeName),
			cmp.Compare(a.Zone, b.Zone),
		)
	})
	return slices.CompactFunc(eps, func(a, b registry.Endpoint) bool {
		return slices.Equal(a.Addresses, b.Addresses)
	})
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
