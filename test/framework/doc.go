// Package framework runs mcsd end to end for tests and the benchmark: a
// testbed of real clusters, a registry (an embedded etcd, an etcd cluster,
// or Cloud Map on moto), and one mcsd controller per cluster running in the
// test process, each of which can be stopped and restarted. It counts the
// API writes each controller makes, so tests can prove that unchanged
// objects are never rewritten; and it holds the helpers the end-to-end
// packages (test/e2e/...) and test/bench share: pods, their addresses, the
// imported EndpointSlices, a shell in a pod.
package framework
