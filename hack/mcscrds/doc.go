// Command mcscrds writes the ServiceExport and ServiceImport CRDs, exactly as
// the pinned sigs.k8s.io/mcs-api module ships them, into a directory so that
// kustomize can apply them. `make manifests` runs it; `make verify` fails when
// the files drift from the module.
package main
