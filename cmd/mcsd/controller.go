package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/mcsd-io/mcsd/internal/controller/imports"
	"github.com/mcsd-io/mcsd/internal/manager"
	"github.com/mcsd-io/mcsd/pkg/registry/backends"
)

type controllerFlags struct {
	kubeconfig     string
	kubeContext    string
	qps            float32
	burst          int
	registry       registryFlags
	leaderElect    bool
	leaderNS       string
	metricsAddr    string
	healthAddr     string
	zapDevelopment bool
	takeoverGrace  time.Duration
	cacheSync      time.Duration
}

func newControllerCommand() *cobra.Command {
	f := &controllerFlags{}
	cmd := &cobra.Command{
		Use:   "mcsd",
		Short: "Multi-cluster service discovery for Kubernetes (KEP-1645)",
		Long: `mcsd exports the Services named by ServiceExports in this cluster to a
shared registry, and keeps a ServiceImport, a derived Service and
EndpointSlices in this cluster for every Service the clusterset exports.

Run one mcsd in every cluster, all pointed at the same registry. Each cluster
needs two ClusterProperty objects (about.k8s.io): cluster.clusterset.k8s.io
(this cluster's id, unique in the clusterset) and clusterset.k8s.io (the
clusterset's id, the same everywhere).

Registries:
  etcd://HOST:PORT[,HOST:PORT...]    etcd over plain HTTP
  etcds://HOST:PORT[,HOST:PORT...]   etcd over TLS (--registry-ca, --registry-cert, --registry-key)
  cloudmap://?region=REGION          AWS Cloud Map; credentials from the standard AWS chain
      query options: region, endpoint (for testing), poll-interval (2s),
      sweep-interval (15m), feed-overlap (10s), cleanup-empty (false), and rate=OPERATION:QPS:BURST
      (repeatable, e.g. rate=RegisterInstance:5:10)
Try it out with an embedded single-node etcd: mcsd registry --data-dir /tmp/mcsd-etcd`,
		Example: `  mcsd --kubeconfig ~/.kube/config --registry etcd://127.0.0.1:2379
  mcsd --registry 'cloudmap://?region=eu-west-1&poll-interval=5s'`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runController(cmd.Context(), f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig of this cluster (default: $KUBECONFIG, then ~/.kube/config, then the in-cluster config)")
	fl.StringVar(&f.kubeContext, "context", "", "kubeconfig context to use")
	fl.Float32Var(&f.qps, "kube-api-qps", 50, "queries per second to this cluster's API server")
	fl.IntVar(&f.burst, "kube-api-burst", 100, "burst of queries to this cluster's API server")
	f.registry.bind(cmd)
	fl.DurationVar(&f.registry.ttl, "lease-ttl", 0, "how long this cluster's records outlive it in the registry if it stops (0: the backend's default, etcd 30s, Cloud Map 60s)")
	fl.BoolVar(&f.leaderElect, "leader-elect", false, "elect a leader so that only one replica runs (for Deployments with several replicas)")
	fl.StringVar(&f.leaderNS, "leader-election-namespace", "", "namespace of the leader lease (default: $POD_NAMESPACE or mcsd-system)")
	fl.StringVar(&f.metricsAddr, "metrics-bind-address", ":8080", "address of the Prometheus metrics endpoint (0 disables)")
	fl.StringVar(&f.healthAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz (0 disables)")
	fl.BoolVar(&f.zapDevelopment, "log-development", false, "human-friendly logs instead of JSON")
	fl.DurationVar(&f.takeoverGrace, "takeover-grace", imports.DefaultRetireGrace, "when taking over imports of the AWS Cloud Map MCS controller, how long its derived Services that mcsd does not adopt keep carrying traffic (at least as long as clients cache DNS answers)")
	fl.DurationVar(&f.cacheSync, "cache-sync-timeout", 2*time.Minute, "how long mcsd's controllers, once started, wait for the first list of each kind they read before mcsd exits with the API server's refusal (a missing RBAC grant) or the last error; raise it where the first lists take longer (0: the default)")
	return cmd
}

func runController(ctx context.Context, f *controllerFlags) error {
	if f.leaderNS == "" {
		f.leaderNS = os.Getenv("POD_NAMESPACE")
	}
	backend, err := openRegistryURL(&f.registry)
	if err != nil {
		return err
	}
	cfg, err := kubeconfig(f.kubeconfig, f.kubeContext)
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = f.qps, f.burst

	log := newLogger(f.zapDevelopment, os.Stderr)
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx = logr.NewContext(ctx, log)
	err = manager.Run(ctx, manager.Options{
		RESTConfig:              cfg,
		OpenRegistry:            backend.Open,
		MetricsAddr:             f.metricsAddr,
		HealthAddr:              f.healthAddr,
		LeaderElection:          f.leaderElect,
		LeaderElectionNamespace: f.leaderNS,
		TakeoverGrace:           f.takeoverGrace,
		CacheSyncTimeout:        f.cacheSync,
	})
	if ctx.Err() != nil && (err == nil || errors.Is(err, context.Canceled)) {
		// Stopped by a signal: a clean exit, said once.
		log.Info("mcsd stopped")
		return nil
	}
	return err
}

// registryFlags are the flags that name and reach the registry, shared by
// the controller and the status command.
type registryFlags struct {
	url      string
	caFile   string
	certFile string
	keyFile  string
	username string
	password string
	// ttl is the controller's --lease-ttl; unused by readers.
	ttl time.Duration
}

func (r *registryFlags) bind(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&r.url, "registry", "", "registry URL (required): etcd://host:port[,host:port], etcds://... or cloudmap://?region=...")
	fl.StringVar(&r.caFile, "registry-ca", "", "CA file that verifies the registry's servers")
	fl.StringVar(&r.certFile, "registry-cert", "", "client certificate for the registry")
	fl.StringVar(&r.keyFile, "registry-key", "", "client key for the registry")
	fl.StringVar(&r.username, "registry-username", "", "etcd user name (etcd auth; or the MCSD_REGISTRY_USERNAME environment variable)")
	fl.StringVar(&r.password, "registry-password", "", "etcd password (etcd auth; prefer the MCSD_REGISTRY_PASSWORD environment variable)")
}

// fromEnv takes the user name and password not given as flags from the
// environment (MCSD_REGISTRY_USERNAME, MCSD_REGISTRY_PASSWORD).
func (r *registryFlags) fromEnv() {
	if r.username == "" {
		r.username = os.Getenv("MCSD_REGISTRY_USERNAME")
	}
	if r.password == "" {
		r.password = os.Getenv("MCSD_REGISTRY_PASSWORD")
	}
}

// openRegistryURL checks the registry flags and returns the backend of the
// URL.
func openRegistryURL(f *registryFlags) (backends.Backend, error) {
	if f.url == "" {
		return backends.Backend{}, fmt.Errorf("--registry is required, e.g. --registry etcd://127.0.0.1:2379 (start one with: mcsd registry --data-dir DIR)")
	}
	f.fromEnv()
	b, err := backends.Open(f.url, backends.Settings{
		CAFile:   f.caFile,
		CertFile: f.certFile,
		KeyFile:  f.keyFile,
		Username: f.username,
		Password: f.password,
		TTL:      f.ttl,
	})
	if err != nil {
		return backends.Backend{}, fmt.Errorf("--registry: %w", err)
	}
	return b, nil
}

// newLogger is the controller's logger, writing to w, and controller-runtime's
// too: the parts of controller-runtime that log through its package logger
// (its caches' reflectors) would otherwise be silent, and after 30 s print
// a warning with a stack trace instead.
func newLogger(development bool, w io.Writer) logr.Logger {
	log := zap.New(zap.UseDevMode(development), zap.WriteTo(w))
	ctrllog.SetLogger(log)
	return log
}
