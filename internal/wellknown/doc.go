// Package wellknown holds the label values and annotation names mcsd writes
// on the objects it makes, in one place for the controllers that write and
// read them, the status report and the tests. It imports nothing of mcsd.
package wellknown
