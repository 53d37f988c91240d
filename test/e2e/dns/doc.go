// Package dns proves mcsd's ServiceImports and EndpointSlices are enough for
// stock CoreDNS to answer clusterset.local as KEP-1645 specifies: three real
// clusters, one mcsd and one CoreDNS (kubernetes plugin with the multicluster
// option, see config/coredns) per cluster, and real DNS queries.
package dns
