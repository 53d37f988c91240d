// Package etcd is the registry backend over etcd (go.etcd.io/etcd/client/v3).
//
// A Backend is opened for one cluster of one clusterset. It binds every record
// the cluster publishes, and the cluster's liveness record, to one etcd lease
// with the configured TTL and keeps that lease alive: when the cluster's
// controller dies, the lease expires and etcd deletes all its records at once,
// which every watcher sees as deletions.
//
// # Key layout
//
// All keys live under Options.Prefix (default "/mcsd"); values are JSON.
//
//	<prefix>/<clusterset>/clusters/<cluster>/alive                  {"cluster":"<cluster>","instance":"<uid>","since":"<RFC 3339>","ttlSeconds":30}
//	<prefix>/<clusterset>/clusters/<cluster>/exports/<ns>/<name>    {"spec":{...}}                          (registry.ServiceSpec)
//	<prefix>/<clusterset>/clusters/<cluster>/endpoints/<ns>/<name>  {"groups":[...],"updated":"<RFC 3339>"} ([]registry.EndpointGroup)
//
// The alive record's since is when the cluster's records last became live
// (registry.Cluster.Since) and ttlSeconds its lease's TTL; both are written
// with a new lease only. Its instance is registry.Identity.Instance: while
// the alive record lives under another, New refuses to open
// (registry.ErrClusterIDInUse) and writes nothing. An endpoints record's updated is the publishing
// cluster's time of the last change of its groups (registry.Endpoints.Updated):
// a put of the same groups writes nothing and keeps it.
//
// The cluster and Service are taken from the key, never from the value. A
// cluster writes only under its own "<prefix>/<clusterset>/clusters/<cluster>/"
// prefix and reads "<prefix>/<clusterset>/clusters/", so etcd RBAC can enforce
// both: give each cluster's user a role with readwrite on its own prefix and
// read on the clusterset's prefix. SetupAuth makes those users and roles
// (ClusterUser, ReaderUser). etcd checks a lease's revoke, renewal and key
// attachment against writing every key on it, so a cluster's lease is as safe
// as its records; a lease with no key is anyone's.
//
// # Order, liveness and restarts
//
// An export's Order is the etcd CreateRevision of its key: it survives changes
// of the spec and restarts of the controller, and is renewed only when the
// export is withdrawn, or expires, and is stored again.
//
// On start the backend reuses the lease attached to its cluster's alive key if
// that lease still lives, so a controller that restarts within the TTL rewrites
// nothing and watchers see no change. Otherwise it grants a new lease: the old
// records expired with the old lease, or, if only the TTL changed, they move
// to the new lease unchanged. If the lease expires while the backend
// runs (for example while the cluster is partitioned from etcd for longer than
// the TTL), the backend grants a new lease and stores again everything it had
// published, from its in-memory copy.
//
// # Watching
//
// Watch reads the clusterset's prefix into one full Update and then follows an
// etcd watch from the next revision, delivering one Update per watch response.
// A watch that ends while etcd still holds the changes since (its member cut
// off from the others, a stuck watch) is started again from the last change
// taken in. After a compaction past it, or a failed read, Watch counts the
// prefix's keys and reads the keys changed since, in ranges of
// Options.ResyncPageSize keys, and delivers the difference as an
// incremental Update (nothing when nothing changed); it lists the keys only
// when the count says some are gone. Every controller reads at once then,
// and the values of the whole clusterset would cost each of them the
// registry's size. A linearizable read
// every Options.HealthInterval without events checks that etcd can be read;
// when it or a read fails, Watch reports OnConnection(false, err), retries,
// and reports OnConnection(true, nil) after the next read. It never delivers
// deletions just because etcd cannot be reached.
//
// A handler that needs some namespaces only (registry.Scoped, as a
// controller's View is) gets their records alone, and the own cluster's.
// The first read lists the keys without their values (in pages of ten
// times Options.ResyncPageSize keys), then reads the values of the records
// it delivers and of the alive records, in ranges of the keys it listed
// (transactions of at most 64 ranges and Options.ResyncPageSize keys), at
// the listing's revision. When the first page of keys shows that the
// handler needs at least half of the other clusters' records (as a cluster
// that has every namespace does), the rest is read with values instead,
// the values not needed dropped undecoded, so that etcd reads each value
// once. The others are held as keys and revisions alone;
// a namespace the handler comes to need has its records' values read then,
// at the revision the watch has taken every change in up to, and delivered
// in one Update that names it. That read failing is a failed read of etcd:
// the registry is said reachable again once it succeeds.
//
// # Reading without a membership
//
// NewWatcher opens a Watcher: the same Watch over a client of its own, with
// no lease and no writes, so that no cluster of the clusterset sees it. It
// needs read access to the clusterset's prefix only. Its Leases looks up each
// live cluster's lease (one TimeToLive request per cluster), which says when
// the cluster last renewed it.
package etcd
