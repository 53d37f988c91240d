// Package backends opens the registry backend a URL names. An explicit table
// maps each URL scheme to its backend's constructor; each backend parses its
// own URL into its own Options (etcd.ParseURL, cloudmap.ParseURL). It sits
// beside package registry, which the backends import.
package backends
