// Package metrics defines mcsd's Prometheus metrics and keeps them: gauges
// of the ServiceExports and ServiceImports by state (the controllers report
// each object as they reconcile it and forget it when it goes), counters and
// latencies of registry operations (a decorator around registry.Registry),
// the registry's reachability, and how long a change of a cluster's endpoints
// takes to reach this cluster's EndpointSlices.
//
// The collectors live on controller-runtime's registry, once per process.
// Several managers may run in one process (a restart after an identity
// change, or one per cluster in the end-to-end tests), so every series
// carries the id of the cluster it is about in the "cluster" label.
package metrics
