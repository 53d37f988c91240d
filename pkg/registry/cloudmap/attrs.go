package cloudmap

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"unicode/utf8"

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
	// attrEndpointsUpdated is the Unix time in ms of the last change of the
	// cluster's endpoints (registry.Endpoints.Updated), on its service
	// record.
	attrEndpointsUpdated = "MCSD_ENDPOINTS_UPDATED"
	// attrNamespace and attrService name the Service a service record in
	// the records service of the system namespace is about.
	attrNamespace = "MCSD_NAMESPACE"
	attrService   = "MCSD_SERVICE"
)

const (
	recordService  = "service"
	recordEndpoint = "endpoint"

	// controllerName is the K8S_CONTROLLER value of mcsd's instances.
	controllerName = "mcsd"
	// awsControllerName names the AWS Cloud Map MCS controller when one of
	// its instances carries no K8S_CONTROLLER (its value there is the
	// controller's name and version).
	awsControllerName = "aws-cloud-map-mcs-controller-for-k8s"
	// recordsService is the Cloud Map service of the service records in
	// the system namespace, out of the view of the AWS controller, which
	// reads every instance of an exported Service's Cloud Map service as an
	// endpoint.
	recordsService = "records"
	// maxRecordsServices bounds the records services: "records", then,
	// once Cloud Map refuses it more instances (1,000 a service, a quota
	// that cannot be raised), "records-1", "records-2", … (recordsName).
	maxRecordsServices = 32
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

// serviceRecordID is the id of a cluster's service record instance in the
// Cloud Map service of the Service: where mcsd kept it before it moved to
// the records service (recordID). It is also the record's key in the
// encoder's output.
func serviceRecordID(prefix string) string { return prefix + ".service" }

// recordID is the id of a cluster's service record of key in the records
// service: "<prefix>.<namespace>.<name>", or a hash of the key when that
// would be longer than Cloud Map allows.
func recordID(prefix string, key registry.ServiceKey) string {
	id := prefix + "." + key.Namespace + "." + key.Name
	if len(id) <= maxInstanceID {
		return id
	}
	h := sha256.Sum256([]byte(key.Namespace + "/" + key.Name))
	return (prefix + ".h-" + hex.EncodeToString(h[:]))[:maxInstanceID]
}

// recordKey is the Service a record of the records service is about.
func recordKey(attrs map[string]string) (registry.ServiceKey, bool) {
	k := registry.ServiceKey{Namespace: attrs[attrNamespace], Name: attrs[attrService]}
	return k, attrs[attrRecord] == recordService && validName(k.Namespace) && validName(k.Name)
}

// endpointInstanceID is the id of the instance of one address and port:
// "<prefix>.<proto>-<address with . and : as _>-<port>" as the AWS controller
// writes it after the prefix, "<prefix>.ip-<address>" without a port, and a
// hash of that when it would be longer than Cloud Map allows. named adds
// the port's name, "-<name>": for the ports of a group that share their
// protocol and number with another (two Service ports with one target
// port), which would otherwise share one instance, one of them lost.
func endpointInstanceID(prefix, addr string, port *registry.EndpointPort, named bool) string {
	a := strings.NewReplacer(".", "_", ":", "_").Replace(addr)
	var s string
	switch {
	case port == nil:
		s = "ip-" + a
	case named:
		s = fmt.Sprintf("%s-%s-%d-%s", strings.ToLower(string(registry.ProtocolOrTCP(port.Protocol))), a, port.Port, port.Name)
	default:
		s = fmt.Sprintf("%s-%s-%d", strings.ToLower(string(registry.ProtocolOrTCP(port.Protocol))), a, port.Port)
	}
	id := prefix + "." + s
	if len(id) <= maxInstanceID {
		return id
	}
	h := sha256.Sum256([]byte(s))
	return (prefix + ".h-" + hex.EncodeToString(h[:]))[:maxInstanceID]
}

// instance is one Cloud Map instance: its id and attributes.
type instance struct {
	ID    string
	Attrs map[string]string
}

// recordsName is the name of the i-th records service.
func recordsName(i int) string {
	if i == 0 {
		return recordsService
	}
	return recordsService + "-" + strconv.Itoa(i)
}

// isRecordsName reports whether name is that of a records service.
func isRecordsName(name string) bool {
	if name == recordsService {
		return true
	}
	n, ok := strings.CutPrefix(name, recordsService+"-")
	i, err := strconv.Atoi(n)
	return ok && err == nil && i > 0 && i < maxRecordsServices && recordsName(i) == name
}
