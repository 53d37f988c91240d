// Package report holds what a benchmark run measured (Results), the
// statistics over its samples, and the report it writes for a reader: a
// markdown table, PNG plots of the latency distributions and of convergence
// time against the number of services, and the raw figures as JSON and CSV.
// It does no measuring itself.
package report
