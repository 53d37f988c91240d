// Package registry defines the service registry that mcsd clusters share: the
// records a cluster publishes for each Service it exports, the view of the
// whole clusterset that importers watch, and the narrow interface every
// backend (etcd, AWS Cloud Map, and the in-memory one for tests) implements.
//
// A backend is opened for one cluster of one clusterset. It writes only that
// cluster's records and reads every live cluster's records of the clusterset.
// Each backend can also be opened read-only, as a ReadOnlyWatcher of a
// clusterset that writes nothing and is no member of it (for status reports
// and tools). Package backends opens the backend a registry URL names.
package registry
