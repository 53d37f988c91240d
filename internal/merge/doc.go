// Package merge turns every cluster's export records of one Service into the
// ServiceImport that all clusters should hold and the Conflict condition that
// every export of the Service carries (KEP-1645: the oldest export wins, ports
// are the union). It is pure: no I/O, no clock, no logging, and its output
// depends only on its input, never on the input's order.
package merge
