// Package imports is the import side of mcsd: for every Service that some
// cluster of the clusterset exports, it keeps in this cluster a ServiceImport,
// the Service it derives for the import's cluster IPs (ClusterSetIP imports
// only) and one set of EndpointSlices per source cluster, all converged from
// the registry view and repaired when edited (their labels too) or deleted
// by hand.
//
// This cluster's own endpoints come from its export controller
// (clusterset.Local), not through the registry; while the registry is
// unreachable they are the one thing it keeps writing. It deletes nothing
// while the registry is unreachable or not yet read, and it never touches a
// ServiceImport, Service or EndpointSlice it did not create.
//
// Its Reconcile is package skeleton's five steps, in reconciler.go: fetch (the
// ServiceImport and the View's records of the Service), finalize (the import
// of a Service no longer exported goes, delete.go), compute (the merge and the
// topology hints, hints.go), apply (the derived Service, the ServiceImport and
// the EndpointSlices: service.go, serviceimport.go, endpointslices.go; an
// import of the AWS controller is taken over first, takeover.go) and
// patchStatus (status.go).
//
// The EndpointSlices' writes are planned by a pure function (sliceplan.go):
// a source cluster whose slices carry the digest of their present inputs,
// and that no one else wrote, is neither built nor compared again, so that a
// reconcile after one cluster's change costs that cluster's slices.
package imports
