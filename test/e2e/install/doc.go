// Package install tests what a cluster operator installs: the kustomize
// manifests of config/ (config/default and the etcd and Cloud Map overlays)
// and the Helm chart charts/mcsd. They render, say the same thing, and a real
// API server accepts them; and mcsd, running as the ServiceAccount they ship
// with exactly their RBAC, exports and imports across two clusters, while
// one permission less breaks the import.
//
// With -short only the renders are checked: no testbed, no helm build.
package install
