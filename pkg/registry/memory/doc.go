// Package memory is a registry backend held in the process's memory: a Store
// stands for the shared registry (what an etcd cluster or a Cloud Map account
// is for real controllers), and Open opens it for one cluster of one
// clusterset. It passes the same conformance suite as the etcd and Cloud Map
// backends (registrytest), and delivers every change to every watcher as soon
// as the write returns, so tests of the controllers, and tests that carry an
// export from one controller to another in one process, need no server and
// wait for nothing but the state they expect.
//
// Liveness is modelled on etcd's leases: a cluster's records outlive its last
// open Registry by the TTL it was opened with, then they are deleted, and a
// Registry opened again within the TTL keeps them and their order.
//
// For tests, a Watcher can be cut off from the store and reconnected
// (Disconnect, Reconnect), Options.Stamp sets the clock that stamps a
// cluster's endpoints, and Snapshot reads the store without a watch.
package memory
