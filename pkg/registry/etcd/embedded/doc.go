// Package embedded runs a single-node etcd inside the process, for trying
// mcsd out with `mcsd registry` and for tests. It follows go.etcd.io/etcd's
// embed package: a Config with defaults and Validate, Start, a ready signal,
// and Close. A production registry is a real etcd cluster.
package embedded
