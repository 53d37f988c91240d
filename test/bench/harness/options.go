package harness

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Phase names, in the order a run goes through them.
const (
	PhaseColdStart = "coldstart"
	PhaseExport    = "export"
	PhaseChurn     = "churn"
	PhaseDNS       = "dns"
	PhaseSteady    = "steady"
	PhaseRestart   = "restart"
	PhaseBurst     = "burst"
	PhaseFloor     = "floor"
	// PhaseFailover runs on a clusterset of its own with a data plane.
	PhaseFailover = "failover"
	// PhaseInterop (Cloud Map only): an AWS-controller-shaped writer's
	// exports and endpoint changes, timed into every mcsd cluster.
	PhaseInterop = "interop"
)

// AllPhases lists every phase in run order.
var AllPhases = []string{PhaseColdStart, PhaseExport, PhaseChurn, PhaseInterop, PhaseDNS, PhaseSteady, PhaseRestart, PhaseBurst, PhaseFloor, PhaseFailover}

// Registry backends.
const (
	RegistryEtcd     = "etcd"
	RegistryCloudMap = "cloudmap"
)

// Options configure a run. The zero value of a field takes its default.
type Options struct {
	// Registry is "etcd" (the embedded etcd) or "cloudmap" (Cloud Map on
	// moto). Default etcd.
	Registry string
	// Clusters is the number of clusters. Default 3.
	Clusters int
	// Services are exported (owners round-robin) before the controllers
	// start: the cold start's load, and the background of the later
	// phases. Default 1000.
	Services int
	// Endpoints is the number of endpoints of each Service. Default 10.
	Endpoints int
	// ExportSamples more Services are exported one by one at ExportRate in
	// the export phase and timed. Default 100, at 4/s: each export is about
	// 6 API writes in every cluster, and the rate stays well below what the
	// testbed sustains, so that the phase times propagation, not a queue.
	ExportSamples int
	// InteropSamples is how many Services the interop phase's
	// AWS-controller-shaped writer exports, with two endpoints each.
	// Default 15.
	InteropSamples int
	ExportRate     float64
	// Churn is the rate of endpoint readiness changes in the churn phase,
	// for ChurnFor. Default 5/s for 30s.
	Churn    float64
	ChurnFor time.Duration
	// DNSSamples more Services are exported one at a time and resolved
	// through another cluster's CoreDNS. Default 30.
	DNSSamples int
	// Steady is how long the steady-state phase watches an idle clusterset.
	// Default 30s.
	Steady time.Duration
	// Bursts are the numbers of Services unexported and exported again at
	// once in the burst phase, each at most Services. Default 10, 100, 1000
	// (those below Services) and Services.
	Bursts []int
	// Phases to run, a subset of AllPhases (run in that order). Default all
	// but interop (etcd); export, churn, interop, steady, burst (cloudmap).
	Phases []string
	// FailoverTrials is how many times the failover phase moves traffic
	// away from the client's cluster and back, and its floor the same.
	// Default 5.
	FailoverTrials int
	// ControllerQPS and ControllerBurst are each controller's client rate
	// limit towards its API server. Default 1000 and 2000, so that the
	// client is not the brake (mcsd's command defaults to 50 and 100).
	ControllerQPS   float32
	ControllerBurst int
	// ClientQPS is the harness's client rate limit (load and watches).
	// Default 5000.
	ClientQPS float32
	// Workers is how many API writes the harness makes at once when it
	// creates objects. Default 16.
	Workers int
	// Timeout bounds the wait for convergence in each phase. Default 10m.
	Timeout time.Duration
	// TTL is the registry lease TTL. Default 30s (etcd), 60s (cloudmap).
	TTL time.Duration
	// PollInterval and SweepInterval are the Cloud Map backend's. Default:
	// the backend's (2s, 15m).
	PollInterval, SweepInterval time.Duration
	// APIServerProfile is how long the first cluster's kube-apiserver is
	// CPU-profiled from the start of the cold start (0: not at all). The
	// phase lasts at least that long.
	APIServerProfile time.Duration
	// APIServerProfileExport is the same for the export phase; off by
	// default, since profiling loads the API server whose latency the
	// phase times.
	APIServerProfileExport time.Duration
	// Out is the results folder. Required.
	Out string
	// Log receives progress lines. Default: discarded.
	Log io.Writer
}

// Default fills in the defaults.
func (o *Options) Default() {
	o.Registry = cmp.Or(o.Registry, RegistryEtcd)
	o.Clusters = cmp.Or(o.Clusters, 3)
	o.Services = cmp.Or(o.Services, 1000)
	o.Endpoints = cmp.Or(o.Endpoints, 10)
	o.ExportSamples = cmp.Or(o.ExportSamples, 100)
	o.InteropSamples = cmp.Or(o.InteropSamples, 15)
	o.DNSSamples = cmp.Or(o.DNSSamples, 30)
	o.ControllerBurst = cmp.Or(o.ControllerBurst, 2000)
	o.Workers = cmp.Or(o.Workers, 16)
	o.ExportRate = cmp.Or(o.ExportRate, 4)
	o.Churn = cmp.Or(o.Churn, 5)
	o.ChurnFor = cmp.Or(o.ChurnFor, 30*time.Second)
	steady, ttl := 30*time.Second, 30*time.Second
	if o.Registry == RegistryCloudMap {
		// A steady state of several heartbeats (every 20 s) and sweeps,
		// and a longer lease TTL.
		steady, ttl = 2*time.Minute, 60*time.Second
	}
	o.Steady = cmp.Or(o.Steady, steady)
	if o.Bursts == nil && o.Registry == RegistryCloudMap {
		o.Bursts = []int{min(50, o.Services)}
	}
	if o.Bursts == nil {
		for _, b := range []int{10, 100, 1000} {
			if b < o.Services {
				o.Bursts = append(o.Bursts, b)
			}
		}
		o.Bursts = append(o.Bursts, o.Services)
	}
	if len(o.Phases) == 0 {
		o.Phases = slices.DeleteFunc(slices.Clone(AllPhases), func(p string) bool { return p == PhaseInterop })
		if o.Registry == RegistryCloudMap {
			o.Phases = []string{PhaseExport, PhaseChurn, PhaseInterop, PhaseSteady, PhaseBurst}
		}
	}
	// Services only a phase that does not run would export are not made.
	if !o.has(PhaseExport) {
		o.ExportSamples = 0
	}
	if !o.has(PhaseDNS) {
		o.DNSSamples = 0
	}
	o.FailoverTrials = cmp.Or(o.FailoverTrials, 5)
	o.ControllerQPS = cmp.Or(o.ControllerQPS, 1000)
	o.ClientQPS = cmp.Or(o.ClientQPS, 5000)
	o.Timeout = cmp.Or(o.Timeout, 10*time.Minute)
	o.TTL = cmp.Or(o.TTL, ttl)
	if o.Log == nil {
		o.Log = io.Discard
	}
}

// Validate reports whether a run can start with o.
func (o *Options) Validate() error {
	var errs []error
	if o.Registry != RegistryEtcd && o.Registry != RegistryCloudMap {
		errs = append(errs, fmt.Errorf("registry %q: want etcd or cloudmap", o.Registry))
	}
	if o.Clusters < 2 || o.Clusters > 10 {
		errs = append(errs, fmt.Errorf("clusters %d: want 2 to 10", o.Clusters))
	}
	if o.Services < 1 {
		errs = append(errs, errors.New("services must be at least 1"))
	}
	if o.Endpoints < 1 || o.Endpoints > 1000 {
		errs = append(errs, fmt.Errorf("endpoints %d: want 1 to 1000", o.Endpoints))
	}
	if o.ExportSamples < 0 || o.DNSSamples < 0 || o.InteropSamples < 0 {
		errs = append(errs, errors.New("sample counts must not be negative"))
	}
	if o.ExportRate <= 0 || o.Churn <= 0 {
		errs = append(errs, errors.New("rates must be positive"))
	}
	for _, b := range o.Bursts {
		if b < 1 || b > o.Services {
			errs = append(errs, fmt.Errorf("burst %d: want 1 to services (%d)", b, o.Services))
		}
	}
	for _, p := range o.Phases {
		if !slices.Contains(AllPhases, p) {
			errs = append(errs, fmt.Errorf("phase %q: want one of %s", p, strings.Join(AllPhases, ", ")))
		}
	}
	if o.has(PhaseInterop) && o.Registry != RegistryCloudMap {
		errs = append(errs, fmt.Errorf("phase %s: Cloud Map only", PhaseInterop))
	}
	if o.Out == "" {
		errs = append(errs, errors.New("the results folder (Out) is required"))
	}
	return errors.Join(errs...)
}

func (o *Options) has(phase string) bool { return slices.Contains(o.Phases, phase) }

// ParseRate parses a rate: "5/s", "300/m", or a plain number per second.
func ParseRate(s string) (float64, error) {
	num, unit, found := strings.Cut(strings.TrimSpace(s), "/")
	v, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("rate %q: %w", s, err)
	}
	if !found {
		return v, nil
	}
	switch unit {
	case "s":
		return v, nil
	case "m", "min":
		return v / 60, nil
	case "h":
		return v / 3600, nil
	}
	return 0, fmt.Errorf("rate %q: unit must be s, m or h", s)
}

// ParseInts parses a comma-separated list of integers.
func ParseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", s, err)
		}
		out = append(out, n)
	}
	return out, nil
}
