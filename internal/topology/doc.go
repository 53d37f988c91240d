// Package topology decides the hints of an import's EndpointSlices, through
// which Kubernetes' own kube-proxy keeps traffic close: in the client's
// zone (the import's trafficDistribution) or in the client's own cluster
// (mcsd's traffic-preference annotation), falling over to the rest of the
// clusterset when none of those endpoints is ready. It is a pure function
// of the import's endpoints and this cluster's zones, with table tests.
package topology
