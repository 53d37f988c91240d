// Package harness runs mcsd's benchmark: a testbed of real clusters, a
// registry (the embedded etcd, or Cloud Map on moto), and one mcsd
// controller per cluster, each in a process of its own so that its CPU and
// memory can be measured apart from the API servers and the harness. It
// generates the load (Services with hand-written EndpointSlices, exports,
// endpoint churn), times every change from watches in the source and the
// importing clusters, and collects the controllers' API writes, registry
// operations and profiles into a report.Results.
package harness
