package backends

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/cloudmap"
	"github.com/mcsd-io/mcsd/pkg/registry/etcd"
)

// Settings are what a registry URL does not hold: files, secrets and the
// lease TTL. A backend ignores the ones it has no use for.
type Settings struct {
	// CAFile, CertFile and KeyFile configure TLS (etcds).
	CAFile, CertFile, KeyFile string
	// Username and Password authenticate to etcd.
	Username, Password string
	// TTL is how long a cluster's records outlive it; zero for the backend's
	// default.
	TTL time.Duration
}

// Backend opens one backend, as a URL and Settings configured it.
type Backend struct {
	// Name is the backend's name in metrics and logs.
	Name string
	// Open opens the backend for a cluster of a clusterset.
	Open func(ctx context.Context, id registry.Identity) (registry.Registry, error)
	// OpenWatcher opens a read-only watcher of a clusterset.
	OpenWatcher func(ctx context.Context, clusterSet string) (registry.ReadOnlyWatcher, error)
}

// schemes maps a URL scheme to the constructor of its backend.
var schemes = map[string]func(*url.URL, Settings) (Backend, error){
	"etcd":     etcdBackend,
	"etcds":    etcdBackend,
	"cloudmap": cloudMapBackend,
}

// Schemes lists the URL schemes Open knows, sorted.
func Schemes() []string {
	out := make([]string, 0, len(schemes))
	for s := range schemes {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// Open returns the backend rawURL names, configured with s.
func Open(rawURL string, s Settings) (Backend, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return Backend{}, fmt.Errorf("parse registry URL: %w", err)
	}
	newBackend, ok := schemes[u.Scheme]
	if !ok {
		return Backend{}, fmt.Errorf("registry URL %q: unknown scheme %q (known: %s)", u.Redacted(), u.Scheme, strings.Join(Schemes(), ", "))
	}
	return newBackend(u, s)
}

func etcdBackend(u *url.URL, s Settings) (Backend, error) {
	opts, err := etcd.ParseURL(u)
	if err != nil {
		return Backend{}, err
	}
	opts.CAFile, opts.CertFile, opts.KeyFile = s.CAFile, s.CertFile, s.KeyFile
	opts.Username, opts.Password = s.Username, s.Password
	opts.TTL = s.TTL
	withID := func(o etcd.Options, id registry.Identity) etcd.Options { o.Identity = id; return o }
	if err := settingsValid(opts, withID, (*etcd.Options).Default, (*etcd.Options).Validate); err != nil {
		return Backend{}, err
	}
	return newBackend(etcd.Name, opts, withID, etcd.New, etcd.NewWatcher), nil
}

func cloudMapBackend(u *url.URL, s Settings) (Backend, error) {
	opts, err := cloudmap.ParseURL(u)
	if err != nil {
		return Backend{}, err
	}
	opts.TTL = s.TTL
	withID := func(o cloudmap.Options, id registry.Identity) cloudmap.Options { o.Identity = id; return o }
	if err := settingsValid(opts, withID, (*cloudmap.Options).Default, (*cloudmap.Options).Validate); err != nil {
		return Backend{}, err
	}
	if err := cloudmap.CheckRegion(context.Background(), opts); err != nil {
		return Backend{}, fmt.Errorf("registry settings: %w", err)
	}
	return newBackend(cloudmap.Name, opts, withID, cloudmap.New, cloudmap.NewWatcher), nil
}

// settingsValid checks opts as the backend will when it opens, under an
// identity of its own (the cluster's is read later, from the cluster): a
// setting that is wrong (a certificate without its key, a TTL too short)
// is said at start, not once the cluster's identity is set and the
// controller leads.
func settingsValid[O any](opts O, withID func(O, registry.Identity) O, defaults func(*O), validate func(*O) error) error {
	o := withID(opts, registry.Identity{ClusterSet: "settings", Cluster: "settings"})
	defaults(&o)
	if err := validate(&o); err != nil {
		return fmt.Errorf("registry settings: %w", err)
	}
	return nil
}

// newBackend is the Backend of a backend's constructors over opts, which
// withID gives an identity.
func newBackend[O any, R registry.Registry, W registry.ReadOnlyWatcher](
	name string, opts O, withID func(O, registry.Identity) O,
	open func(context.Context, O) (R, error), watch func(context.Context, O) (W, error),
) Backend {
	return Backend{
		Name: name,
		Open: func(ctx context.Context, id registry.Identity) (registry.Registry, error) {
			r, err := open(ctx, withID(opts, id))
			if err != nil {
				return nil, err // not a nil *Backend in a non-nil interface
			}
			return r, nil
		},
		OpenWatcher: func(ctx context.Context, clusterSet string) (registry.ReadOnlyWatcher, error) {
			w, err := watch(ctx, withID(opts, registry.Identity{ClusterSet: clusterSet}))
			if err != nil {
				return nil, err
			}
			return w, nil
		},
	}
}
