// Command mcscrds writes the ServiceExport and ServiceImport CRDs of the
// pinned sigs.k8s.io/mcs-api module into a directory so that kustomize can
// apply them: the module's schemas unchanged, with printer columns that show
// each object's health in `kubectl get` (conditions, types, IPs, exporting
// clusters). `make manifests` runs it; `make verify` fails when the files
// drift.
package main
