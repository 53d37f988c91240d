// Package imports is the import side of mcsd: for every Service that some
// cluster of the clusterset exports, it keeps in this cluster a ServiceImport,
// the Service it derives for the import's cluster IPs (ClusterSetIP imports
// only) and one set of EndpointSlices per source cluster, all converged from
// the registry view and repaired when edited or deleted by hand.
//
// It deletes nothing while the registry is unreachable or not yet read, and
// it never touches a ServiceImport, Service or EndpointSlice it did not
// create.
package imports
