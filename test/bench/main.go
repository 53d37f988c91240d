package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/mcsd-io/mcsd/test/bench/harness"
	"github.com/mcsd-io/mcsd/test/bench/report"
)

func main() {
	// This executable is also each cluster's controller process.
	harness.MaybeRunController()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		o                   harness.Options
		exportRate, churn   string
		bursts, phases, out string
		qps                 float64
		maxLoad             float64
		poll, sweep         time.Duration
	)
	fl := flag.CommandLine
	fl.StringVar(&o.Registry, "registry", "etcd", "registry backend: etcd (embedded) or cloudmap (moto)")
	fl.IntVar(&o.Clusters, "clusters", 3, "number of clusters")
	fl.IntVar(&o.Services, "services", 0, "services exported before the controllers start (default 1000; cloudmap 50)")
	fl.IntVar(&o.Endpoints, "endpoints", 10, "endpoints per service")
	fl.IntVar(&o.ExportSamples, "export-samples", 0, "services exported one by one in the export phase (default 100; cloudmap 20)")
	fl.IntVar(&o.InteropSamples, "interop-samples", 0, "services the interop phase's AWS-controller-shaped writer exports, two endpoints each (cloudmap; default 15)")
	fl.StringVar(&exportRate, "export-rate", "4/s", "rate of the export phase's exports (each is ~6 API writes in every cluster: keep it below what the testbed sustains)")
	fl.StringVar(&churn, "churn", "5/s", "rate of endpoint readiness changes in the churn phase")
	fl.DurationVar(&o.ChurnFor, "churn-for", 30*time.Second, "duration of the churn phase")
	fl.IntVar(&o.DNSSamples, "dns-samples", 30, "services exported one at a time and resolved through CoreDNS")
	fl.DurationVar(&o.Steady, "steady", 0, "duration of the steady-state phase (default 30s; cloudmap 2m)")
	fl.StringVar(&bursts, "bursts", "", "services exported at once in the burst phase, comma-separated (default 10,100,1000 capped at -services)")
	fl.IntVar(&o.FailoverTrials, "failover-trials", 0, "times the failover phase moves traffic away and back (default 5)")
	fl.StringVar(&phases, "phases", "", "phases to run, comma-separated: "+strings.Join(harness.AllPhases, ",")+" (default all but interop; cloudmap export,churn,interop,steady,burst)")
	fl.Float64Var(&qps, "controller-qps", 1000, "each controller's client QPS towards its API server (burst: twice)")
	fl.DurationVar(&o.APIServerProfile, "apiserver-profile", 30*time.Second, "CPU-profile the first cluster's kube-apiserver for this long from the start of the cold start (0: off)")
	fl.DurationVar(&o.APIServerProfileExport, "apiserver-profile-export", 0, "CPU-profile the first cluster's kube-apiserver for this long from the start of the export phase (0: off; the profiler loads the API server whose latency the phase times)")
	fl.DurationVar(&o.Timeout, "timeout", 10*time.Minute, "bound on each phase's convergence")
	fl.DurationVar(&poll, "cloudmap-poll", 0, "Cloud Map backend poll interval (default: the backend's)")
	fl.DurationVar(&sweep, "cloudmap-sweep", 0, "Cloud Map backend sweep interval (default: the backend's)")
	fl.Float64Var(&maxLoad, "max-load", 0, "refuse to start while the one-minute load average is above this (0: no check)")
	fl.StringVar(&out, "out", "", "results folder (default results/<timestamp>)")
	render := fl.String("render", "", "only write the report and plots of an earlier run's results folder again (from its results.json and samples.csv)")
	flag.Parse()
	if *render != "" {
		res, err := report.Read(*render)
		if err != nil {
			return err
		}
		return res.Write(*render)
	}

	var err error
	if o.ExportRate, err = harness.ParseRate(exportRate); err != nil {
		return err
	}
	if o.Churn, err = harness.ParseRate(churn); err != nil {
		return err
	}
	if o.Registry == harness.RegistryCloudMap {
		o.Services = cmp.Or(o.Services, 50)
		o.ExportSamples = cmp.Or(o.ExportSamples, 20)
	}
	o.Services = cmp.Or(o.Services, 1000)
	if bursts != "" {
		if o.Bursts, err = harness.ParseInts(bursts); err != nil {
			return fmt.Errorf("-bursts: %w", err)
		}
	}
	if phases != "" {
		o.Phases = strings.Split(phases, ",")
	}
	o.ControllerQPS, o.ControllerBurst = float32(qps), int(2*qps)
	o.PollInterval, o.SweepInterval = poll, sweep
	if out == "" {
		out = filepath.Join("results", time.Now().Format("20060102-150405"))
	}
	o.Out = out
	o.Log = os.Stderr
	if maxLoad > 0 {
		if err := harness.CheckLoad(maxLoad); err != nil {
			return err
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := harness.Run(ctx, o)
	if res != nil {
		fmt.Printf("\n%s\nReport: %s\n", strings.TrimSpace(res.TargetTable()), filepath.Join(out, report.FileMarkdown))
	}
	return err
}
