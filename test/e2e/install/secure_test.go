package install

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	"github.com/mcsd-io/mcsd/pkg/registry"
	etcdregistry "github.com/mcsd-io/mcsd/pkg/registry/etcd"
	"github.com/mcsd-io/mcsd/pkg/registry/etcd/embedded"
	"github.com/mcsd-io/mcsd/pkg/registry/etcd/embedded/embeddedtest"
	fw "github.com/mcsd-io/mcsd/test/framework"
)

// TestSecureRegistryFlow: c1 and c2 each run mcsd with an identity of its
// own, a client certificate whose user SetupAuth gave readwrite on its own
// prefix only, against an etcd that requires TLS client certificates and has
// auth on; an export of c1 is imported in c2 with its endpoints.
func TestSecureRegistryFlow(t *testing.T) {
	fw.NeedEnv(t, env)
	ctx := context.Background()
	dir := t.TempDir()
	certs := filepath.Join(dir, "certs")
	clusterSet := env.TB.ClusterSetID()
	clients := []embedded.ClientCert{{Name: "root", CommonName: "root"}}
	for _, id := range []string{"c1", "c2"} {
		clients = append(clients, embedded.ClientCert{Name: id, CommonName: etcdregistry.ClusterUser(clusterSet, id)})
	}
	if err := embedded.WriteCerts(certs, []string{"127.0.0.1"}, clients); err != nil {
		t.Fatal(err)
	}
	srv := embeddedtest.Start(t, embedded.Config{
		DataDir:         filepath.Join(dir, "etcd"),
		ListenClientURL: "https://127.0.0.1:0",
		CertFile:        filepath.Join(certs, embedded.ServerCertFile),
		KeyFile:         filepath.Join(certs, embedded.ServerKeyFile),
		TrustedCAFile:   filepath.Join(certs, embedded.CACertFile),
	})
	readyCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()

	// As `mcsd registry setup-auth --enable-auth` does, as root by
	// certificate.
	caPEM, err := os.ReadFile(filepath.Join(certs, embedded.CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	rootCert, err := tls.LoadX509KeyPair(filepath.Join(certs, "root.crt"), filepath.Join(certs, "root.key"))
	if err != nil {
		t.Fatal(err)
	}
	root, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.ClientURL()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		TLS: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{rootCert}, MinVersion: tls.VersionTLS12}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = root.Close() }()
	if _, err := etcdregistry.SetupAuth(readyCtx, root, etcdregistry.AuthOptions{ClusterSet: clusterSet, Clusters: []string{"c1", "c2"}, EnableAuth: true}); err != nil {
		t.Fatal(err)
	}

	// Each cluster's mcsd with its own certificate.
	open := func(ctx context.Context, id registry.Identity) (registry.Registry, error) {
		return etcdregistry.New(ctx, etcdregistry.Options{
			Identity:  id,
			Endpoints: []string{srv.ClientURL()},
			CAFile:    filepath.Join(certs, embedded.CACertFile),
			CertFile:  filepath.Join(certs, id.Cluster+".crt"),
			KeyFile:   filepath.Join(certs, id.Cluster+".key"),
			TTL:       env.TTL(),
		})
	}
	c1, c2 := adminClient(t, env.TB.Cluster("c1")), adminClient(t, env.TB.Cluster("c2"))
	for _, id := range []string{"c1", "c2"} {
		fw.EnsureNamespace(t, adminClient(t, env.TB.Cluster(id)), "mcsd-system")
		ctrl := startControllerWith(t, id, env.TB.Cluster(id).Config, open)
		t.Cleanup(ctrl.stop)
		ctrl.waitReady(t, 2*timeout)
	}
	const ns = "install-secure"
	fw.EnsureNamespace(t, c1, ns)
	fw.EnsureNamespace(t, c2, ns)
	fw.Deploy(t, c1, fw.App{Namespace: ns, Name: "web", Replicas: 2})
	fw.Export(t, c1, ns, "web")
	waitImported(t, c1, c2, ns, "web", 1, 2)

	// Withdrawn while mcsd runs, through the same identity.
	fw.Unexport(t, c1, ns, "web")
	poll.Until(t, timeout, "import of web gone from c2", func() (bool, string) {
		si := fw.GetImport(t, c2, ns, "web")
		return si == nil, "ServiceImport still there"
	})
}
