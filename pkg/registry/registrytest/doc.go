// Package registrytest is the conformance suite every registry backend
// passes. A backend's tests call Run with a Factory that opens the backend on
// a real (or embedded) registry; the suite checks, through the
// registry.Registry interface only, what the importers and exporters rely on:
// watch delivery, write skipping, withdrawal, isolation between clusters and
// clustersets, export order, liveness, and the Updated and Since stamps.
// RunReadOnly checks a backend's read-only watcher: it sees what members see
// and is no member itself. RunInstances checks the refusal of a cluster id
// that another Kubernetes cluster holds; RunLapse, for a backend that is a
// registry.Lapser, what it says while cut off its registry for longer than
// its TTL, and after.
//
// Recorder, a registry.Handler that queues what a Watch delivers, is exported
// for backend-specific tests.
package registrytest
