package cloudmap

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

// Instance attributes the AWS Cloud Map MCS controller writes and reads.
const (
	attrIPv4              = "AWS_INSTANCE_IPV4"
	attrIPv6              = "AWS_INSTANCE_IPV6"
	attrPort              = "AWS_INSTANCE_PORT"
	attrEndpointPortName  = "ENDPOINT_PORT_NAME"
	attrEndpointProtocol  = "ENDPOINT_PROTOCOL"
	attrServicePortName   = "SERVICE_PORT_NAME"
	attrServicePort       = "SERVICE_PORT"
	attrServiceTargetPort = "SERVICE_TARGET_PORT"
	attrServiceProtocol   = "SERVICE_PROTOCOL"
	attrServiceType       = "SERVICE_TYPE"
	attrClusterID         = "CLUSTER_ID"
	attrClusterSetID      = "CLUSTERSET_ID"
	attrCreation          = "SERVICE_EXPORT_CREATION_TIMESTAMP"
	attrReady             = "READY"
	attrHostname          = "HOSTNAME"
	attrNodeName          = "NODENAME"
	attrController        = "K8S_CONTROLLER"
)

// Instance attributes only mcsd writes and reads; the AWS controller keeps
// unknown attributes aside and ignores them.
const (
	attrPrefix = "MCSD_"
	// attrRecord says what an mcsd instance is: recordService,
	// recordEndpoint or recordHeartbeat.
	attrRecord      = "MCSD_RECORD"
	attrServing     = "MCSD_SERVING"
	attrTerminating = "MCSD_TERMINATING"
	attrZone        = "MCSD_ZONE"
	attrAppProtocol = "MCSD_APP_PROTOCOL"
	// attrEndpoints is "true" on a service record once endpoints were put.
	attrEndpoints = "MCSD_ENDPOINTS"
	// attrSpec is the prefix of the chunks of the export's compact JSON:
	// MCSD_SPEC_0, MCSD_SPEC_1, ...
	attrSpec = "MCSD_SPEC_"
	// attrHeartbeat is the Unix time in ms of the last heartbeat.
	attrHeartbeat = "MCSD_HEARTBEAT"
	// attrTTL is the cluster's TTL in ms: how long after its last heartbeat
	// its records are ignored.
	attrTTL = "MCSD_TTL"
	// attrSince is the Unix time in ms when the cluster's records last
	// became live (registry.Cluster.Since), on its heartbeat.
	attrSince = "MCSD_SINCE"
	// attrEndpointsUpdated is the Unix time in ms of the last change of the
	// cluster's endpoints (registry.Endpoints.Updated), on its service
	// record.
	attrEndpointsUpdated = "MCSD_ENDPOINTS_UPDATED"
)

const (
	recordService   = "service"
	recordEndpoint  = "endpoint"
	recordHeartbeat = "heartbeat"

	// controllerName is the K8S_CONTROLLER value of mcsd's instances.
	controllerName = "mcsd"
	// heartbeatService is the Cloud Map service of the heartbeats in the
	// system namespace.
	heartbeatService = "heartbeats"
	// createdBy is the description of the namespaces and services mcsd
	// creates; CleanupEmpty deletes only those.
	createdBy = "Created by mcsd (multi-cluster services)."
)

// Cloud Map limits of one instance.
const (
	maxAttrs      = 30
	maxAttrKey    = 255
	maxAttrValue  = 1024
	maxAttrsTotal = 5000
	maxInstanceID = 64
	// maxOwnerName is how much of the cluster id an instance id keeps.
	maxOwnerName = 16
)

// awsAttrs are the attributes of the AWS controller's data model; with the
// MCSD_ ones they are the attributes mcsd owns on its instances.
var awsAttrs = map[string]bool{
	attrIPv4: true, attrIPv6: true, attrPort: true, attrEndpointPortName: true,
	attrEndpointProtocol: true, attrServicePortName: true, attrServicePort: true,
	attrServiceTargetPort: true, attrServiceProtocol: true, attrServiceType: true,
	attrClusterID: true, attrClusterSetID: true, attrCreation: true, attrReady: true,
	attrHostname: true, attrNodeName: true, attrController: true,
}

// owned reports whether mcsd owns attribute key on its instances: only owned
// attributes are compared to decide whether an instance must be written.
func owned(key string) bool {
	return awsAttrs[key] || strings.HasPrefix(key, attrPrefix)
}

// ownedAttrs returns the owned attributes of attrs.
func ownedAttrs(attrs map[string]string) map[string]string {
	out := make(map[string]string, len(attrs))
	for k, v := range attrs {
		if owned(k) {
			out[k] = v
		}
	}
	return out
}

// sameOwned reports whether two attribute maps agree on every owned key.
func sameOwned(a, b map[string]string) bool {
	return maps.Equal(ownedAttrs(a), ownedAttrs(b))
}

// ownerPrefix starts the id of every instance of one cluster of one
// clusterset: up to 16 characters of the cluster id, then a hash of both ids,
// so that ids never collide between clusters or clustersets sharing an
// account, and never equal the AWS controller's ids (which start with the
// protocol and have no dot).
func ownerPrefix(id registry.Identity) string {
	h := sha256.Sum256([]byte(id.ClusterSet + "\x00" + id.Cluster))
	var b strings.Builder
	for _, r := range id.Cluster {
		if b.Len() == maxOwnerName {
			break
		}
		if r < utf8.RuneSelf && (r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	return b.String() + "-" + hex.EncodeToString(h[:4])
}

// serviceRecordID is the id of a cluster's service record instance.
func serviceRecordID(prefix string) string { return prefix + ".service" }

// heartbeatID is the id of a cluster's heartbeat instance.
func heartbeatID(prefix string) string { return prefix }

// endpointInstanceID is the id of the instance of one address and port:
// "<prefix>.<proto>-<address with . and : as _>-<port>" as the AWS controller
// writes it after the prefix, "<prefix>.ip-<address>" without a port, and a
// hash of that when it would be longer than Cloud Map allows.
func endpointInstanceID(prefix, addr string, port *registry.EndpointPort) string {
	a := strings.NewReplacer(".", "_", ":", "_").Replace(addr)
	var s string
	if port == nil {
		s = "ip-" + a
	} else {
		s = fmt.Sprintf("%s-%s-%d", strings.ToLower(string(protocol(port.Protocol))), a, port.Port)
	}
	id := prefix + "." + s
	if len(id) <= maxInstanceID {
		return id
	}
	h := sha256.Sum256([]byte(s))
	return (prefix + ".h-" + hex.EncodeToString(h[:]))[:maxInstanceID]
}

func protocol(p corev1.Protocol) corev1.Protocol {
	if p == "" {
		return corev1.ProtocolTCP
	}
	return p
}

// instance is one Cloud Map instance: its id and attributes.
type instance struct {
	ID    string
	Attrs map[string]string
}

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

// heartbeat is the heartbeat instance at Unix time nowMs of a cluster with
// the given TTL whose records are live since sinceMs.
func (e encoder) heartbeat(nowMs, sinceMs int64, ttl time.Duration) instance {
	attrs := map[string]string{
		attrClusterID:    e.id.Cluster,
		attrClusterSetID: e.id.ClusterSet,
		attrController:   controllerName,
		attrRecord:       recordHeartbeat,
		attrHeartbeat:    strconv.FormatInt(nowMs, 10),
		attrTTL:          strconv.FormatInt(ttl.Milliseconds(), 10),
	}
	if sinceMs > 0 {
		attrs[attrSince] = strconv.FormatInt(sinceMs, 10)
	}
	return instance{ID: heartbeatID(e.prefix), Attrs: attrs}
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
					id := endpointInstanceID(e.prefix, addr, nil)
					out[id] = instance{ID: id, Attrs: attrs}
					continue
				}
				for _, p := range g.Ports {
					pa := maps.Clone(attrs)
					setPortAttrs(pa, p, st.Spec)
					if err := checkLimits(pa); err != nil {
						return nil, fmt.Errorf("endpoint %s port %d: %w", addr, p.Port, err)
					}
					id := endpointInstanceID(e.prefix, addr, &p)
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
	proto := protocol(p.Protocol)
	attrs[attrPort] = strconv.Itoa(int(p.Port))
	attrs[attrEndpointPortName] = p.Name
	attrs[attrEndpointProtocol] = string(proto)
	if p.AppProtocol != nil && *p.AppProtocol != "" {
		attrs[attrAppProtocol] = *p.AppProtocol
	}
	sp := registry.Port{Name: p.Name, Protocol: proto, Port: p.Port}
	if spec != nil {
		for _, s := range spec.Ports {
			if s.Name == p.Name && protocol(s.Protocol) == proto {
				sp = s
				break
			}
		}
	}
	attrs[attrServicePortName] = sp.Name
	attrs[attrServicePort] = strconv.Itoa(int(sp.Port))
	attrs[attrServiceTargetPort] = strconv.Itoa(int(p.Port))
	attrs[attrServiceProtocol] = string(protocol(sp.Protocol))
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
			if p, ok := servicePort(at); ok {
				a.awsPorts[p] = true
			}
		}
	}

	out := make(map[string]*serviceRecords, len(byCluster))
	for cluster, a := range byCluster {
		r := &serviceRecords{MCSD: a.mcsd}
		if a.record != nil {
			if spec, ok := decodeSpec(a.record); ok {
				order, _ := strconv.ParseInt(a.record[attrCreation], 10, 64)
				r.Export = &registry.Export{Cluster: cluster, Service: key, Spec: spec, Order: order}
			}
		} else if a.awsCount > 0 {
			spec := registry.ServiceSpec{Type: a.awsType}
			if spec.Type != registry.Headless {
				spec.Type = registry.ClusterSetIP
			}
			spec.Ports = slices.SortedFunc(maps.Keys(a.awsPorts), comparePorts)
			r.Export = &registry.Export{Cluster: cluster, Service: key, Spec: spec, Order: a.awsOrder}
		}
		if a.endpoints {
			r.Endpoints = &registry.Endpoints{Cluster: cluster, Service: key, Groups: a.eps.groups()}
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
		Protocol: protocol(corev1.Protocol(at[attrServiceProtocol])),
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
			Protocol: protocol(corev1.Protocol(at[attrEndpointProtocol])),
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
		if in.Attrs[attrRecord] == recordService {
			st.Created, _ = strconv.ParseInt(in.Attrs[attrCreation], 10, 64)
			st.EndpointsUpdated, _ = strconv.ParseInt(in.Attrs[attrEndpointsUpdated], 10, 64)
			found = true
		}
	}
	if !found {
		return state{}, false
	}
	if recs != nil && recs.Export != nil {
		spec := recs.Export.Spec
		st.Spec = &spec
	}
	if recs != nil && recs.Endpoints != nil {
		st.HasEndpoints = true
		st.Groups = recs.Endpoints.Groups
	}
	return st, true
}
