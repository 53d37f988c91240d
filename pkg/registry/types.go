package registry

import (
	"cmp"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// Identity names the cluster a backend publishes for and the clusterset it
// belongs to (the KEP-2149 ClusterProperty values).
type Identity struct {
	ClusterSet string
	Cluster    string
	// Instance tells apart two Kubernetes clusters given one cluster id by
	// mistake: mcsd sets the UID of the cluster's kube-system namespace,
	// which every cluster has its own of for its whole life. A backend
	// opened with an Instance refuses to open (ErrClusterIDInUse) while
	// Cluster's records live under another Instance. Empty: unknown, not
	// checked (and not a reason to refuse another).
	Instance string
}

// Validate reports whether both ids follow the id rule (ValidateClusterSetID,
// ValidateClusterID).
func (id Identity) Validate() error {
	if err := ValidateClusterSetID(id.ClusterSet); err != nil {
		return err
	}
	return ValidateClusterID(id.Cluster)
}

// ServiceKey names an exported Service: namespace sameness makes it the same
// service in every cluster.
type ServiceKey struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// Compare orders keys by namespace, then name (for slices.SortFunc).
func (k ServiceKey) Compare(o ServiceKey) int {
	return cmp.Or(cmp.Compare(k.Namespace, o.Namespace), cmp.Compare(k.Name, o.Name))
}

func (k ServiceKey) String() string { return k.Namespace + "/" + k.Name }

// ServiceType is the type an exported Service imports as.
type ServiceType string

const (
	// ClusterSetIP is a Service with a cluster IP (ClusterIP, NodePort, LoadBalancer).
	ClusterSetIP ServiceType = "ClusterSetIP"
	// Headless is a Service with clusterIP None.
	Headless ServiceType = "Headless"
)

// Port is one port of an exported Service.
type Port struct {
	Name        string          `json:"name,omitempty"`
	Protocol    corev1.Protocol `json:"protocol"`
	AppProtocol *string         `json:"appProtocol,omitempty"`
	Port        int32           `json:"port"`
}

// ServiceSpec is what one cluster publishes about a Service it exports.
type ServiceSpec struct {
	Type                  ServiceType                          `json:"type"`
	Ports                 []Port                               `json:"ports,omitempty"`
	SessionAffinity       corev1.ServiceAffinity               `json:"sessionAffinity,omitempty"`
	SessionAffinityConfig *corev1.SessionAffinityConfig        `json:"sessionAffinityConfig,omitempty"`
	IPFamilies            []corev1.IPFamily                    `json:"ipFamilies,omitempty"`
	InternalTrafficPolicy *corev1.ServiceInternalTrafficPolicy `json:"internalTrafficPolicy,omitempty"`
	TrafficDistribution   *string                              `json:"trafficDistribution,omitempty"`
	ExportedLabels        map[string]string                    `json:"exportedLabels,omitempty"`
	ExportedAnnotations   map[string]string                    `json:"exportedAnnotations,omitempty"`
}

// Export is one cluster's export of one Service as the registry holds it.
type Export struct {
	Cluster string      `json:"cluster"`
	Service ServiceKey  `json:"service"`
	Spec    ServiceSpec `json:"spec"`
	// Order is the precedence the registry gave the export when it first
	// stored it: lower is older. Ties are broken by cluster id. It is set by
	// the backend on read; a cluster cannot choose it.
	Order int64 `json:"order"`
	// WrittenBy names the controller that wrote the export when it was not
	// mcsd (the AWS Cloud Map MCS controller, whose records the Cloud Map
	// backend reads as exports); empty for mcsd's own. It is set by the
	// backend on read and never stored.
	WrittenBy string `json:"-"`
	// Partial: the writer (WrittenBy) records the Service's type and ports
	// alone, without the ports' appProtocol (the backend gives it the IP
	// families of its endpoints): the merge takes the other fields as
	// unknown, neither agreeing nor conflicting. Set by the backend on read
	// and never stored.
	Partial bool `json:"-"`
}

// EndpointPort is a port of a group of endpoints (the EndpointSlice port).
type EndpointPort struct {
	Name        string          `json:"name,omitempty"`
	Protocol    corev1.Protocol `json:"protocol"`
	Port        int32           `json:"port"`
	AppProtocol *string         `json:"appProtocol,omitempty"`
}

// Endpoint is one backend of an exported Service.
type Endpoint struct {
	Addresses   []string `json:"addresses"`
	Ready       bool     `json:"ready"`
	Serving     bool     `json:"serving"`
	Terminating bool     `json:"terminating,omitempty"`
	Hostname    string   `json:"hostname,omitempty"`
	NodeName    string   `json:"nodeName,omitempty"`
	Zone        string   `json:"zone,omitempty"`
}

// EndpointGroup holds endpoints that share an address type and a port list,
// as one or more local EndpointSlices do.
type EndpointGroup struct {
	AddressType discoveryv1.AddressType `json:"addressType"`
	Ports       []EndpointPort          `json:"ports,omitempty"`
	Endpoints   []Endpoint              `json:"endpoints,omitempty"`
}

// Endpoints is one cluster's endpoints of one exported Service.
type Endpoints struct {
	Cluster string          `json:"cluster"`
	Service ServiceKey      `json:"service"`
	Groups  []EndpointGroup `json:"groups,omitempty"`
	// Updated is when the publishing cluster last wrote a change of these
	// endpoints (its clock), for measuring propagation; zero when the
	// backend does not record it. It is not part of the content: a put of
	// identical groups writes nothing and keeps it.
	Updated time.Time `json:"updated,omitempty"`
}

// Cluster is a live member of the clusterset.
type Cluster struct {
	ID string `json:"id"`
	// Since is when the cluster's records last became live, by the
	// cluster's clock: etcd, when its lease was granted; Cloud Map, when its
	// heartbeats started after its records had expired. A controller that
	// restarts within the TTL keeps it. Zero when the backend does not know.
	Since time.Time `json:"since,omitempty"`
	// LastSeen is when the backend last saw the cluster alive (its heartbeat
	// or lease renewal), where the backend knows it: Cloud Map's watch does;
	// etcd's does not (see LeaseInspector).
	LastSeen time.Time `json:"lastSeen,omitempty"`
	// TTL is how long the cluster's records outlive its last renewal or
	// heartbeat; zero when the backend does not know.
	TTL time.Duration `json:"ttl,omitempty"`
}

// RecordID names one cluster's record of one Service.
type RecordID struct {
	Cluster string
	Service ServiceKey
}

// ProtocolOrTCP returns p, or TCP (the Kubernetes default) when p is empty:
// a port's protocol as Kubernetes reads it.
func ProtocolOrTCP(p corev1.Protocol) corev1.Protocol {
	if p == "" {
		return corev1.ProtocolTCP
	}
	return p
}

// InUseBy returns ErrClusterIDInUse for a backend of id that found its
// cluster's records live under instance other, since since (zero:
// unknown).
func (id Identity) InUseBy(other string, since time.Time) error {
	live := ""
	if !since.IsZero() {
		live = ", live since " + since.UTC().Format(time.RFC3339)
	}
	return fmt.Errorf("%w: cluster id %q of clusterset %q belongs to the cluster whose kube-system namespace has uid %s%s, not to this one (uid %s); give each cluster its own id (ClusterProperty cluster.clusterset.k8s.io); this one waits until the other's records expire",
		ErrClusterIDInUse, id.Cluster, id.ClusterSet, other, live, id.Instance)
}

// OtherInstance reports whether records written under instance other
// belong to another cluster than id: both are known, and differ.
func (id Identity) OtherInstance(other string) bool {
	return id.Instance != "" && other != "" && other != id.Instance
}
