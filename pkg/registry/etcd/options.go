package etcd

import (
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"

	"go.etcd.io/etcd/client/pkg/v3/transport"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

// Defaults of Options.
const (
	DefaultPrefix         = "/mcsd"
	DefaultTTL            = 30 * time.Second
	DefaultDialTimeout    = 5 * time.Second
	DefaultRequestTimeout = 10 * time.Second
	DefaultHealthInterval = 5 * time.Second
	DefaultResyncPageSize = 1000
	DefaultResyncJitter   = time.Second
)

// Options configure a Backend, or a read-only Watcher.
type Options struct {
	// Identity is the cluster the backend publishes for and its clusterset.
	// Neither id may contain "/". A Watcher needs the clusterset only.
	Identity registry.Identity

	// Endpoints are the etcd client URLs, e.g. "https://etcd-0:2379".
	Endpoints []string
	// TLS is the client TLS configuration. When nil and CAFile, CertFile or
	// KeyFile is set, it is built from those files.
	TLS *tls.Config
	// CAFile verifies the etcd servers; empty means the system roots.
	CAFile string
	// CertFile and KeyFile are the client certificate (etcd can take the
	// user from its common name) and its key; both or neither.
	CertFile string
	KeyFile  string
	// Username and Password authenticate to etcd when auth is enabled.
	Username string
	Password string

	// DialOptions are added to the etcd client's gRPC dial options:
	// interceptors that count or trace its requests, say.
	DialOptions []grpc.DialOption

	// DialTimeout bounds connecting to etcd. Default 5s.
	DialTimeout time.Duration
	// RequestTimeout bounds each request the backend makes on its own: the
	// start, lease renewals and repairs, the watch's reads and health
	// checks, and each write of a publisher call whose context has no
	// deadline (one that has one is bounded by it). A read or write that
	// gets no answer is tried once per endpoint, every try but the last
	// with an equal share of RequestTimeout, at least a second (see
	// eachMember). Default 10s.
	RequestTimeout time.Duration
	// TTL is how long the cluster's records outlive its controller: the
	// lease TTL, rounded up to whole seconds. Watchers see a dead cluster's
	// records deleted within about TTL; a controller that restarts within
	// TTL keeps its records untouched. The lease is renewed every TTL/3.
	// Default 30s, at least 2s.
	TTL time.Duration
	// HealthInterval is how often a Watch checks that etcd can be read
	// while no events arrive. Default 5s.
	HealthInterval time.Duration
	// Prefix is the key prefix of all mcsd records. Default "/mcsd".
	Prefix string
	// UnreachableAfter is how long reads of a connected registry must keep
	// failing before a Watch reports it unreachable (OnConnection false):
	// a leader election or a restarted member leaves etcd unreadable for a
	// second or two, and a report makes every importer write a condition,
	// then write it again to clear it. Default 2 × HealthInterval.
	UnreachableAfter time.Duration
	// ResyncPageSize is how many keys each read of a resync asks for: a
	// Watch reads the clusterset in pages, all at one revision, each page
	// within RequestTimeout, so that a large registry never makes one
	// request too big or too slow. A listing of keys without values asks
	// for ten times as many a page: its reply is about the bytes of a page
	// of records, though etcd reads every value of the page to drop it.
	// A read of what changed since a revision, for which etcd scans every
	// key of the range asked whatever the limit, asks for ranges of that
	// many keys held. Default 1000.
	ResyncPageSize int64
	// ResyncJitter spreads the resyncs of many controllers: after a
	// compaction past its watch (a watch that ends otherwise resumes), a
	// Watch waits a random time before reading the clusterset again, so
	// that they do not all read at once: up to ResyncJitter, or, in a
	// larger clusterset, up to the time that every live cluster's read of
	// the keys it holds takes one after the other (about 2 µs a key each,
	// at most 30 s). Default 1s; negative: none.
	ResyncJitter time.Duration
}

// Default fills the unset fields with their defaults.
func (o *Options) Default() {
	o.DialTimeout = cmp.Or(o.DialTimeout, DefaultDialTimeout)
	o.RequestTimeout = cmp.Or(o.RequestTimeout, DefaultRequestTimeout)
	o.TTL = cmp.Or(o.TTL, DefaultTTL)
	o.HealthInterval = cmp.Or(o.HealthInterval, DefaultHealthInterval)
	o.Prefix = cmp.Or(o.Prefix, DefaultPrefix)
	o.UnreachableAfter = cmp.Or(o.UnreachableAfter, 2*o.HealthInterval)
	if o.ResyncPageSize <= 0 {
		o.ResyncPageSize = DefaultResyncPageSize
	}
	o.ResyncJitter = cmp.Or(o.ResyncJitter, DefaultResyncJitter)
}

// Validate reports whether the options can open a Backend with New.
func (o *Options) Validate() error {
	if err := o.validateClient(); err != nil {
		return err
	}
	return o.validateBackend()
}

// ValidateWatcher reports whether the options can open a Watcher with
// NewWatcher: Identity.Cluster may be empty, and TTL is not used.
func (o *Options) ValidateWatcher() error {
	if err := o.validateClient(); err != nil {
		return err
	}
	return o.validateReader()
}

// validateClient checks what the etcd client needs.
func (o *Options) validateClient() error {
	if len(o.Endpoints) == 0 {
		return errors.New("no etcd endpoints")
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		return errors.New("client certificate and key files must be set together")
	}
	// The files are read now, not once the client is made: a missing or
	// unreadable one is said at start.
	if _, err := o.tlsConfig(); err != nil {
		return err
	}
	return nil
}

// validateBackend checks what a Backend needs beyond its client.
func (o *Options) validateBackend() error {
	if err := o.Identity.Validate(); err != nil {
		return fmt.Errorf("identity: %w", err)
	}
	if err := o.validateReader(); err != nil {
		return err
	}
	if o.TTL < 2*time.Second {
		return fmt.Errorf("ttl %s is shorter than 2s", o.TTL)
	}
	return nil
}

// validateReader checks what reading a clusterset needs beyond the client.
func (o *Options) validateReader() error {
	if err := registry.ValidateClusterSetID(o.Identity.ClusterSet); err != nil {
		return fmt.Errorf("identity: %w", err)
	}
	if o.Identity.Cluster != "" {
		if err := registry.ValidateClusterID(o.Identity.Cluster); err != nil {
			return fmt.Errorf("identity: %w", err)
		}
	}
	if o.DialTimeout < 0 || o.RequestTimeout <= 0 || o.HealthInterval <= 0 {
		return errors.New("timeouts and intervals must be positive")
	}
	if o.Prefix == "" {
		return errors.New("empty key prefix")
	}
	return nil
}

// ttlSeconds is the lease TTL.
func (o *Options) ttlSeconds() int64 {
	return int64((o.TTL + time.Second - 1) / time.Second)
}

// tlsConfig returns the client TLS configuration, nil for plain connections.
func (o *Options) tlsConfig() (*tls.Config, error) {
	if o.TLS != nil {
		return o.TLS, nil
	}
	if o.CAFile == "" && o.CertFile == "" {
		if slices.ContainsFunc(o.Endpoints, func(e string) bool { return strings.HasPrefix(e, "https://") }) {
			// etcds:// without a CA: the system's roots.
			return &tls.Config{MinVersion: tls.VersionTLS12}, nil
		}
		return nil, nil
	}
	info := transport.TLSInfo{CertFile: o.CertFile, KeyFile: o.KeyFile, TrustedCAFile: o.CAFile}
	cfg, err := info.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("client tls: %w", err)
	}
	return cfg, nil
}
