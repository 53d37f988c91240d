// Command testbed starts and stops a local multi-cluster testbed: real
// Kubernetes control planes with kwok nodes (see package testbed).
//
//	testbed build          build the testbed binaries into the cache
//	testbed up -n 3        start clusters c1..c3 (safe to run again)
//	testbed down           stop every process and remove the state
//	testbed coredns -cluster c2
//	                       start a CoreDNS for cluster c2 that answers
//	                       clusterset.local; print its address and leave it
//	                       running until `down`
package main
