package status

import (
	"time"
)

// Report is the status of a clusterset, and what `mcsd status -o json`
// prints. Its JSON form is stable: fields are added, never renamed or
// removed. Lists are never null, and are sorted (clusters by id, services
// by namespace and name, exports by rank). Times are RFC 3339, UTC; a time
// that is not known is left out.
type Report struct {
	// ClusterSet is the clusterset reported on.
	ClusterSet string `json:"clusterSet"`
	// Namespace limits the services and local objects reported; "" for
	// all.
	Namespace string `json:"namespace,omitempty"`
	// Time is when the registry was read.
	Time time.Time `json:"time"`
	// Clusters are the live clusters of the registry.
	Clusters []Cluster `json:"clusters"`
	// Services are the Services some live cluster exports.
	Services []Service `json:"services"`
	// Local is the local cluster's view; nil without one.
	Local *Local `json:"local,omitempty"`
	// ClusterSets are the clustersets with live clusters in the registry,
	// listed when the one reported on has none (etcd only).
	ClusterSets []string `json:"clusterSets,omitempty"`
	// Leases counts the registry's leases (etcd); nil for a registry
	// without leases.
	Leases *LeaseAudit `json:"leases,omitempty"`
	// Warnings are what stopped parts of the report from being complete.
	Warnings []string `json:"warnings"`
}

// LeaseAudit counts the registry's leases. Any client of an etcd may grant
// leases (they are outside its RBAC), so leases that hold no mcsd record
// pile up unseen unless something counts them.
type LeaseAudit struct {
	// Total is how many leases the registry holds.
	Total int `json:"total"`
	// Idle counts the leases that held nothing at two looks GraceSeconds
	// apart.
	Idle int `json:"idle"`
	// Foreign counts the leases holding other applications' keys only.
	Foreign int `json:"foreign"`
	// Unreadable counts leases holding records this identity may not read.
	Unreadable   int     `json:"unreadable"`
	GraceSeconds float64 `json:"graceSeconds"`
}

// Liveness kinds of Cluster.Liveness.
const (
	// LivenessLease: etcd, the cluster's records are bound to a lease.
	LivenessLease = "lease"
	// LivenessHeartbeat: Cloud Map, the cluster refreshes a heartbeat.
	LivenessHeartbeat = "heartbeat"
)

// Cluster is a live member of the clusterset.
type Cluster struct {
	ID string `json:"id"`
	// Local is set for the cluster of --kubeconfig.
	Local bool `json:"local,omitempty"`
	// Liveness is how the cluster shows it is alive: LivenessLease,
	// LivenessHeartbeat, or "" when the registry does not say (a cluster
	// of the AWS Cloud Map MCS controller).
	Liveness string `json:"liveness,omitempty"`
	// Lease is the id of the cluster's etcd lease.
	Lease string `json:"lease,omitempty"`
	// Since is when the cluster's records last became live, by its clock.
	Since time.Time `json:"since,omitzero"`
	// LastSeen is the last lease renewal or heartbeat.
	LastSeen time.Time `json:"lastSeen,omitzero"`
	// Expires is when the cluster's records expire unless it renews its
	// lease or heartbeat.
	Expires time.Time `json:"expires,omitzero"`
	// TTLSeconds is how long the records outlive the last renewal; 0 when
	// not known.
	TTLSeconds float64 `json:"ttlSeconds,omitempty"`
	// Exports counts the cluster's exports in the report.
	Exports int `json:"exports"`
}

// Service is one exported Service of the clusterset.
type Service struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Import is what the exports merge into: what every cluster imports.
	Import Import `json:"import"`
	// Exports are the clusters' exports, highest precedence (oldest) first.
	Exports []Export `json:"exports"`
	// Conflict is set when the exports disagree.
	Conflict *Conflict `json:"conflict,omitempty"`
}

// Import is the merged import of a Service.
type Import struct {
	// Type is ClusterSetIP or Headless.
	Type  string `json:"type"`
	Ports []Port `json:"ports"`
	// Clusters are the exporting clusters, oldest export first.
	Clusters []string `json:"clusters"`
	// Published is the latest Updated of the exporting clusters' endpoints:
	// the last change any of them published.
	Published time.Time `json:"published,omitzero"`
}

// Port is a port of an export or import.
type Port struct {
	Name        string `json:"name,omitempty"`
	Protocol    string `json:"protocol"`
	Port        int32  `json:"port"`
	AppProtocol string `json:"appProtocol,omitempty"`
}

// Export is one cluster's export of a Service.
type Export struct {
	Cluster string `json:"cluster"`
	// Rank is the export's precedence, 1 for the oldest export, which wins
	// every conflict.
	Rank  int    `json:"rank"`
	Type  string `json:"type"`
	Ports []Port `json:"ports"`
	// Endpoints is nil when the cluster has published no endpoints.
	Endpoints *Endpoints `json:"endpoints,omitempty"`
}

// Endpoints counts one cluster's endpoints of a Service.
type Endpoints struct {
	// Total counts the addresses, Ready those ready.
	Total int `json:"total"`
	Ready int `json:"ready"`
	// Updated is when the cluster last published a change, by its clock.
	Updated time.Time `json:"updated,omitzero"`
}

// Conflict is the disagreement of a Service's exports.
type Conflict struct {
	// Winner is the cluster of the oldest export, whose values are used
	// where it carries them: Winners says whose, reason by reason.
	Winner string `json:"winner"`
	// Winners maps each reason to the cluster whose value the import uses
	// (merge.Conflict.Winners); a PortConflict whose ports came from
	// several clusters, or that lost no value, has none.
	Winners map[string]string `json:"winners,omitempty"`
	// Reasons are the mcs-api conflict reasons, e.g. PortConflict.
	Reasons []string `json:"reasons"`
	// Message is the Conflict condition message every export carries.
	Message string `json:"message"`
}

// Local is what the local cluster holds.
type Local struct {
	// Cluster is the local cluster's id; "" when its ClusterProperty
	// cannot be read.
	Cluster string        `json:"cluster"`
	Exports []LocalExport `json:"exports"`
	Imports []LocalImport `json:"imports"`
}

// LocalExport is a ServiceExport of the local cluster.
type LocalExport struct {
	Namespace  string      `json:"namespace"`
	Name       string      `json:"name"`
	Conditions []Condition `json:"conditions"`
	// InRegistry is set when the registry holds the local cluster's export
	// of the Service.
	InRegistry bool `json:"inRegistry"`
}

// Condition is a status condition.
type Condition struct {
	Type               string    `json:"type"`
	Status             string    `json:"status"`
	Reason             string    `json:"reason,omitempty"`
	Message            string    `json:"message,omitempty"`
	LastTransitionTime time.Time `json:"lastTransitionTime,omitzero"`
}

// LocalImport is a ServiceImport of the local cluster.
type LocalImport struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Type      string `json:"type"`
	// Ready is the Ready condition; nil when there is none yet.
	Ready *Condition `json:"ready,omitempty"`
	// Clusters is status.clusters.
	Clusters []string `json:"clusters"`
	// EndpointSlices counts the import's EndpointSlices, Endpoints their
	// addresses.
	EndpointSlices int `json:"endpointSlices"`
	Endpoints      int `json:"endpoints"`
	// LastChange is the latest write to the ServiceImport or its
	// EndpointSlices (their managed fields).
	LastChange time.Time `json:"lastChange,omitzero"`
	// Published is the registry's Import.Published of the Service.
	Published time.Time `json:"published,omitzero"`
	// Differs lists where the ServiceImport differs from the registry's
	// merged import: "withdrawn" (no cluster exports the Service), "type",
	// "ports", "clusters". Empty when it matches.
	Differs []string `json:"differs"`
}
