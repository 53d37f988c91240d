// Package netns creates and removes the Linux network namespaces of the
// testbed's data plane, through iproute2's `ip`. Every namespace a testbed
// makes carries the testbed's prefix (Prefix), so that removing a testbed, or
// cleaning up after one that crashed, removes exactly its own namespaces,
// their links and nftables tables (which live inside them), and their
// processes, and nothing of another testbed's or of the host.
package netns
