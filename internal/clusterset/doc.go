// Package clusterset keeps this controller's view of the whole clusterset as
// the registry delivers it: every live cluster's exports and endpoints, by
// Service. It turns a backend's watch into per-Service change notifications
// for the export and import controllers, and remembers whether the registry
// is reachable, so that nothing is deleted while it is not.
package clusterset
