// Package export is the ServiceExport controller: for each ServiceExport it
// reads the local Service of the same name and its EndpointSlices, publishes
// this cluster's export and endpoints to the registry (or withdraws them), and
// reports the outcome in the ServiceExport's Valid, Ready and Conflict
// conditions, where Conflict follows every cluster's exports as the
// clusterset view delivers them.
//
// The endpoints it publishes go to this cluster's imports too, directly
// (clusterset.Local). While the View reports the registry unreachable it
// publishes nothing there (Ready=False says so; withdrawals are still
// tried); the registry's return brings every export back.
//
// EndpointSlices labelled endpointslice.kubernetes.io/managed-by with
// wellknown.ManagedBy are the ones the import controller writes; they are
// never exported again.
//
// Its Reconcile is package skeleton's five steps, in export.go: fetch (the
// ServiceExport), finalize (deletion, or the finalizer to add), compute (the
// Service's records, spec.go), apply (the registry writes, records.go, with
// the finalizer beside them, finalizer.go) and patchStatus (the conditions,
// status.go).
package export
