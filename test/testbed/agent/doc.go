// Package agent is the testbed's node agent: one process per cluster that
// plays the kubelet for the cluster's kwok nodes and runs the cluster's node
// side of the data plane.
//
//   - Pods: every pod scheduled onto the cluster's nodes gets a network
//     namespace holding the IPv4 and IPv6 addresses that its status then
//     reports, a link to the cluster's node namespace, a resolv.conf and
//     hosts file, and its own host name. Each container's command runs as a
//     host process in it (images are not pulled: see Resolve). A container
//     that cannot run leaves its pod not ready, with the reason.
//   - Exec: a kubelet-style streaming server, so `kubectl exec` runs
//     commands in a pod's namespaces.
//   - Services: Kubernetes' own kube-proxy (nftables mode) in the node
//     namespace, and a stock CoreDNS there behind the kube-dns Service.
//   - API access from the node namespace: a relay through a Unix socket, so
//     kube-proxy and CoreDNS reach the API server on the host's loopback
//     while the node namespace has no route to the host.
package agent
