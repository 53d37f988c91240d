package cloudmap

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

// Defaults of Options.
const (
	DefaultTTL              = 60 * time.Second
	DefaultPollInterval     = 2 * time.Second
	DefaultSweepInterval    = 15 * time.Minute
	DefaultFeedOverlap      = 10 * time.Second
	DefaultSystemNamespace  = "mcsd.system"
	DefaultMaxAttempts      = 8
	DefaultMaxBackoff       = 20 * time.Second
	DefaultOperationTimeout = 2 * time.Minute
	DefaultConcurrency      = 8
)

// The Cloud Map operations the backend calls, the keys of Options.RateLimits.
const (
	OpListNamespaces            = "ListNamespaces"
	OpListServices              = "ListServices"
	OpListInstances             = "ListInstances"
	OpCreateHTTPNamespace       = "CreateHttpNamespace"
	OpCreateService             = "CreateService"
	OpDeleteNamespace           = "DeleteNamespace"
	OpDeleteService             = "DeleteService"
	OpGetOperation              = "GetOperation"
	OpRegisterInstance          = "RegisterInstance"
	OpDeregisterInstance        = "DeregisterInstance"
	OpDiscoverInstances         = "DiscoverInstances"
	OpDiscoverInstancesRevision = "DiscoverInstancesRevision"
	OpListOperations            = "ListOperations"
	OpGetInstance               = "GetInstance"
	OpGetService                = "GetService"
	OpGetNamespace              = "GetNamespace"
	OpUpdateService             = "UpdateService"
)

// RateLimit is a token bucket: QPS calls a second on average, Burst at once.
type RateLimit struct {
	QPS   float64
	Burst int
}

// DefaultRateLimits are the client-side limits per operation, below Cloud
// Map's default API quotas so that several clusters of one account fit in
// them. The data-plane calls (Discover*) have the highest quotas.
func DefaultRateLimits() map[string]RateLimit {
	return map[string]RateLimit{
		OpListNamespaces:            {QPS: 1, Burst: 5},
		OpListServices:              {QPS: 2, Burst: 10},
		OpListInstances:             {QPS: 5, Burst: 20},
		OpCreateHTTPNamespace:       {QPS: 0.5, Burst: 2},
		OpCreateService:             {QPS: 5, Burst: 20},
		OpDeleteNamespace:           {QPS: 0.5, Burst: 2},
		OpDeleteService:             {QPS: 2, Burst: 10},
		OpGetOperation:              {QPS: 100, Burst: 200},
		OpRegisterInstance:          {QPS: 50, Burst: 100},
		OpDeregisterInstance:        {QPS: 50, Burst: 100},
		OpDiscoverInstances:         {QPS: 200, Burst: 400},
		OpDiscoverInstancesRevision: {QPS: 200, Burst: 400},
		OpListOperations:            {QPS: 5, Burst: 10},
		OpGetInstance:               {QPS: 50, Burst: 100},
		OpGetService:                {QPS: 10, Burst: 20},
		OpGetNamespace:              {QPS: 5, Burst: 10},
		OpUpdateService:             {QPS: 2, Burst: 10},
	}
}

// Options configure a Backend, or a read-only Watcher. The zero value of
// every field but Identity takes its default.
type Options struct {
	// Identity is the cluster the backend publishes for and its clusterset.
	// A Watcher needs the clusterset only.
	Identity registry.Identity

	// Region is the AWS region of the Cloud Map namespaces. Empty means the
	// SDK's default chain (AWS_REGION, shared config, IMDS).
	Region string
	// Endpoint overrides the Cloud Map endpoint URL, for testing against a
	// local server such as moto. The SDK's "data-" host prefix of
	// DiscoverInstances and DiscoverInstancesRevision is then disabled.
	Endpoint string
	// Credentials replaces the SDK's default credential chain when set.
	Credentials aws.CredentialsProvider

	// TTL is how long a cluster's records outlive its last heartbeat: the
	// backend refreshes its heartbeat every TTL/3, and importers deliver the
	// records of a cluster whose heartbeat is older than TTL as deleted.
	// Default 60s, at least 1s.
	TTL time.Duration
	// PollInterval is how often a Watch polls the change feed: one
	// ListOperations of the account and region for the instance operations
	// since the last poll, a GetOperation for each operation not seen
	// before, and a read of each Cloud Map service they name. A change is
	// seen within about this long. Default 2s.
	PollInterval time.Duration
	// SweepInterval is how often a Watch reads everything again (lists the
	// namespaces and services, checks each service's revision and reads
	// those that moved), which repairs what the change feed missed. Default
	// 15m, at least PollInterval.
	SweepInterval time.Duration
	// FeedOverlap is how far back each poll of the change feed looks before
	// the last one (deduplicated by operation id), which covers operations
	// listed late and clock skew between the cluster and Cloud Map.
	// Default 10s.
	FeedOverlap time.Duration
	// SystemNamespace is the HTTP namespace holding the heartbeats. Its name
	// is not a valid Kubernetes namespace name, so it never collides with an
	// exported Service's namespace. Default "mcsd.system".
	SystemNamespace string
	// CleanupEmpty deletes the Cloud Map services and namespaces that mcsd
	// created once the last instance in them is withdrawn, and the
	// heartbeat services of clusters gone for a day (staleBeat).
	CleanupEmpty bool

	// RateLimits are client-side limits per operation (the Op* constants);
	// missing operations take DefaultRateLimits.
	RateLimits map[string]RateLimit
	// MaxAttempts is how many times the SDK tries one call that fails with a
	// throttling error, a 5xx or a network error, with exponential backoff
	// and jitter between tries. Default 8.
	MaxAttempts int
	// MaxBackoff caps the backoff between two tries. Default 20s.
	MaxBackoff time.Duration
	// OperationTimeout bounds the wait for one asynchronous Cloud Map
	// operation (namespace creation, instance registration). Default 2m.
	OperationTimeout time.Duration
	// Concurrency is how many instance registrations one call makes at once.
	// Default 8.
	Concurrency int

	// now is the backend's clock; nil for time.Now. Tests set it to be
	// past a TTL without waiting for it.
	now func() time.Time
}

// Default fills the unset fields with their defaults.
func (o *Options) Default() {
	o.TTL = cmp.Or(o.TTL, DefaultTTL)
	o.PollInterval = cmp.Or(o.PollInterval, DefaultPollInterval)
	o.SweepInterval = cmp.Or(o.SweepInterval, max(DefaultSweepInterval, o.PollInterval))
	o.FeedOverlap = cmp.Or(o.FeedOverlap, DefaultFeedOverlap)
	o.SystemNamespace = cmp.Or(o.SystemNamespace, DefaultSystemNamespace)
	limits := DefaultRateLimits()
	maps.Copy(limits, o.RateLimits)
	o.RateLimits = limits
	o.MaxAttempts = cmp.Or(o.MaxAttempts, DefaultMaxAttempts)
	o.MaxBackoff = cmp.Or(o.MaxBackoff, DefaultMaxBackoff)
	o.OperationTimeout = cmp.Or(o.OperationTimeout, DefaultOperationTimeout)
	o.Concurrency = cmp.Or(o.Concurrency, DefaultConcurrency)
}

// Validate reports whether the options can open a Backend.
func (o *Options) Validate() error {
	var errs []error
	if err := o.Identity.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("identity: %w", err))
	} else if !newEncoder(o.Identity).heartbeatFits() {
		errs = append(errs, fmt.Errorf("identity: the cluster and clusterset ids are too long together for the heartbeat (a Cloud Map description of at most %d characters)", maxDescription))
	}
	return errors.Join(append(errs, o.validateReader())...)
}

// ValidateWatcher reports whether the options can open a Watcher:
// Identity.Cluster may be empty.
func (o *Options) ValidateWatcher() error {
	var errs []error
	if err := registry.ValidateClusterSetID(o.Identity.ClusterSet); err != nil {
		errs = append(errs, fmt.Errorf("identity: %w", err))
	}
	return errors.Join(append(errs, o.validateReader())...)
}

// validateReader checks everything but the presence of the ids.
func (o *Options) validateReader() error {
	var errs []error
	if len(o.Identity.Cluster) > maxAttrValue || len(o.Identity.ClusterSet) > maxAttrValue {
		errs = append(errs, fmt.Errorf("cluster and clusterset ids must be at most %d characters", maxAttrValue))
	}
	if o.Endpoint != "" {
		if u, err := url.Parse(o.Endpoint); err != nil || u.Scheme == "" || u.Host == "" {
			errs = append(errs, fmt.Errorf("endpoint %q is not an absolute URL", o.Endpoint))
		}
	}
	if o.TTL < time.Second {
		errs = append(errs, fmt.Errorf("ttl %s is shorter than 1s", o.TTL))
	}
	if o.PollInterval <= 0 {
		errs = append(errs, errors.New("poll interval must be positive"))
	}
	if o.SweepInterval < o.PollInterval {
		errs = append(errs, fmt.Errorf("sweep interval %s is shorter than the poll interval %s", o.SweepInterval, o.PollInterval))
	}
	if o.FeedOverlap < 0 {
		errs = append(errs, errors.New("feed overlap must not be negative"))
	}
	if o.SystemNamespace == "" || !strings.Contains(o.SystemNamespace, ".") {
		errs = append(errs, fmt.Errorf("system namespace %q must contain a dot, so that it is no Kubernetes namespace", o.SystemNamespace))
	}
	known := DefaultRateLimits()
	for _, op := range slices.Sorted(maps.Keys(o.RateLimits)) {
		l := o.RateLimits[op]
		if _, ok := known[op]; !ok {
			errs = append(errs, fmt.Errorf("rate limit for unknown operation %q", op))
		}
		if l.QPS <= 0 || l.Burst < 1 {
			errs = append(errs, fmt.Errorf("rate limit for %s: qps and burst must be positive", op))
		}
	}
	if o.MaxAttempts < 1 {
		errs = append(errs, errors.New("max attempts must be at least 1"))
	}
	if o.MaxBackoff <= 0 || o.OperationTimeout <= 0 {
		errs = append(errs, errors.New("max backoff and operation timeout must be positive"))
	}
	if o.Concurrency < 1 {
		errs = append(errs, errors.New("concurrency must be at least 1"))
	}
	return errors.Join(errs...)
}

// heartbeatInterval is how often the heartbeat is refreshed.
func (o *Options) heartbeatInterval() time.Duration { return o.TTL / 3 }
