package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/mcsd-io/mcsd/pkg/registry/etcd/embedded"
)

func newRegistryCommand() *cobra.Command {
	cfg := embedded.Config{}
	cmd := &cobra.Command{
		Use:   "registry",
		Short: "Run an embedded single-node etcd as the registry, for trying mcsd out",
		Long: `registry runs a single-node etcd that every cluster's mcsd can use as its
registry. It is meant for trying mcsd out and for tests; in production run an
etcd cluster and point mcsd at it with --registry etcds://...`,
		Example:      `  mcsd registry --data-dir /tmp/mcsd-etcd --listen-client-url http://127.0.0.1:2379`,
		SilenceUsage: true,
		Args:         cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			srv, err := embedded.Start(ctx, cfg)
			if err != nil {
				return err
			}
			defer srv.Close()
			select {
			case <-srv.ReadyNotify():
			case err := <-srv.Err():
				return fmt.Errorf("registry: %w", err)
			case <-ctx.Done():
				return nil
			}
			fmt.Fprintf(os.Stderr, "registry ready; point mcsd at it with --registry %s\n", registryURL(srv.ClientURL()))
			select {
			case err := <-srv.Err():
				return fmt.Errorf("registry: %w", err)
			case <-ctx.Done():
				return nil
			}
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&cfg.DataDir, "data-dir", "", "directory for the registry's data (required)")
	fl.StringVar(&cfg.ListenClientURL, "listen-client-url", "http://127.0.0.1:2379", "URL clients connect to (https:// needs --cert-file and --key-file)")
	fl.StringVar(&cfg.ListenPeerURL, "listen-peer-url", "http://127.0.0.1:2380", "raft peer URL (unused by a single node, required by etcd)")
	fl.StringVar(&cfg.CertFile, "cert-file", "", "server certificate for an https client URL")
	fl.StringVar(&cfg.KeyFile, "key-file", "", "server key for an https client URL")
	fl.StringVar(&cfg.TrustedCAFile, "trusted-ca-file", "", "CA that client certificates must be signed by (enables client certificate auth)")
	fl.StringVar(&cfg.LogLevel, "log-level", "", "etcd's log level: debug, info, warn, error (default: no logs)")
	_ = cmd.MarkFlagRequired("data-dir")
	return cmd
}

// registryURL turns the server's client URL into mcsd's --registry form.
func registryURL(clientURL string) string {
	if len(clientURL) > 8 && clientURL[:8] == "https://" {
		return "etcds://" + clientURL[8:]
	}
	if len(clientURL) > 7 && clientURL[:7] == "http://" {
		return "etcd://" + clientURL[7:]
	}
	return clientURL
}
