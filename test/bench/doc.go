// Command bench measures mcsd on the testbed: propagation latency (export →
// import, endpoint change, export → DNS answer), the cold start of a
// clusterset, and the cost (controller CPU and memory, API writes, registry
// operations) of each, and writes a report with plots into a results
// folder. `make bench` runs it; docs/performance.md explains the figures.
//
//	go run ./test/bench -clusters 3 -services 1000 -endpoints 10 -churn 5/s -out results/$(date +%Y%m%d-%H%M%S)
//	go run ./test/bench -registry cloudmap -clusters 2 -services 100 -out results/cloudmap
package main
