// Package framework runs mcsd end to end for tests: a testbed of real
// clusters, an embedded etcd registry, and one mcsd controller per cluster
// running in the test process, each of which can be stopped and restarted.
// It counts the API writes each controller makes, so tests can prove that
// unchanged objects are never rewritten.
package framework
