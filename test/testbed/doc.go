// Package testbed brings up several real Kubernetes control planes on one
// machine for mcsd's end-to-end tests and demo: kube-apiserver,
// kube-controller-manager, kube-scheduler and etcd started by kwokctl's binary
// runtime from binaries built from pinned module versions, with kwok standing
// in for kubelets so that Pods get nodes, IPs and Running, and EndpointSlices
// come from Kubernetes' own controller.
//
// Each cluster gets distinct pod and service CIDRs, mcsd's CRDs and its
// KEP-2149 ClusterProperties (cluster.clusterset.k8s.io = c1..cN).
// Cluster.StartCoreDNS runs a stock CoreDNS for a cluster that answers
// cluster.local and, from the cluster's ServiceImports, clusterset.local.
package testbed
