// Package v1beta1 holds the ClusterProperty API (group about.k8s.io, KEP-2149)
// at version v1beta1: cluster-scoped key/value properties of a cluster, of which
// cluster.clusterset.k8s.io (the cluster's id) and clusterset.k8s.io (the
// clusterset's id) are the ones mcsd reads.
//
// +kubebuilder:object:generate=true
// +groupName=about.k8s.io
package v1beta1
