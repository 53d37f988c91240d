package etcd

import (
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

// keyKind tells which record a key holds.
type keyKind int

const (
	kindUnknown keyKind = iota
	kindAlive
	kindExport
	kindEndpoints
)

const (
	clustersDir  = "clusters"
	aliveName    = "alive"
	exportsDir   = "exports"
	endpointsDir = "endpoints"
)

// keys builds and parses the keys of one clusterset.
type keys struct {
	// root is "<prefix>/<clusterset>/clusters/".
	root string
}

func newKeys(prefix, clusterSet string) keys {
	return keys{root: strings.TrimRight(prefix, "/") + "/" + clusterSet + "/" + clustersDir + "/"}
}

// clusters is the prefix of every cluster's records.
func (k keys) clusters() string { return k.root }

// clustersEnd is the end of the range of every cluster's records.
func (k keys) clustersEnd() string { return clientv3.GetPrefixRangeEnd(k.root) }

// cluster is the prefix of one cluster's records.
func (k keys) cluster(cluster string) string { return k.root + cluster + "/" }

func (k keys) alive(cluster string) string { return k.cluster(cluster) + aliveName }

func (k keys) export(cluster string, svc registry.ServiceKey) string {
	return k.cluster(cluster) + exportsDir + "/" + svc.Namespace + "/" + svc.Name
}

func (k keys) endpoints(cluster string, svc registry.ServiceKey) string {
	return k.cluster(cluster) + endpointsDir + "/" + svc.Namespace + "/" + svc.Name
}

// parse splits a key of the clusterset into its kind, cluster and Service.
// Keys that do not follow the layout are kindUnknown.
func (k keys) parse(key string) (keyKind, string, registry.ServiceKey) {
	rest, ok := strings.CutPrefix(key, k.root)
	if !ok {
		return kindUnknown, "", registry.ServiceKey{}
	}
	parts := strings.Split(rest, "/")
	for _, p := range parts {
		if p == "" {
			return kindUnknown, "", registry.ServiceKey{}
		}
	}
	switch {
	case len(parts) == 2 && parts[1] == aliveName:
		return kindAlive, parts[0], registry.ServiceKey{}
	case len(parts) == 4 && parts[1] == exportsDir:
		return kindExport, parts[0], registry.ServiceKey{Namespace: parts[2], Name: parts[3]}
	case len(parts) == 4 && parts[1] == endpointsDir:
		return kindEndpoints, parts[0], registry.ServiceKey{Namespace: parts[2], Name: parts[3]}
	}
	return kindUnknown, "", registry.ServiceKey{}
}

// validID reports whether s can be one segment of a key.
func validID(s string) bool {
	return s != "" && !strings.ContainsAny(s, "/\x00") && s != "." && s != ".."
}

// aliveValue is the value of a cluster's alive key.
type aliveValue struct {
	Cluster string `json:"cluster"`
	// Instance is registry.Identity.Instance of the cluster that wrote it.
	Instance string `json:"instance,omitempty"`
	// Since is when the cluster's records last became live (registry.Cluster.Since).
	Since time.Time `json:"since,omitzero"`
	// TTLSeconds is the TTL of the cluster's lease.
	TTLSeconds int64 `json:"ttlSeconds,omitempty"`
}

// exportValue is the value of an export key.
type exportValue struct {
	Spec registry.ServiceSpec `json:"spec"`
}

// endpointsValue is the value of an endpoints key.
type endpointsValue struct {
	Groups []registry.EndpointGroup `json:"groups,omitempty"`
	// Updated is registry.Endpoints.Updated.
	Updated time.Time `json:"updated,omitzero"`
}
