// Command mcsd is multi-cluster service discovery for Kubernetes: run one in
// every cluster of a clusterset, all pointed at the same registry.
package main
