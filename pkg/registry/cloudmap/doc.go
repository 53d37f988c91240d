// Package cloudmap is the registry backend over AWS Cloud Map
// (aws-sdk-go-v2 service/servicediscovery), with the data model of the AWS
// Cloud Map MCS controller, so that clusters running either controller
// import each other's exports.
//
// A Backend is opened for one cluster of one clusterset over a narrow
// interface of the SDK client (API). A Kubernetes namespace is a Cloud Map
// namespace (an HTTP namespace created on demand, or an existing private DNS
// namespace of that name), a Service is a Cloud Map service, and every
// endpoint address and port is one instance carrying the AWS controller's
// attributes plus mcsd's own (MCSD_*). Each cluster also keeps one service
// record instance per Service, without an address, in the records service
// of the system namespace (where the AWS controller, which reads every
// instance of a Service's Cloud Map service as an endpoint, does not look),
// holding its export (so that an export without endpoints is visible) and
// its creation time, which is the export's Order and survives restarts.
//
// Cloud Map has no leases: each cluster rewrites a heartbeat, the
// description of a service of its own in the system namespace, every TTL/3,
// and watchers deliver the records of a cluster whose heartbeat is older
// than the TTL as deleted. A heartbeat is no instance operation, so the
// change feed does not see it: one ListServices reads every cluster's. A
// cluster that starts after its heartbeat expired deletes its old instances
// first.
//
// Watch follows a change feed: every PollInterval one ListOperations of the
// account and region lists the instance operations since the last poll,
// GetOperation names the service each new one changed, and only those
// services are read. A sweep every SweepInterval lists and reads everything
// to repair what the feed missed. Namespace and service ids are kept in a
// directory, so that exports do not list.
// NewWatcher opens the same Watch read-only: no heartbeat, no writes, no
// membership. README.md describes the data model, the options and the IAM
// policy.
package cloudmap
