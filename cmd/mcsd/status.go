package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcsd-io/mcsd/internal/manager"
	"github.com/mcsd-io/mcsd/internal/status"
)

type statusFlags struct {
	registry    registryFlags
	clusterSet  string
	kubeconfig  string
	kubeContext string
	namespace   string
	output      string
	timeout     time.Duration
}

func newStatusCommand() *cobra.Command {
	f := &statusFlags{}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the clusterset as the registry holds it, and this cluster's exports and imports",
		Long: `status reads the registry once, read-only: it takes no lease, writes no
heartbeat and is no member of the clusterset. It shows the live clusters
(last lease renewal or heartbeat, when their records expire), every exported
Service with the import its exports merge into, each cluster's export (its
precedence, ports, endpoints and when it last published a change of them),
and the conflicts between exports with the cluster whose values win.

With a kubeconfig (--kubeconfig, else $KUBECONFIG, else ~/.kube/config, as
kubectl finds it; --context picks another context) it also shows this
cluster's ServiceExports
(their conditions, and whether the registry has them) and ServiceImports
(Ready, their EndpointSlices, when mcsd last changed them, when the registry
last published a change, and whether they match the registry).

The clusterset is --clusterset, or else read from this cluster's
ClusterProperty clusterset.k8s.io.

JSON output (-o json) is one object; fields are only ever added:
  clusterSet, namespace, time          what was read, and when (RFC 3339, UTC)
  clusters[]: id, local, liveness ("lease" or "heartbeat"), lease,
              since, lastSeen, expires, ttlSeconds, exports
  services[]: namespace, name,
              import: type, ports[], clusters[] (oldest export first), published
              exports[]: cluster, rank (1 wins conflicts), type, ports[],
                         endpoints: total, ready, updated
              conflict: winner (oldest export), winners (reason: cluster),
                        reasons[], message
  local:      cluster,
              exports[]: namespace, name, conditions[] (type, status, reason,
                         message, lastTransitionTime), inRegistry
              imports[]: namespace, name, type, ready (a condition), clusters[],
                         endpointSlices, endpoints, lastChange, published,
                         differs[] ("withdrawn", "type", "ports", "clusters")
  leases:     total, idle, foreign, unreadable, graceSeconds (etcd only: idle:
              held nothing at two looks graceSeconds apart; foreign: other
              applications' keys only)
  warnings[]
  ports[]: name, protocol, port, appProtocol
Times that are not known are left out; lists are never null.`,
		Example: `  mcsd status --registry etcd://127.0.0.1:2379 --clusterset prod
  mcsd status --registry etcd://127.0.0.1:2379 --context kind-east -n shop
  mcsd status --registry 'cloudmap://?region=eu-west-1' --clusterset prod -o json`,
		SilenceUsage: true,
		Args:         cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runStatus(cmd, f)
		},
	}
	f.registry.bind(cmd)
	fl := cmd.Flags()
	fl.StringVar(&f.clusterSet, "clusterset", "", "clusterset to show (default: this cluster's ClusterProperty clusterset.k8s.io)")
	fl.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig of this cluster, to show its exports and imports")
	fl.StringVar(&f.kubeContext, "context", "", "kubeconfig context of this cluster, to show its exports and imports")
	fl.StringVarP(&f.namespace, "namespace", "n", "", "show only the Services of this namespace")
	fl.StringVarP(&f.output, "output", "o", "table", "output format: table or json")
	fl.DurationVar(&f.timeout, "timeout", 30*time.Second, "how long to try reading the registry and the cluster")
	return cmd
}

func runStatus(cmd *cobra.Command, f *statusFlags) error {
	write := status.WriteTable
	switch f.output {
	case "table":
	case "json":
		write = status.WriteJSON
	default:
		return fmt.Errorf("--output %q: want table or json", f.output)
	}
	backend, err := openRegistryURL(&f.registry)
	if err != nil {
		return err
	}
	// The local cluster, found as kubectl finds it: --kubeconfig, else
	// $KUBECONFIG, else ~/.kube/config, and its current context unless
	// --context names another. Without any, the registry alone.
	var local client.Reader
	explicit := f.kubeconfig != "" || f.kubeContext != ""
	cfg, err := kubeconfig(f.kubeconfig, f.kubeContext)
	switch {
	case err == nil:
		if local, err = client.New(cfg, client.Options{Scheme: manager.Scheme}); err != nil {
			return fmt.Errorf("create client: %w", err)
		}
	case explicit || (!clientcmd.IsEmptyConfig(err) && f.clusterSet == ""):
		return fmt.Errorf("load kubeconfig: %w", err)
	case !clientcmd.IsEmptyConfig(err):
		// A kubeconfig found by default that does not load: the registry
		// alone, as asked for with --clusterset.
		fmt.Fprintf(cmd.ErrOrStderr(), "warning: the kubeconfig cannot be loaded (%v): the registry alone is shown\n", err)
	case f.clusterSet == "":
		return fmt.Errorf("no kubeconfig found (--kubeconfig, $KUBECONFIG, ~/.kube/config) to read this cluster's clusterset from: give --clusterset")
	}

	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	r, err := status.Collect(ctx, status.Options{
		ClusterSet:    f.clusterSet,
		OpenWatcher:   backend.OpenWatcher,
		Local:         local,
		LocalOptional: !explicit,
		Namespace:     f.namespace,
	})
	if err != nil {
		return err
	}
	return write(cmd.OutOrStdout(), r)
}

// kubeconfig loads the client configuration kubectl would use: path, else
// $KUBECONFIG, else ~/.kube/config; the context named, else the current one.
func kubeconfig(path, kubeContext string) (*rest.Config, error) {
	loading := clientcmd.NewDefaultClientConfigLoadingRules()
	loading.ExplicitPath = path
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(loading, &clientcmd.ConfigOverrides{CurrentContext: kubeContext}).ClientConfig()
}
