// Package clusterid reads this cluster's identity from the KEP-2149
// ClusterProperty objects cluster.clusterset.k8s.io (the cluster's id) and
// clusterset.k8s.io (the clusterset's id), and says exactly what is missing
// when they are not there.
package clusterid
