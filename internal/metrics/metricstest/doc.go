// Package metricstest reads mcsd's metrics back from a Prometheus gatherer,
// for tests that run controllers in-process and select their series by
// label (every mcsd series carries the cluster it is about).
package metricstest
