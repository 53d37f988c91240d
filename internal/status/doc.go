// Package status reports on a clusterset for `mcsd status`: the live
// clusters and their leases or heartbeats, every exported Service with the
// import the exports merge into and their conflicts (by internal/merge, as
// every mcsd computes them), and, for one cluster, its ServiceExports and
// ServiceImports and how fresh they are.
//
// Collect reads the registry once, read-only (a Watch until its first full
// update), and the local cluster if asked; Build turns what was read into a
// Report without I/O or a clock of its own; WriteTable and WriteJSON print a
// Report.
package status
