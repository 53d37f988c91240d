// Package manager runs mcsd in one cluster: it waits for the cluster's
// identity, takes leadership, opens the registry for that identity, and runs
// the export and import controllers against a shared view of the clusterset
// until the context ends or the identity changes.
package manager
