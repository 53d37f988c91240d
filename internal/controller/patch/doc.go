// Package patch writes what a reconciler changed of an object's status: one
// merge patch of the status subresource, and none when the status is as it
// was read, so that reconciling an unchanged object writes nothing.
package patch
