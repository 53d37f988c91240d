package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcsd-io/mcsd/pkg/registry/etcd"
)

type setupAuthFlags struct {
	registry     registryFlags
	opts         etcd.AuthOptions
	rootPassword string
	timeout      time.Duration
}

func newSetupAuthCommand() *cobra.Command {
	f := &setupAuthFlags{}
	cmd := &cobra.Command{
		Use:   "setup-auth",
		Short: "Give each cluster of a clusterset an etcd user that may write only its own records",
		Long: `setup-auth prepares an etcd for a clusterset. For each --cluster it makes a
role and a user, both named mcsd:<clusterset>:<cluster>, with readwrite on the
cluster's own prefix (<prefix>/<clusterset>/clusters/<cluster>/) and read on
the clusterset's (<prefix>/<clusterset>/clusters/); and, unless --reader=false,
a role and user mcsd-reader:<clusterset> with read on the clusterset's prefix,
for mcsd status. With --enable-auth it then creates the root user and role if
missing and turns etcd auth on.

Users authenticate with a client certificate whose common name is the user
(etcd --client-cert-auth; recommended), or, with --passwords, with the random
password printed for each user created (for mcsd: the user in
MCSD_REGISTRY_USERNAME or --registry-username, the password in
MCSD_REGISTRY_PASSWORD).

It can run again, e.g. to add a cluster: what exists is kept and no password
changes. Once auth is on, connect as root (--registry-cert with CN root, or
--registry-username root).`,
		Example: `  mcsd registry setup-auth --registry etcds://etcd-0.example:2379 --registry-ca ca.crt \
    --registry-cert root.crt --registry-key root.key --clusterset prod --cluster east --cluster west --enable-auth`,
		SilenceUsage: true,
		Args:         cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			ctx, cancel := context.WithTimeout(ctx, f.timeout)
			defer cancel()
			return runSetupAuth(ctx, cmd.OutOrStdout(), f)
		},
	}
	f.registry.bind(cmd)
	fl := cmd.Flags()
	fl.StringVar(&f.opts.ClusterSet, "clusterset", "", "the clusterset (required)")
	fl.StringSliceVar(&f.opts.Clusters, "cluster", nil, "a cluster of the clusterset (repeatable)")
	fl.BoolVar(&f.opts.Reader, "reader", true, "make the read-only user for mcsd status")
	fl.BoolVar(&f.opts.Passwords, "passwords", false, "give each user created a random password, printed once (default: certificate only)")
	fl.BoolVar(&f.opts.EnableAuth, "enable-auth", false, "create the root user and role if missing and enable etcd auth")
	fl.StringVar(&f.rootPassword, "root-password", "", "password of the root user, if --enable-auth creates it (prefer MCSD_ETCD_ROOT_PASSWORD; none: a certificate with CN root)")
	fl.DurationVar(&f.timeout, "timeout", time.Minute, "how long to try")
	_ = cmd.MarkFlagRequired("clusterset")
	return cmd
}

func runSetupAuth(ctx context.Context, out io.Writer, f *setupAuthFlags) error {
	if f.registry.url == "" {
		return fmt.Errorf("--registry is required, e.g. --registry etcds://etcd-0.example:2379")
	}
	u, err := url.Parse(f.registry.url)
	if err != nil {
		return fmt.Errorf("--registry: %w", err)
	}
	opts, err := etcd.ParseURL(u)
	if err != nil {
		return fmt.Errorf("--registry: %w", err)
	}
	f.registry.fromEnv()
	opts.CAFile, opts.CertFile, opts.KeyFile = f.registry.caFile, f.registry.certFile, f.registry.keyFile
	opts.Username, opts.Password = f.registry.username, f.registry.password
	f.opts.Prefix = opts.Prefix
	f.opts.RootPassword = f.rootPassword
	if f.opts.RootPassword == "" {
		f.opts.RootPassword = os.Getenv("MCSD_ETCD_ROOT_PASSWORD")
	}
	ao := f.opts
	ao.Default()
	if err := ao.Validate(); err != nil {
		return err
	}
	cli, err := etcd.NewClient(opts)
	if err != nil {
		return err
	}
	defer cli.Close()
	users, err := etcd.SetupAuth(ctx, cli, ao)
	for _, u := range users {
		state := "kept"
		if u.Created {
			state = "created"
		}
		line := fmt.Sprintf("user %s (%s): readwrite %s, read %s", u.Name, state, list(u.ReadWrite), list(u.Read))
		if u.Password != "" {
			line += ", password " + u.Password
		}
		fmt.Fprintln(out, line)
	}
	if err != nil {
		return err
	}
	if ao.EnableAuth {
		fmt.Fprintln(out, "etcd auth enabled")
	}
	return nil
}

func list(s []string) string {
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(s, " ")
}
