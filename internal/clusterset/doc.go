// Package clusterset keeps this controller's view of the clusterset as
// the registry delivers it: every live cluster's exports and endpoints, by
// Service, and whether the registry is reachable, so that nothing is deleted
// while it is not.
//
// The View is the one path from the registry's watch to the controllers:
// View.Source is a controller-runtime source that adds a request to a
// controller's workqueue for each Service whose records change, and for a
// change of reachability, from the controller's start until it stops.
//
// A ScopedView holds the namespaces its cluster has only, where the backend
// can deliver those alone (registry.Scoped); HasSyncedFor tells which it
// holds in full.
package clusterset
