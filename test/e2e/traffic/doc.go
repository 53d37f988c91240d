// Package traffic proves that exported Services carry traffic across
// clusters on the testbed's data plane: pods that run as processes in
// network namespaces, Kubernetes' own kube-proxy routing each cluster's
// derived Services, CoreDNS answering clusterset.local behind kube-dns, and
// a client pod that `kubectl exec`s curl, nc and dig as a person would.
package traffic
