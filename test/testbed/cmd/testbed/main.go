package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/mcsd-io/mcsd/test/testbed"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "testbed:", err)
		os.Exit(1)
	}
}

func run() error {
	if len(os.Args) > 1 {
		if cmd, ok := nodeCommands[os.Args[1]]; ok {
			return cmd(os.Args[2:])
		}
	}
	fs := flag.NewFlagSet("testbed", flag.ExitOnError)
	n := fs.Int("n", 2, "number of clusters (c1..cN)")
	name := fs.String("name", "mcsd", "name of the testbed (its state directory)")
	nodes := fs.Int("nodes", 2, "kwok nodes per cluster")
	cluster := fs.String("cluster", "c1", "cluster to start CoreDNS for (coredns), or whose pods reach the host's server (expose)")
	pidFile := fs.String("pid-file", "", "file to write the CoreDNS process id to (coredns)")
	image := fs.String("image", "", "load-image: the image's name (an OCI layout's; overrides a Docker archive's tags)")
	noDataPlane := fs.Bool("no-dataplane", false, "up: control planes only; kwok fakes pods, nothing routes (needs no root)")
	sharedZones := fs.Bool("shared-zones", false, "up: the same zone names (zone-a, zone-b, ...) in every cluster, as clusters of one region")
	fs.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: testbed build | up [-n N] [-name NAME] [-nodes K] [-no-dataplane] | down [-name NAME] | kubeconfig [-name NAME] | coredns [-name NAME] [-cluster ID] [-pid-file FILE] | load-image [-name NAME] [-image REF] ARCHIVE | expose [-name NAME] [-cluster ID] HOST:PORT")
		fs.PrintDefaults()
	}
	if len(os.Args) < 2 {
		fs.Usage()
		os.Exit(2)
	}
	verb := os.Args[1]
	if err := fs.Parse(os.Args[2:]); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	switch verb {
	case "build":
		b, err := testbed.EnsureBinaries(ctx, os.Stderr)
		if err != nil {
			return err
		}
		fmt.Println(filepath.Dir(filepath.Dir(b.Kwokctl)))
		return nil
	case "up":
		tb, err := testbed.Start(ctx, testbed.Options{Name: *name, Clusters: *n, NodesPerCluster: *nodes, NoDataPlane: *noDataPlane,
			SharedZones: *sharedZones, Log: os.Stderr})
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "testbed %q is up with %d clusters; contexts:", *name, len(tb.Clusters))
		for _, c := range tb.Clusters {
			fmt.Fprintf(os.Stderr, " %s", c.ID)
		}
		fmt.Fprintf(os.Stderr, "\nkubectl: %s\ntry: %s --kubeconfig %s --context c1 get nodes\n",
			tb.Binaries().Kubectl, tb.Binaries().Kubectl, tb.Kubeconfig)
		fmt.Println(tb.Kubeconfig)
		return nil
	case "down":
		return testbed.Delete(ctx, testbed.Options{Name: *name, Log: os.Stderr})
	case "kubeconfig":
		// Only for a testbed that runs: a path to nothing would fail later,
		// further from the cause.
		bin, err := testbed.EnsureBinaries(ctx, io.Discard)
		if err != nil {
			return err
		}
		tb, err := openStarted(ctx, testbed.Options{Name: *name, Binaries: &bin})
		if err != nil {
			return err
		}
		if err := tb.Ping(ctx); err != nil {
			return fmt.Errorf("testbed %s is not running: %w (start it again with make testbed-up)", *name, err)
		}
		fmt.Println(tb.Kubeconfig)
		return nil
	case "coredns":
		return startCoreDNS(ctx, *name, *cluster, *pidFile)
	case "expose":
		// In the foreground: the relay lives as long as this command.
		if fs.NArg() != 1 {
			return fmt.Errorf("expose: want the host address of one TCP server (127.0.0.1:2379, say), got %q", fs.Args())
		}
		tb, err := openStarted(ctx, testbed.Options{Name: *name, Log: os.Stderr})
		if err != nil {
			return err
		}
		c := tb.Cluster(*cluster)
		if c == nil {
			return fmt.Errorf("testbed %q has no cluster %s", *name, *cluster)
		}
		addr, err := c.ExposeHost(ctx, fs.Arg(0))
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "%s's pods reach %s at %s until this command stops\n", c.ID, fs.Arg(0), addr)
		fmt.Println(addr)
		<-ctx.Done()
		return nil
	case "load-image":
		if fs.NArg() != 1 {
			return fmt.Errorf("load-image: want one archive (a Docker archive, an OCI layout or a tar of one), got %q", fs.Args())
		}
		tb, err := openStarted(ctx, testbed.Options{Name: *name, Log: os.Stderr})
		if err != nil {
			return err
		}
		refs, err := tb.LoadImage(fs.Arg(0), *image)
		if err != nil {
			return err
		}
		for _, r := range refs {
			fmt.Printf("loaded %s into testbed %q\n", r, *name)
		}
		return nil
	default:
		fs.Usage()
		os.Exit(2)
	}
	return nil
}

// openStarted opens a testbed that `up` started, and says how to start it
// when there is none.
func openStarted(ctx context.Context, opts testbed.Options) (*testbed.Testbed, error) {
	tb, err := testbed.Open(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("%w (start it with make testbed-up)", err)
	}
	return tb, nil
}

// startCoreDNS starts a CoreDNS for one cluster of a running testbed and
// leaves it running: `down` stops it with the rest of the testbed.
func startCoreDNS(ctx context.Context, name, cluster, pidFile string) error {
	tb, err := testbed.Open(ctx, testbed.Options{Name: name, Log: os.Stderr})
	if err != nil {
		return err
	}
	c := tb.Cluster(cluster)
	if c == nil {
		return fmt.Errorf("testbed %q has no cluster %s", name, cluster)
	}
	d, err := c.StartCoreDNS(ctx)
	if err != nil {
		return err
	}
	if pidFile != "" {
		if err := os.WriteFile(pidFile, []byte(strconv.Itoa(d.Pid())+"\n"), 0o644); err != nil {
			_ = d.Close()
			return fmt.Errorf("write pid file: %w", err)
		}
	}
	fmt.Fprintf(os.Stderr, "CoreDNS for %s answers on %s (pid %d; Corefile and log in %s)\n", c.ID, d.Addr(), d.Pid(), d.Dir())
	fmt.Println(d.Addr())
	return nil
}
