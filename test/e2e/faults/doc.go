// Package faults holds the end-to-end scenarios of failures: a cluster down
// past the registry TTL, a controller restarted within it, the registry
// down, and a ServiceExport deleted while its controller is down. The tests
// stop and start shared parts of one environment (three clusters, one
// registry), so they run one after the other, never in parallel, and each
// puts back what it stopped.
package faults
