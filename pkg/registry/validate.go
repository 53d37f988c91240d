package registry

import (
	"errors"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Limits on what one cluster may publish about one Service. A record beyond
// them is refused by every reader (RejectTooLarge, RejectTooManyEndpoints)
// and not written by its own cluster.
const (
	// MaxRecordBytes is the largest encoded record a backend stores or
	// reads: 1 MiB, under etcd's default request limit of 1.5 MiB. (The
	// etcd backend writes two records in one request only when they are
	// no larger together.)
	MaxRecordBytes = 1 << 20
	// MaxEndpoints is the most endpoints one cluster may publish for one
	// Service, across all its groups.
	MaxEndpoints = 5000
	// maxAnnotationBytes is Kubernetes' limit on the total size of an
	// object's annotations.
	maxAnnotationBytes = 256 << 10
	// maxAddresses is Kubernetes' limit on the addresses of one endpoint.
	maxAddresses = 100
	// maxClientIPTimeoutSeconds is Kubernetes' limit on the ClientIP
	// session affinity timeout (a day).
	maxClientIPTimeoutSeconds = 86400
)

// RejectReason says why a reader refused a record: the reason label of the
// mcsd_registry_records_rejected_total metric. The set is fixed.
type RejectReason string

const (
	// RejectUnreadable: the value cannot be decoded.
	RejectUnreadable RejectReason = "unreadable"
	// RejectInvalid: the record breaks the schema: a Service type, port,
	// protocol, IP family, session affinity, label or annotation, or a
	// cluster, namespace or name, that Kubernetes would refuse.
	RejectInvalid RejectReason = "invalid"
	// RejectInvalidAddress: an endpoint address Kubernetes refuses in an
	// EndpointSlice (not an IP of the group's family, loopback, link-local,
	// unspecified, multicast), or an invalid hostname or node name.
	RejectInvalidAddress RejectReason = "invalidAddress"
	// RejectTooLarge: the encoded record is larger than MaxRecordBytes.
	RejectTooLarge RejectReason = "tooLarge"
	// RejectTooManyEndpoints: more than MaxEndpoints endpoints.
	RejectTooManyEndpoints RejectReason = "tooManyEndpoints"
	// RejectNotMember: the record does not belong to a live member of the
	// clusterset (etcd: its cluster has no alive record, or the record is
	// not on the lease of that alive record).
	RejectNotMember RejectReason = "notMember"
)

// RejectReasons lists every RejectReason.
var RejectReasons = []RejectReason{
	RejectUnreadable, RejectInvalid, RejectInvalidAddress, RejectTooLarge, RejectTooManyEndpoints, RejectNotMember,
}

// RecordKind names the two records a cluster publishes per Service.
type RecordKind string

const (
	KindExport    RecordKind = "export"
	KindEndpoints RecordKind = "endpoints"
)

// Rejection is a record a reader refused. While a cluster has a rejected
// record of a Service, none of its records of that Service count.
type Rejection struct {
	Kind   RecordKind
	Record RecordID
	Reason RejectReason
	// Message says what is wrong, for conditions and events.
	Message string
}

func (r Rejection) String() string {
	return fmt.Sprintf("%s record of %s from cluster %q refused (%s): %s", r.Kind, r.Record.Service, r.Record.Cluster, r.Reason, r.Message)
}

// RejectedError is the error of a record that readers refuse. It matches
// ErrInvalid with errors.Is.
type RejectedError struct {
	Reason RejectReason
	Err    error
}

func (e *RejectedError) Error() string { return string(e.Reason) + ": " + e.Err.Error() }

func (e *RejectedError) Unwrap() []error { return []error{e.Err, ErrInvalid} }

func reject(reason RejectReason, format string, args ...any) error {
	return &RejectedError{Reason: reason, Err: fmt.Errorf(format, args...)}
}

// Reject makes the Rejection of record (kind, id) that err refuses: its
// reason if it is a RejectedError, else RejectInvalid.
func Reject(kind RecordKind, id RecordID, err error) Rejection {
	reason := RejectInvalid
	msg := err.Error()
	if re, ok := errors.AsType[*RejectedError](err); ok {
		reason, msg = re.Reason, re.Err.Error()
	}
	return Rejection{Kind: kind, Record: id, Reason: reason, Message: msg}
}

// ValidateRecordID checks the cluster id and Service of a record: the
// cluster id must follow the id rule (ValidateClusterID), the namespace be a
// DNS label, the name a DNS-1035 label (a Service name).
func ValidateRecordID(id RecordID) error {
	if err := ValidateClusterID(id.Cluster); err != nil {
		return reject(RejectInvalid, "%s", err.Error())
	}
	if errs := dns1123Label(id.Service.Namespace); len(errs) > 0 {
		return reject(RejectInvalid, "namespace %q: %s", id.Service.Namespace, errs[0])
	}
	if errs := dns1035Label(id.Service.Name); len(errs) > 0 {
		return reject(RejectInvalid, "service name %q: %s", id.Service.Name, errs[0])
	}
	return nil
}

// ValidateExport checks an export record as Kubernetes would check the
// objects an importer makes of it. The error is a *RejectedError.
func ValidateExport(e Export) error {
	if err := ValidateRecordID(RecordID{Cluster: e.Cluster, Service: e.Service}); err != nil {
		return err
	}
	return ValidateSpec(e.Spec)
}

// ValidateSpec checks the spec of an export record.
func ValidateSpec(s ServiceSpec) error {
	if s.Type != ClusterSetIP && s.Type != Headless {
		return reject(RejectInvalid, "service type %q", s.Type)
	}
	names := map[string]bool{}
	for i, p := range s.Ports {
		if err := validatePort(p.Name, p.Protocol, p.Port, p.AppProtocol, false); err != nil {
			return reject(RejectInvalid, "port %d: %w", i, err)
		}
		if p.Name != "" && names[p.Name] {
			return reject(RejectInvalid, "port %d: name %q used twice", i, p.Name)
		}
		names[p.Name] = true
	}
	switch s.SessionAffinity {
	case "", corev1.ServiceAffinityNone, corev1.ServiceAffinityClientIP:
	default:
		return reject(RejectInvalid, "session affinity %q", s.SessionAffinity)
	}
	if c := s.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
		if t := *c.ClientIP.TimeoutSeconds; t <= 0 || t > maxClientIPTimeoutSeconds {
			return reject(RejectInvalid, "session affinity timeout %d s", t)
		}
	}
	if len(s.IPFamilies) > 2 {
		return reject(RejectInvalid, "%d IP families", len(s.IPFamilies))
	}
	for i, f := range s.IPFamilies {
		if f != corev1.IPv4Protocol && f != corev1.IPv6Protocol {
			return reject(RejectInvalid, "IP family %q", f)
		}
		if i > 0 && s.IPFamilies[0] == f {
			return reject(RejectInvalid, "IP family %q twice", f)
		}
	}
	if p := s.InternalTrafficPolicy; p != nil && *p != corev1.ServiceInternalTrafficPolicyCluster && *p != corev1.ServiceInternalTrafficPolicyLocal {
		return reject(RejectInvalid, "internal traffic policy %q", *p)
	}
	if d := s.TrafficDistribution; d != nil {
		if errs := validation.IsQualifiedName(*d); len(errs) > 0 {
			return reject(RejectInvalid, "traffic distribution %q: %s", *d, errs[0])
		}
	}
	for k, v := range s.ExportedLabels {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return reject(RejectInvalid, "exported label %q: %s", k, errs[0])
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return reject(RejectInvalid, "exported label %q value: %s", k, errs[0])
		}
	}
	size := 0
	for k, v := range s.ExportedAnnotations {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return reject(RejectInvalid, "exported annotation %q: %s", k, errs[0])
		}
		if reservedAnnotations[k] {
			return reject(RejectInvalid, "exported annotation %q: a key an importer sets on its ServiceImport itself", k)
		}
		size += len(k) + len(v)
	}
	if size > maxAnnotationBytes {
		return reject(RejectInvalid, "exported annotations of %d bytes, more than %d", size, maxAnnotationBytes)
	}
	return nil
}

// reservedAnnotations are the annotations an importer sets on its
// ServiceImport (and on the objects it makes for it) and reads back: mcsd's
// marks, its take-over's retirement, and the derived Service's name as mcsd
// and the AWS Cloud Map MCS controller write it. An export's exported
// annotations, which an importer copies onto its ServiceImport, may not
// carry them: a cluster could otherwise have every importer act on its own
// objects (delete a local Service a retirement names, say). Other keys of
// mcsd's domain are exported on purpose (traffic-preference).
var reservedAnnotations = map[string]bool{
	"multicluster.mcsd.io/managed":               true,
	"multicluster.mcsd.io/derived-service":       true,
	"multicluster.mcsd.io/service-import":        true,
	"multicluster.mcsd.io/ip-families":           true,
	"multicluster.mcsd.io/slice-inputs":          true,
	"multicluster.mcsd.io/retiring-services":     true,
	"multicluster.mcsd.io/retire-after":          true,
	"multicluster.kubernetes.io/derived-service": true,
	"multicluster.k8s.aws/derived-service":       true,
}

// validatePort checks one port; endpoint ports may be 0 (no number).
func validatePort(name string, proto corev1.Protocol, port int32, appProtocol *string, endpoint bool) error {
	if name != "" {
		if errs := dns1123Label(name); len(errs) > 0 {
			return fmt.Errorf("name %q: %s", name, errs[0])
		}
	}
	switch proto {
	case corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP:
	default:
		return fmt.Errorf("protocol %q", proto)
	}
	if port < 0 || port > 65535 || (port == 0 && !endpoint) {
		return fmt.Errorf("port number %d out of range", port)
	}
	if appProtocol != nil {
		if errs := validation.IsQualifiedName(*appProtocol); len(errs) > 0 {
			return fmt.Errorf("appProtocol %q: %s", *appProtocol, errs[0])
		}
	}
	return nil
}

// ValidateEndpoints checks an endpoints record as Kubernetes would check the
// EndpointSlices an importer makes of it, and against MaxEndpoints. The
// error is a *RejectedError.
func ValidateEndpoints(e Endpoints) error {
	if err := ValidateRecordID(RecordID{Cluster: e.Cluster, Service: e.Service}); err != nil {
		return err
	}
	return ValidateGroups(e.Groups)
}

// ValidateGroups checks the endpoint groups of an endpoints record.
func ValidateGroups(groups []EndpointGroup) error {
	n := 0
	for _, g := range groups {
		n += len(g.Endpoints)
	}
	if n > MaxEndpoints {
		return reject(RejectTooManyEndpoints, "%d endpoints, more than %d", n, MaxEndpoints)
	}
	for i, g := range groups {
		switch g.AddressType {
		case discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6, discoveryv1.AddressTypeFQDN:
		default:
			return reject(RejectInvalid, "group %d: address type %q", i, g.AddressType)
		}
		if len(g.Ports) > 100 {
			return reject(RejectInvalid, "group %d: %d ports, more than 100", i, len(g.Ports))
		}
		for j, p := range g.Ports {
			if err := validatePort(p.Name, p.Protocol, p.Port, p.AppProtocol, true); err != nil {
				return reject(RejectInvalid, "group %d port %d: %w", i, j, err)
			}
		}
		for j, ep := range g.Endpoints {
			if err := validateEndpoint(g.AddressType, ep); err != nil {
				return reject(RejectInvalidAddress, "group %d endpoint %d: %w", i, j, err)
			}
		}
	}
	return nil
}

func validateEndpoint(t discoveryv1.AddressType, ep Endpoint) error {
	if len(ep.Addresses) == 0 || len(ep.Addresses) > maxAddresses {
		return fmt.Errorf("%d addresses", len(ep.Addresses))
	}
	for _, a := range ep.Addresses {
		if err := validateAddress(t, a); err != nil {
			return err
		}
	}
	if ep.Hostname != "" {
		if errs := dns1123Label(ep.Hostname); len(errs) > 0 {
			return fmt.Errorf("hostname %q: %s", ep.Hostname, errs[0])
		}
	}
	if ep.NodeName != "" {
		if errs := dns1123Subdomain(ep.NodeName); len(errs) > 0 {
			return fmt.Errorf("node name %q: %s", ep.NodeName, errs[0])
		}
	}
	if ep.Zone != "" {
		if errs := labelValue(ep.Zone); len(errs) > 0 {
			return fmt.Errorf("zone %q: %s", ep.Zone, errs[0])
		}
	}
	return nil
}

// validateAddress refuses what the API server refuses in an EndpointSlice of
// type t: anything but an IP of t's family in canonical form, and loopback,
// link-local, unspecified and multicast addresses.
func validateAddress(t discoveryv1.AddressType, a string) error {
	if t == discoveryv1.AddressTypeFQDN {
		if errs := validation.IsFullyQualifiedDomainName(nil, a); len(errs) > 0 {
			return fmt.Errorf("address %q: %s", a, errs[0].Detail)
		}
		return nil
	}
	ip, err := netip.ParseAddr(a)
	if err != nil || ip.Zone() != "" || ip.String() != a {
		return fmt.Errorf("address %q: not an IP address in canonical form", a)
	}
	if (t == discoveryv1.AddressTypeIPv4) != ip.Is4() {
		return fmt.Errorf("address %q: not of address type %s", a, t)
	}
	switch {
	case ip.IsUnspecified():
		return fmt.Errorf("address %q: unspecified", a)
	case ip.IsLoopback():
		return fmt.Errorf("address %q: loopback", a)
	case ip.IsLinkLocalUnicast(), ip.IsLinkLocalMulticast():
		return fmt.Errorf("address %q: link-local", a)
	case ip.IsMulticast():
		return fmt.Errorf("address %q: multicast", a)
	}
	return nil
}
