package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/etcd"
	"github.com/mcsd-io/mcsd/pkg/registry/etcd/embedded"
)

// tryOutFlags secure the embedded registry: TLS, client certificates and
// auth, with a user per cluster.
type tryOutFlags struct {
	secureDir  string
	clusterSet string
	clusters   []string
	certHosts  []string
}

// auditFlags say how the registry watches its leases.
type auditFlags struct {
	metricsAddr string
	interval    time.Duration
	grace       time.Duration
}

func newRegistryCommand() *cobra.Command {
	cfg := embedded.Config{}
	sec := &tryOutFlags{}
	audit := &auditFlags{}
	cmd := &cobra.Command{
		Use:   "registry",
		Short: "Run an embedded single-node etcd as the registry, for trying mcsd out",
		Long: `registry runs a single-node etcd that every cluster's mcsd can use as its
registry. It is meant for trying mcsd out and for tests; in production run an
etcd cluster and point mcsd at it with --registry etcds://..., after
preparing it with mcsd registry setup-auth.

With --secure-dir it runs with TLS, client certificate auth and etcd auth on:
it writes a CA, a server certificate and a client certificate per cluster of
--clusterset (CN mcsd:<clusterset>:<cluster>, which may write only below its
own cluster's prefix), one for mcsd status (read-only) and one for root
into the directory, and prints the commands that hand them to each cluster.
The raft peer listener is secured the same way: https with a peer
certificate of the same CA, and only peers holding one are answered.
Without --secure-dir the peer listener is plain http: keep it on 127.0.0.1.
Started again on the same directories it keeps the CA, the certificates and
the users.`,
		Example: `  mcsd registry --data-dir /tmp/mcsd-etcd --listen-client-url http://127.0.0.1:2379
  mcsd registry --data-dir /tmp/mcsd-etcd --secure-dir /tmp/mcsd-certs --clusterset prod --cluster east --cluster west \
    --listen-client-url https://0.0.0.0:2379 --cert-host 172.18.0.1`,
		SilenceUsage: true,
		Args:         cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runRegistry(ctx, cmd.ErrOrStderr(), cfg, sec, audit)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&cfg.DataDir, "data-dir", "", "directory for the registry's data (required)")
	fl.StringVar(&cfg.ListenClientURL, "listen-client-url", "http://127.0.0.1:2379", "URL clients connect to (https:// needs --cert-file and --key-file, or --secure-dir)")
	fl.StringVar(&cfg.ListenPeerURL, "listen-peer-url", "http://127.0.0.1:2380", "raft peer URL (unused by a single node, required by etcd; https with --secure-dir)")
	fl.StringVar(&cfg.CertFile, "cert-file", "", "server certificate for an https client URL")
	fl.StringVar(&cfg.KeyFile, "key-file", "", "server key for an https client URL")
	fl.StringVar(&cfg.TrustedCAFile, "trusted-ca-file", "", "CA that client certificates must be signed by (enables client certificate auth)")
	fl.StringVar(&cfg.LogLevel, "log-level", "", "etcd's log level: debug, info, warn, error (default: no logs)")
	fl.StringVar(&sec.secureDir, "secure-dir", "", "turn on TLS, client certificates and etcd auth, with the CA and certificates in this directory")
	fl.StringVar(&sec.clusterSet, "clusterset", "", "with --secure-dir: the clusterset whose clusters get a user")
	fl.StringSliceVar(&sec.clusters, "cluster", nil, "with --secure-dir: a cluster of the clusterset (repeatable)")
	fl.StringSliceVar(&sec.certHosts, "cert-host", nil, "with --secure-dir: another IP address or DNS name the clusters reach the registry at (repeatable)")
	fl.StringVar(&audit.metricsAddr, "metrics-bind-address", "", "serve the registry's metrics (mcsd_registry_leases, mcsd_registry_idle_leases) at this address, e.g. 127.0.0.1:9479 (default: none)")
	fl.DurationVar(&audit.interval, "lease-audit-interval", 30*time.Second, "how often to count the leases that hold no mcsd record")
	fl.DurationVar(&audit.grace, "lease-audit-grace", time.Minute, "how long a lease may hold no mcsd record before it is counted")
	_ = cmd.MarkFlagRequired("data-dir")
	cmd.AddCommand(newSetupAuthCommand())
	return cmd
}

func runRegistry(ctx context.Context, out io.Writer, cfg embedded.Config, sec *tryOutFlags, audit *auditFlags) error {
	if audit.interval <= 0 || audit.grace < 0 {
		return errors.New("--lease-audit-interval must be positive and --lease-audit-grace not negative")
	}
	if sec.secureDir != "" {
		if err := sec.prepare(&cfg); err != nil {
			return err
		}
	} else if sec.clusterSet != "" || len(sec.clusters) > 0 || len(sec.certHosts) > 0 {
		return errors.New("--clusterset, --cluster and --cert-host need --secure-dir")
	}
	srv, err := embedded.Start(ctx, cfg)
	if err != nil {
		return err
	}
	defer srv.Close()
	if err := srv.WaitReady(ctx); err != nil {
		if ctx.Err() != nil {
			return nil // stopped before it was ready
		}
		return fmt.Errorf("registry: %w", err)
	}
	regURL := registryURL(srv.ClientURL())
	admin, err := sec.adminClient(srv.ClientURL())
	if err != nil {
		return err
	}
	defer admin.Close()
	if sec.secureDir != "" {
		if err := sec.setUp(ctx, out, admin, regURL); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(out, "registry ready; point mcsd at it with --registry %s\n", regURL)
	}
	metrics := prometheus.NewRegistry()
	monitor := newLeaseMonitor(admin, etcd.DefaultPrefix, audit.interval, audit.grace, out, metrics)
	go monitor.run(ctx)
	if audit.metricsAddr != "" {
		u, err := serveMetrics(ctx, audit.metricsAddr, metrics)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "registry metrics at %s\n", u)
	}
	select {
	case err := <-srv.Err():
		return fmt.Errorf("registry: %w", err)
	case <-ctx.Done():
		return nil
	}
}

// File names in the secure directory, beside embedded's.
const (
	rootCertName   = "root"
	readerCertName = "reader"
)

func clusterCertName(cluster string) string { return "cluster-" + cluster }

// prepare writes the certificates and sets the server's TLS in cfg.
func (s *tryOutFlags) prepare(cfg *embedded.Config) error {
	if s.clusterSet == "" || len(s.clusters) == 0 {
		return errors.New("--secure-dir needs --clusterset and at least one --cluster")
	}
	if err := registry.ValidateClusterSetID(s.clusterSet); err != nil {
		return fmt.Errorf("--clusterset: %w", err)
	}
	for _, c := range s.clusters {
		if err := registry.ValidateClusterID(c); err != nil {
			return fmt.Errorf("--cluster: %w", err)
		}
	}
	if cfg.CertFile != "" || cfg.KeyFile != "" || cfg.TrustedCAFile != "" {
		return errors.New("--secure-dir makes its own certificates: drop --cert-file, --key-file and --trusted-ca-file")
	}
	u, err := url.Parse(cfg.ListenClientURL)
	if err != nil {
		return fmt.Errorf("--listen-client-url: %w", err)
	}
	u.Scheme = "https"
	cfg.ListenClientURL = u.String()
	// The peer listener too: TLS with a peer certificate of the same CA,
	// and only peers holding one may talk to it.
	p, err := url.Parse(cfg.ListenPeerURL)
	if err != nil {
		return fmt.Errorf("--listen-peer-url: %w", err)
	}
	p.Scheme = "https"
	cfg.ListenPeerURL = p.String()
	hosts := append([]string{"127.0.0.1", "localhost"}, s.certHosts...)
	for _, h := range []string{u.Hostname(), p.Hostname()} {
		if h != "127.0.0.1" && h != "localhost" && h != "0.0.0.0" && h != "::" && !slices.Contains(hosts, h) {
			hosts = append(hosts, h)
		}
	}
	clients := []embedded.ClientCert{
		{Name: rootCertName, CommonName: etcd.RootUser},
		{Name: readerCertName, CommonName: etcd.ReaderUser(s.clusterSet)},
	}
	for _, c := range s.clusters {
		clients = append(clients, embedded.ClientCert{Name: clusterCertName(c), CommonName: etcd.ClusterUser(s.clusterSet, c)})
	}
	if err := embedded.WriteCerts(s.secureDir, hosts, clients); err != nil {
		return err
	}
	cfg.CertFile = filepath.Join(s.secureDir, embedded.ServerCertFile)
	cfg.KeyFile = filepath.Join(s.secureDir, embedded.ServerKeyFile)
	cfg.TrustedCAFile = filepath.Join(s.secureDir, embedded.CACertFile)
	cfg.PeerCertFile = filepath.Join(s.secureDir, embedded.PeerCertFile)
	cfg.PeerKeyFile = filepath.Join(s.secureDir, embedded.PeerKeyFile)
	cfg.PeerTrustedCAFile = cfg.TrustedCAFile
	// The CA signs the clusters' certificates too: only the peer
	// certificate's name is let in as a peer.
	cfg.PeerAllowedCNs = []string{embedded.PeerCommonName}
	return nil
}

// adminClient connects to the registry as its administrator: root's
// certificate with --secure-dir, else no identity.
func (s *tryOutFlags) adminClient(clientURL string) (*clientv3.Client, error) {
	opts := etcd.Options{Endpoints: []string{clientURL}}
	if s.secureDir != "" {
		opts.CAFile = filepath.Join(s.secureDir, embedded.CACertFile)
		opts.CertFile = filepath.Join(s.secureDir, rootCertName+".crt")
		opts.KeyFile = filepath.Join(s.secureDir, rootCertName+".key")
	}
	return etcd.NewClient(opts)
}

// setUp creates the users as root (cli) and enables auth, then prints how
// to use them.
func (s *tryOutFlags) setUp(ctx context.Context, out io.Writer, cli *clientv3.Client, regURL string) error {
	cert := func(name, ext string) string { return filepath.Join(s.secureDir, name+ext) }
	ca := filepath.Join(s.secureDir, embedded.CACertFile)
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := etcd.SetupAuth(sctx, cli, etcd.AuthOptions{ClusterSet: s.clusterSet, Clusters: s.clusters, Reader: true, EnableAuth: true}); err != nil {
		return fmt.Errorf("set up etcd auth: %w", err)
	}
	fmt.Fprintf(out, "registry ready with TLS and auth; point mcsd at it with --registry %s\n", regURL)
	for _, c := range s.clusters {
		fmt.Fprintf(out, "# cluster %s (etcd user %s):\n", c, etcd.ClusterUser(s.clusterSet, c))
		fmt.Fprintf(out, "kubectl -n mcsd-system create secret generic mcsd-registry-etcd --from-file=ca.crt=%s --from-file=tls.crt=%s --from-file=tls.key=%s\n",
			ca, cert(clusterCertName(c), ".crt"), cert(clusterCertName(c), ".key"))
	}
	fmt.Fprintf(out, "# read-only (etcd user %s):\n", etcd.ReaderUser(s.clusterSet))
	fmt.Fprintf(out, "%s status --registry %s --clusterset %s --registry-ca %s --registry-cert %s --registry-key %s\n",
		self(), regURL, s.clusterSet, ca, cert(readerCertName, ".crt"), cert(readerCertName, ".key"))
	fmt.Fprintf(out, "# administrator (etcd user root), e.g. to add a cluster:\n")
	fmt.Fprintf(out, "%s registry setup-auth --registry %s --registry-ca %s --registry-cert %s --registry-key %s --clusterset %s --cluster <id>\n",
		self(), regURL, ca, cert(rootCertName, ".crt"), cert(rootCertName, ".key"), s.clusterSet)
	fmt.Fprintf(out, "# the same identity for etcdctl: --cacert %s --cert %s --key %s\n", ca, cert(rootCertName, ".crt"), cert(rootCertName, ".key"))
	return nil
}

// registryURL turns the server's client URL into mcsd's --registry form.
func registryURL(clientURL string) string {
	if rest, ok := strings.CutPrefix(clientURL, "https://"); ok {
		return "etcds://" + rest
	}
	if rest, ok := strings.CutPrefix(clientURL, "http://"); ok {
		return "etcd://" + rest
	}
	return clientURL
}

// self is how this binary was called, for the commands it prints: bin/mcsd
// when started as bin/mcsd, mcsd when found on PATH.
func self() string {
	if len(os.Args) > 0 && os.Args[0] != "" && !strings.Contains(os.Args[0], "go-build") {
		return os.Args[0]
	}
	return "mcsd"
}
