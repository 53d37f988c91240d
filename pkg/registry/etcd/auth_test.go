package etcd_test

import (
	"context"
	"crypto/tls"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/mcsd-io/mcsd/internal/metrics"
	"github.com/mcsd-io/mcsd/internal/metrics/metricstest"
	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/etcd"
	"github.com/mcsd-io/mcsd/pkg/registry/etcd/embedded"
	"github.com/mcsd-io/mcsd/pkg/registry/etcd/embedded/embeddedtest"
	"github.com/mcsd-io/mcsd/pkg/registry/registrytest"
)

// secureEtcd is an embedded etcd with TLS, client certificates and auth on.
type secureEtcd struct {
	srv *embedded.Server
	dir string
	// root manages auth.
	root *clientv3.Client
	// mu serializes writing certificates.
	mu sync.Mutex
}

// startSecure starts an etcd with TLS and client certificate auth, and makes
// the root user with a certificate; auth is not enabled yet.
func startSecure(t *testing.T) *secureEtcd {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "certs")
	must(t, embedded.WriteCerts(dir, []string{"127.0.0.1"}, []embedded.ClientCert{{Name: "root", CommonName: etcd.RootUser}}))
	s := embeddedtest.Start(t, embedded.Config{
		ListenClientURL: "https://127.0.0.1:0",
		CertFile:        filepath.Join(dir, embedded.ServerCertFile),
		KeyFile:         filepath.Join(dir, embedded.ServerKeyFile),
		TrustedCAFile:   filepath.Join(dir, embedded.CACertFile),
	})
	e := &secureEtcd{srv: s, dir: dir}
	e.root = e.client(t, "root", "", "")
	return e
}

// tlsFor is the client TLS of the certificate named name, made for common
// name cn if missing.
func (e *secureEtcd) tlsFor(t *testing.T, name, cn string) *tls.Config {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	must(t, embedded.WriteCerts(e.dir, nil, []embedded.ClientCert{{Name: name, CommonName: cn}}))
	info := transport.TLSInfo{
		CertFile:      filepath.Join(e.dir, name+".crt"),
		KeyFile:       filepath.Join(e.dir, name+".key"),
		TrustedCAFile: filepath.Join(e.dir, embedded.CACertFile),
	}
	cfg, err := info.ClientConfig()
	must(t, err)
	return cfg
}

// client connects with a certificate for user cn and, if user is set, as
// that user with password.
func (e *secureEtcd) client(t *testing.T, cn, user, password string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{
		Endpoints: []string{e.srv.ClientURL()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		TLS: e.tlsFor(t, fileName(cn), cn), Username: user, Password: password,
	})
	must(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// opts are backend options that reach e with the certificate of user cn.
func (e *secureEtcd) opts(t *testing.T, id registry.Identity, cn string) etcd.Options {
	return etcd.Options{Identity: id, Endpoints: []string{e.srv.ClientURL()}, Prefix: prefix, TLS: e.tlsFor(t, fileName(cn), cn)}
}

func fileName(user string) string { return strings.ReplaceAll(user, ":", "_") }

func wantDenied(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("%s: err = %v, want permission denied", what, err)
	}
}

// TestAuthIsolatesClusters sets up users with SetupAuth and checks what
// etcd lets each one do to the records of the other clusters.
func TestAuthIsolatesClusters(t *testing.T) {
	t.Parallel()
	e := startSecure(t)
	ctx := t.Context()
	users, err := etcd.SetupAuth(ctx, e.root, etcd.AuthOptions{Prefix: prefix, ClusterSet: "set1", Clusters: []string{"c2", "c1"}, Reader: true, EnableAuth: true})
	must(t, err)
	if len(users) != 3 || users[0].Name != "mcsd:set1:c1" || users[1].Name != "mcsd:set1:c2" || users[2].Name != "mcsd-reader:set1" || !users[0].Created {
		t.Fatalf("SetupAuth() users = %+v", users)
	}
	// Again, with auth on: nothing changes, nothing fails.
	again, err := etcd.SetupAuth(ctx, e.root, etcd.AuthOptions{Prefix: prefix, ClusterSet: "set1", Clusters: []string{"c1", "c2"}, Reader: true, EnableAuth: true})
	must(t, err)
	if len(again) != 3 || again[0].Created {
		t.Fatalf("SetupAuth() again = %+v, want the users, none created", again)
	}

	set := func(c string) registry.Identity { return registry.Identity{ClusterSet: "set1", Cluster: c} }
	a := openWith(t, e.opts(t, set("c1"), "mcsd:set1:c1"))
	b := openWith(t, e.opts(t, set("c2"), "mcsd:set1:c2"))
	must(t, a.PutExport(ctx, web, spec))
	must(t, b.PutExport(ctx, web, spec2))

	c2 := e.client(t, "mcsd:set1:c2", "", "")
	aExport := prefix + "/set1/clusters/c1/exports/shop/web"
	aAlive := prefix + "/set1/clusters/c1/alive"
	_, err = c2.Put(ctx, aExport, `{"spec":{}}`)
	wantDenied(t, "c2 puts c1's export", err)
	_, err = c2.Put(ctx, prefix+"/set1/clusters/c1/exports/shop/other", `{"spec":{}}`)
	wantDenied(t, "c2 puts a new export under c1", err)
	_, err = c2.Delete(ctx, aExport)
	wantDenied(t, "c2 deletes c1's export", err)
	_, err = c2.Delete(ctx, aAlive)
	wantDenied(t, "c2 deletes c1's alive record", err)
	_, err = c2.Delete(ctx, prefix+"/set1/clusters/", clientv3.WithPrefix())
	wantDenied(t, "c2 deletes the clusterset", err)
	_, err = c2.Get(ctx, prefix+"/set2/clusters/", clientv3.WithPrefix())
	wantDenied(t, "c2 reads another clusterset", err)
	_, err = c2.Get(ctx, "/other")
	wantDenied(t, "c2 reads outside the prefix", err)
	resp, err := c2.Get(ctx, prefix+"/set1/clusters/", clientv3.WithPrefix())
	must(t, err)
	if len(resp.Kvs) != 4 {
		t.Errorf("c2 reads %d keys of the clusterset, want 4", len(resp.Kvs))
	}

	// Leases: etcd checks a revoke, a renewal and a put on a lease against
	// writing every key on the lease, a lookup against reading them.
	aLease := leaseOf(t, e.root, aAlive)
	_, err = c2.Revoke(ctx, aLease)
	wantDenied(t, "c2 revokes c1's lease", err)
	_, err = c2.KeepAliveOnce(ctx, aLease)
	wantDenied(t, "c2 renews c1's lease", err)
	_, err = c2.Put(ctx, prefix+"/set1/clusters/c2/exports/shop/x", "{}", clientv3.WithLease(aLease))
	wantDenied(t, "c2 puts its own key on c1's lease", err)
	if _, err := c2.TimeToLive(ctx, aLease); err != nil {
		t.Errorf("c2 looks up c1's lease: %v, want allowed (it may read c1's keys)", err)
	}
	// A lease with no key on it is anyone's: any user may grant one, and
	// renew or revoke one it knows the id of.
	grant, err := c2.Grant(ctx, 60)
	must(t, err)
	reader := e.client(t, "mcsd-reader:set1", "", "")
	_, err = reader.Put(ctx, aExport, "{}")
	wantDenied(t, "reader puts", err)
	_, err = reader.Delete(ctx, aAlive)
	wantDenied(t, "reader deletes", err)
	_, err = reader.Revoke(ctx, aLease)
	wantDenied(t, "reader revokes", err)
	_, err = reader.KeepAliveOnce(ctx, aLease)
	wantDenied(t, "reader renews", err)
	if _, err := reader.Revoke(ctx, grant.ID); err != nil {
		t.Errorf("reader revokes c2's lease with no key: %v, want allowed", err)
	}

	// Nothing of c1 changed.
	got, err := e.root.Get(ctx, prefix+"/set1/clusters/c1/", clientv3.WithPrefix())
	must(t, err)
	if len(got.Kvs) != 2 {
		t.Errorf("c1 has %d keys, want 2", len(got.Kvs))
	}
}

// TestConformanceWithAuth runs the backend suite with TLS and auth on: each
// cluster as its own user with a password (set up by SetupAuth when the
// suite opens it), the read-only watcher as the clusterset's reader.
func TestConformanceWithAuth(t *testing.T) {
	t.Parallel()
	e := startSecure(t)
	_, err := etcd.SetupAuth(t.Context(), e.root, etcd.AuthOptions{Prefix: prefix, ClusterSet: "setup", Clusters: []string{"x"}, EnableAuth: true})
	must(t, err)
	var mu sync.Mutex
	passwords := map[string]string{}
	// password sets up the user of id (the reader's without a cluster), once.
	password := func(t *testing.T, id registry.Identity) (string, string) {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		user := etcd.ReaderUser(id.ClusterSet)
		o := etcd.AuthOptions{Prefix: prefix, ClusterSet: id.ClusterSet, Passwords: true}
		if id.Cluster != "" {
			user = etcd.ClusterUser(id.ClusterSet, id.Cluster)
			o.Clusters = []string{id.Cluster}
		} else {
			o.Reader = true
		}
		if p, ok := passwords[user]; ok {
			return user, p
		}
		users, err := etcd.SetupAuth(context.Background(), e.root, o)
		must(t, err)
		passwords[user] = users[0].Password
		return user, users[0].Password
	}
	// The certificate's user may do nothing: the password's user counts.
	tlsConfig := e.tlsFor(t, "nobody", "nobody")
	factory := func(t *testing.T, id registry.Identity, ttl time.Duration) registry.Registry {
		user, pw := password(t, id)
		return openWith(t, etcd.Options{Identity: id, Endpoints: []string{e.srv.ClientURL()}, Prefix: prefix,
			TLS: tlsConfig, Username: user, Password: pw, TTL: ttl})
	}
	registrytest.Run(t, factory)
	registrytest.RunReadOnly(t, factory, func(t *testing.T, id registry.Identity) registry.Watcher {
		user, pw := password(t, registry.Identity{ClusterSet: id.ClusterSet})
		ctx := logr.NewContext(t.Context(), testr.NewWithOptions(t, testr.Options{Verbosity: 1}))
		w, err := etcd.NewWatcher(ctx, etcd.Options{Identity: id, Endpoints: []string{e.srv.ClientURL()}, Prefix: prefix,
			TLS: tlsConfig, Username: user, Password: pw})
		must(t, err)
		t.Cleanup(func() { _ = w.Close() })
		return w
	})
}

// TestRefusedIdentity checks that a cluster whose etcd user may not write
// its records is told so: at open, and on a publish, which the registry
// metrics count as an error.
func TestRefusedIdentity(t *testing.T) {
	t.Parallel()
	e := startSecure(t)
	ctx := t.Context()
	_, err := etcd.SetupAuth(ctx, e.root, etcd.AuthOptions{Prefix: prefix, ClusterSet: "set1", Clusters: []string{"c1", "c2"}, EnableAuth: true})
	must(t, err)
	hint := "mcsd:set1:c1 by mcsd registry setup-auth, needs readwrite on " + prefix + "/set1/clusters/c1/"

	// c2's certificate for cluster c1.
	_, err = etcd.New(ctx, e.opts(t, registry.Identity{ClusterSet: "set1", Cluster: "c1"}, "mcsd:set1:c2"))
	wantDenied(t, "open c1 as c2", err)
	if err == nil || !strings.Contains(err.Error(), hint) {
		t.Errorf("open c1 as c2: %v, want the hint %q", err, hint)
	}

	// The grant is taken away while c1 runs.
	b := openWith(t, e.opts(t, registry.Identity{ClusterSet: "set1", Cluster: "c1"}, "mcsd:set1:c1"))
	// Within c1's TTL an open writes nothing, and still proves the user.
	_, err = etcd.New(ctx, e.opts(t, registry.Identity{ClusterSet: "set1", Cluster: "c1"}, "mcsd:set1:c2"))
	wantDenied(t, "open c1 as c2 while c1 lives", err)
	reg := metrics.InstrumentRegistry(b, "c1")
	errorsOf := func(op string) float64 {
		v, err := metricstest.Sum(ctrlmetrics.Registry, "mcsd_registry_operation_errors_total",
			map[string]string{"cluster": "c1", "backend": etcd.Name, "operation": op})
		must(t, err)
		return v
	}
	before := errorsOf("PutExport")
	c1 := prefix + "/set1/clusters/c1/"
	_, err = e.root.RoleRevokePermission(ctx, "mcsd:set1:c1", c1, clientv3.GetPrefixRangeEnd(c1))
	must(t, err)
	err = reg.PutExport(ctx, web, spec)
	wantDenied(t, "PutExport without the grant", err)
	if err == nil || !strings.Contains(err.Error(), hint) {
		t.Errorf("PutExport: %v, want the hint %q", err, hint)
	}
	if got := errorsOf("PutExport"); got != before+1 {
		t.Errorf("PutExport errors = %v, want %v", got, before+1)
	}
}
