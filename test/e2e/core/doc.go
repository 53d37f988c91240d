// Package core holds the end-to-end scenarios of export and import on three
// real clusters that share an etcd registry, one mcsd per cluster.
package core
