package cloudmap

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"strconv"
	"strings"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

// encoder builds the instances of one cluster.
type encoder struct {
	id     registry.Identity
	prefix string
}

func newEncoder(id registry.Identity) encoder {
	return encoder{id: id, prefix: ownerPrefix(id)}
}

func (e encoder) base(record string, created int64) map[string]string {
	return map[string]string{
		attrClusterID:    e.id.Cluster,
		attrClusterSetID: e.id.ClusterSet,
		attrCreation:     strconv.FormatInt(created, 10),
		attrController:   controllerName,
		attrRecord:       record,
	}
}

// state is what one cluster publishes about one Service.
type state struct {
	// Created is the export's creation time in Unix ms, the Order.
	Created int64
	// Spec is the export, nil when the Service is not exported.
	Spec *registry.ServiceSpec
	// HasEndpoints is set once endpoints were put.
	HasEndpoints bool
	Groups       []registry.EndpointGroup
	// EndpointsUpdated is the time of the last change of the endpoints in
	// Unix ms, 0 when unknown.
	EndpointsUpdated int64
}

// instances returns every instance of st by id: the service record, when
// there is an export or endpoints, and one instance per endpoint address and
// port. It fails with registry.ErrInvalid for what Cloud Map cannot hold.
func (e encoder) instances(st state) (map[string]instance, error) {
	out := map[string]instance{}
	if st.Spec == nil && !st.HasEndpoints {
		return out, nil
	}
	rec := e.base(recordService, st.Created)
	if st.Spec != nil {
		rec[attrServiceType] = string(st.Spec.Type)
		chunks, err := specChunks(*st.Spec)
		if err != nil {
			return nil, err
		}
		for i, c := range chunks {
			rec[attrSpec+strconv.Itoa(i)] = c
		}
	}
	if st.HasEndpoints {
		rec[attrEndpoints] = "true"
		if st.EndpointsUpdated > 0 {
			rec[attrEndpointsUpdated] = strconv.FormatInt(st.EndpointsUpdated, 10)
		}
	}
	if err := checkLimits(rec); err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	out[serviceRecordID(e.prefix)] = instance{ID: serviceRecordID(e.prefix), Attrs: rec}

	serviceType := registry.ClusterSetIP
	if st.Spec != nil {
		serviceType = st.Spec.Type
	}
	for _, g := range st.Groups {
		var ipAttr string
		switch g.AddressType {
		case discoveryv1.AddressTypeIPv4:
			ipAttr = attrIPv4
		case discoveryv1.AddressTypeIPv6:
			ipAttr = attrIPv6
		default:
			return nil, fmt.Errorf("address type %q: %w", g.AddressType, registry.ErrInvalid)
		}
		shared := sharedPortNumbers(g.Ports)
		for _, ep := range g.Endpoints {
			for _, addr := range ep.Addresses {
				ip, err := netip.ParseAddr(addr)
				if err != nil || ip.Is4() != (g.AddressType == discoveryv1.AddressTypeIPv4) || ip.Zone() != "" {
					return nil, fmt.Errorf("address %q of type %s: %w", addr, g.AddressType, registry.ErrInvalid)
				}
				attrs := e.base(recordEndpoint, st.Created)
				attrs[ipAttr] = addr
				attrs[attrServiceType] = string(serviceType)
				attrs[attrReady] = strconv.FormatBool(ep.Ready)
				attrs[attrHostname] = ep.Hostname
				attrs[attrNodeName] = ep.NodeName
				attrs[attrServing] = strconv.FormatBool(ep.Serving)
				if ep.Terminating {
					attrs[attrTerminating] = "true"
				}
				if ep.Zone != "" {
					attrs[attrZone] = ep.Zone
				}
				if len(g.Ports) == 0 {
					if err := checkLimits(attrs); err != nil {
						return nil, fmt.Errorf("endpoint %s: %w", addr, err)
					}
					id := endpointInstanceID(e.prefix, addr, nil, false)
					out[id] = instance{ID: id, Attrs: attrs}
					continue
				}
				for _, p := range g.Ports {
					pa := maps.Clone(attrs)
					setPortAttrs(pa, p, st.Spec)
					if err := checkLimits(pa); err != nil {
						return nil, fmt.Errorf("endpoint %s port %d: %w", addr, p.Port, err)
					}
					id := endpointInstanceID(e.prefix, addr, &p, shared[portNumber{registry.ProtocolOrTCP(p.Protocol), p.Port}])
					out[id] = instance{ID: id, Attrs: pa}
				}
			}
		}
	}
	return out, nil
}

// setPortAttrs sets the endpoint and Service port attributes of p: the
// Service port is the spec's port of the same name and protocol (as
// EndpointSlice ports are named after Service ports), else one like p.
func setPortAttrs(attrs map[string]string, p registry.EndpointPort, spec *registry.ServiceSpec) {
	proto := registry.ProtocolOrTCP(p.Protocol)
	attrs[attrPort] = strconv.Itoa(int(p.Port))
	attrs[attrEndpointPortName] = p.Name
	attrs[attrEndpointProtocol] = string(proto)
	if p.AppProtocol != nil && *p.AppProtocol != "" {
		attrs[attrAppProtocol] = *p.AppProtocol
	}
	sp := registry.Port{Name: p.Name, Protocol: proto, Port: p.Port}
	if spec != nil {
		for _, s := range spec.Ports {
			if s.Name == p.Name && registry.ProtocolOrTCP(s.Protocol) == proto {
				sp = s
				break
			}
		}
	}
	attrs[attrServicePortName] = sp.Name
	attrs[attrServicePort] = strconv.Itoa(int(sp.Port))
	attrs[attrServiceTargetPort] = strconv.Itoa(int(p.Port))
	attrs[attrServiceProtocol] = string(registry.ProtocolOrTCP(sp.Protocol))
}

// specChunks encodes spec as compact JSON with non-ASCII escaped, in chunks
// that are valid attribute values: at most 1,024 printable ASCII characters,
// none starting with a space.
func specChunks(spec registry.ServiceSpec) ([]string, error) {
	raw, err := json.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("encode export: %w", err)
	}
	s := asciiJSON(raw)
	var chunks []string
	for len(s) > 0 {
		n := min(len(s), maxAttrValue)
		for n < len(s) && n > 1 && s[n] == ' ' {
			n--
		}
		chunks = append(chunks, s[:n])
		s = s[n:]
	}
	return chunks, nil
}

// asciiJSON escapes every non-ASCII rune of JSON text as \uXXXX, which keeps
// it the same JSON value: non-ASCII runes occur only inside strings.
func asciiJSON(raw []byte) string {
	var b strings.Builder
	for _, r := range string(raw) {
		switch {
		case r < utf8.RuneSelf:
			b.WriteRune(r)
		case r > 0xFFFF:
			r -= 0x10000
			fmt.Fprintf(&b, `\u%04x\u%04x`, 0xD800+(r>>10), 0xDC00+(r&0x3FF))
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
	}
	return b.String()
}

// checkLimits checks attrs against Cloud Map's limits of one instance.
func checkLimits(attrs map[string]string) error {
	if len(attrs) > maxAttrs {
		return fmt.Errorf("%d attributes, Cloud Map takes %d: %w", len(attrs), maxAttrs, registry.ErrInvalid)
	}
	total := 0
	for k, v := range attrs {
		total += len(k) + len(v)
		if len(k) > maxAttrKey || len(v) > maxAttrValue {
			return fmt.Errorf("attribute %s is too long: %w", k, registry.ErrInvalid)
		}
		if !validAttrValue(v) {
			return fmt.Errorf("attribute %s=%q is not printable ASCII: %w", k, v, registry.ErrInvalid)
		}
	}
	if total > maxAttrsTotal {
		return fmt.Errorf("attributes take %d characters, Cloud Map takes %d: %w", total, maxAttrsTotal, registry.ErrInvalid)
	}
	return nil
}

// validAttrValue reports whether v is printable ASCII not starting with a
// space, as Cloud Map requires of attribute values.
func validAttrValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if v[i] < ' ' || v[i] > '~' {
			return false
		}
	}
	return !strings.HasPrefix(v, " ")
}

// portNumber is an endpoint port without its name.
type portNumber struct {
	protocol corev1.Protocol
	port     int32
}

// sharedPortNumbers returns the protocols and numbers that more than one of
// ports has (two Service ports with one target port): their instances need
// the port's name in their ids (endpointInstanceID).
func sharedPortNumbers(ports []registry.EndpointPort) map[portNumber]bool {
	seen := make(map[portNumber]int, len(ports))
	var shared map[portNumber]bool
	for _, p := range ports {
		k := portNumber{registry.ProtocolOrTCP(p.Protocol), p.Port}
		if seen[k]++; seen[k] == 2 {
			if shared == nil {
				shared = map[portNumber]bool{}
			}
			shared[k] = true
		}
	}
	return shared
}
