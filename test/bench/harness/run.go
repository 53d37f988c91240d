package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/cloudmap"
	"github.com/mcsd-io/mcsd/pkg/registry/cloudmap/mototest"
	"github.com/mcsd-io/mcsd/test/bench/report"
	"github.com/mcsd-io/mcsd/test/framework"
	"github.com/mcsd-io/mcsd/test/testbed"
)

// run is one benchmark run.
type run struct {
	opts     Options
	env      *framework.Env
	clusters []*testbed.Cluster
	ids      []string
	wl       *workload
	tr       *tracker
	server   registryServer
	cloudMap *cloudMapServer
	ctrls    map[string]*controllerProc
	res      *report.Results
	profiles string
	logs     string
}

// Service index ranges: [0, Services) exported before the controllers
// start; then the export phase's; then the DNS phase's.
func (r *run) background() []int { return indexes(0, r.opts.Services) }
func (r *run) exportSamples() []int {
	return indexes(r.opts.Services, r.opts.Services+r.opts.ExportSamples)
}
func (r *run) dnsSamples() []int {
	from := r.opts.Services + r.opts.ExportSamples
	return indexes(from, from+r.opts.DNSSamples)
}

func indexes(from, to int) []int {
	out := make([]int, 0, to-from)
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

// Run runs the benchmark and writes its results into opts.Out. It returns
// the results even when a phase failed, with the error.
func Run(ctx context.Context, opts Options) (*report.Results, error) {
	opts.Default()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	total := opts.Services + opts.ExportSamples + opts.DNSSamples
	if limit := maxServices(opts.Clusters, opts.Endpoints); total > limit {
		return nil, fmt.Errorf("%d services of %d endpoints do not fit the clusters' pod ranges (at most %d)", total, opts.Endpoints, limit)
	}
	r := &run{opts: opts, ctrls: map[string]*controllerProc{}, profiles: filepath.Join(opts.Out, "profiles"), logs: filepath.Join(opts.Out, "logs")}
	for _, d := range []string{r.profiles, r.logs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	r.res = &report.Results{Started: time.Now(), Machine: MachineInfo(), Params: params(opts)}
	err := r.run(ctx)
	r.stopControllers()
	if r.env != nil {
		if cerr := r.env.Close(context.WithoutCancel(ctx)); cerr != nil {
			r.logf("close testbed: %v", cerr)
		}
	}
	if r.server != nil {
		r.server.close()
	}
	r.res.Finished = time.Now()
	r.res.Targets = targets(r.res)
	r.res.Notes = append(r.res.Notes, notes(r.res)...)
	if err != nil {
		r.res.Notes = append(r.res.Notes, "The run failed: "+err.Error())
	}
	if werr := r.res.Write(opts.Out); werr != nil {
		err = errors.Join(err, fmt.Errorf("write results: %w", werr))
	}
	return r.res, err
}

func params(o Options) report.Params {
	p := report.Params{
		Registry: o.Registry, Clusters: o.Clusters, Services: o.Services, Endpoints: o.Endpoints,
		ExportSamples: o.ExportSamples, ExportRate: o.ExportRate, Churn: o.Churn, ChurnFor: o.ChurnFor.String(),
		DNSSamples: o.DNSSamples, Steady: o.Steady.String(), Bursts: o.Bursts, Phases: o.Phases,
		ControllerQPS: o.ControllerQPS, ControllerBur: o.ControllerBurst,
	}
	p.Extra = append(p.Extra, fmt.Sprintf("Registry lease TTL %s.", o.TTL))
	if o.Registry == RegistryCloudMap {
		poll, sweep := o.PollInterval, o.SweepInterval
		if poll == 0 {
			poll = cloudmap.DefaultPollInterval
		}
		if sweep == 0 {
			sweep = cloudmap.DefaultSweepInterval
		}
		p.Extra = append(p.Extra, fmt.Sprintf("Cloud Map backend: change feed poll interval %s, sweep interval %s, default client-side rate limits; moto as the server.", poll, sweep))
	}
	return p
}

func (r *run) logf(format string, args ...any) {
	fmt.Fprintf(r.opts.Log, "[bench %s] %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

func (r *run) run(ctx context.Context) error {
	o := r.opts
	// No data plane: the benchmark's Services have no pods, and kube-proxy
	// programming thousands of them would take the CPU the figures measure.
	fwOpts := framework.Options{Name: "bench", Clusters: o.Clusters, TTL: o.TTL, NoDataPlane: true}
	if o.Registry == RegistryCloudMap {
		cm, err := newCloudMapServer(ctx)
		if err != nil {
			return err
		}
		r.cloudMap, r.server = cm, cm
		fwOpts.OpenRegistry = func(ctx context.Context, id registry.Identity) (registry.Registry, error) {
			return cloudmap.New(ctx, cloudmap.Options{Identity: id, Region: mototest.Region, Endpoint: cm.url(), Credentials: mototest.Credentials})
		}
	}
	r.logf("starting %d clusters", o.Clusters)
	env, err := framework.Start(ctx, fwOpts)
	if err != nil {
		return fmt.Errorf("start testbed: %w", err)
	}
	r.env = env
	r.clusters = env.TB.Clusters
	for _, c := range r.clusters {
		r.ids = append(r.ids, c.ID)
	}
	if o.Registry == RegistryEtcd {
		s, err := newEtcdServer(env.RegistryURL())
		if err != nil {
			return err
		}
		r.server = s
	}
	r.tr = newTracker(r.ids)
	if s, ok := r.server.(*etcdServer); ok {
		go s.follow(ctx, r.tr)
	}
	for _, c := range r.clusters {
		if err := r.tr.watch(ctx, c, o.ClientQPS); err != nil {
			return err
		}
	}
	if r.wl, err = newWorkload(r.clusters, o.Endpoints, o.Workers, o.ClientQPS); err != nil {
		return err
	}
	if err := r.wl.createNamespaces(ctx); err != nil {
		return err
	}
	total := o.Services + o.ExportSamples + o.DNSSamples
	r.logf("creating %d Services with %d endpoints each", total, o.Endpoints)
	started := time.Now()
	if err := r.wl.createServices(ctx, 0, total); err != nil {
		return err
	}
	r.logf("created them in %s", time.Since(started).Round(time.Millisecond))

	start := r.preload
	switch {
	case o.has(PhaseColdStart):
		start = r.coldStart
	case !slices.ContainsFunc(o.Phases, func(p string) bool { return p != PhaseFloor }):
		// The floor alone needs no clusterset: it runs on the bare testbed,
		// as the cold start does.
		start = func(context.Context) error { return nil }
	}
	for _, ph := range []struct {
		name string
		f    func(context.Context) error
	}{
		{PhaseColdStart, start},
		{PhaseExport, r.exportPhase},
		{PhaseChurn, r.churnPhase},
		{PhaseInterop, r.interopPhase},
		{PhaseDNS, r.dnsPhase},
		{PhaseSteady, r.steadyPhase},
		{PhaseRestart, r.restartPhase},
		{PhaseBurst, r.burstPhase},
		{PhaseFloor, r.floorPhase},
		{PhaseFailover, r.failoverPhase},
	} {
		if !o.has(ph.name) && ph.name != PhaseColdStart {
			continue
		}
		done := len(r.res.Phases)
		err := ph.f(ctx)
		for _, p := range r.res.Phases[done:] {
			if p.Changes > 0 {
				p.PerChange = perChange(p, len(r.ids))
			}
			r.logf("%s: %s", p.Name, latencyLine(p))
		}
		if err != nil {
			return fmt.Errorf("phase %s: %w", ph.name, err)
		}
	}
	return nil
}

// controllerConfig returns the configuration of cluster c's controller.
func (r *run) controllerConfig(c *testbed.Cluster, cpuProfile string) (controllerConfig, error) {
	ports := make([]int, 2)
	for i := range ports {
		p, err := testbed.FreePort()
		if err != nil {
			return controllerConfig{}, err
		}
		ports[i] = p
	}
	cfg := controllerConfig{
		Cluster: c.ID, Kubeconfig: c.Kubeconfig, QPS: r.opts.ControllerQPS, Burst: r.opts.ControllerBurst,
		Registry: r.opts.Registry, TTL: r.opts.TTL,
		Listen: fmt.Sprintf("127.0.0.1:%d", ports[0]), HealthAddr: fmt.Sprintf("127.0.0.1:%d", ports[1]),
		CPUProfile: cpuProfile,
	}
	if r.opts.Registry == RegistryCloudMap {
		cfg.CloudMapURL = r.cloudMap.url()
		cfg.PollInterval, cfg.SweepInterval = r.opts.PollInterval, r.opts.SweepInterval
	} else {
		cfg.EtcdURL = r.env.RegistryURL()
	}
	return cfg, nil
}

// startControllers starts every cluster's controller, each profiling its
// CPU from the start into the phase's profile.
func (r *run) startControllers(phase string) error {
	for _, c := range r.clusters {
		cfg, err := r.controllerConfig(c, r.profilePath("cpu", phase, c.ID))
		if err != nil {
			return err
		}
		p, err := startController(cfg, r.logs)
		if err != nil {
			return err
		}
		r.ctrls[c.ID] = p
	}
	return nil
}

func (r *run) waitControllersReady(ctx context.Context) error {
	for _, id := range r.ids {
		if err := r.ctrls[id].waitReady(ctx, r.opts.Timeout); err != nil {
			return err
		}
	}
	return nil
}

func (r *run) stopControllers() {
	for id, p := range r.ctrls {
		p.stop()
		delete(r.ctrls, id)
	}
}

func (r *run) profilePath(kind, phase, cluster string) string {
	return filepath.Join(r.profiles, fmt.Sprintf("%s-%s-%s.pprof", kind, phase, cluster))
}

// snapshot is the counters at one moment.
type snapshot struct {
	at        time.Time
	ctrlPID   map[string]int
	ctrlCPU   map[string]float64
	ctrlStats map[string]controllerStats
	testbed   map[string]float64
	self      float64
	machine   float64
	server    map[string]float64
	peakRSS   map[string]uint64
	heapInuse map[string]uint64
}

func (r *run) snapshot(ctx context.Context) snapshot {
	s := snapshot{
		at: time.Now(), ctrlPID: map[string]int{}, ctrlCPU: map[string]float64{}, ctrlStats: map[string]controllerStats{},
		peakRSS: map[string]uint64{}, heapInuse: map[string]uint64{},
		testbed: TestbedCPU(r.env.TB.Dir()), self: selfCPU(), machine: MachineBusy(),
	}
	for id, p := range r.ctrls {
		s.ctrlPID[id] = p.pid()
		s.ctrlCPU[id], _ = ProcCPU(p.pid())
		s.peakRSS[id], _ = ProcPeakRSS(p.pid())
		if st, err := p.stats(ctx); err == nil {
			s.ctrlStats[id] = st
			s.heapInuse[id] = st.HeapInuse
		}
	}
	if r.server != nil {
		s.server = r.server.counters(ctx)
	}
	return s
}

// measure runs one phase between two snapshots, profiling the controllers
// that run when it starts, and adds what it measured to the results.
func (r *run) measure(ctx context.Context, name, describe string, body func(ph *report.Phase) error) (*report.Phase, error) {
	ph := &report.Phase{Name: name, Describe: describe, Latency: map[string]report.Dist{}}
	r.logf("phase %s: %s", name, describe)
	for id, p := range r.ctrls {
		if err := p.startProfile(ctx, r.profilePath("cpu", name, id)); err != nil {
			r.logf("start CPU profile of %s: %v", id, err)
		}
	}
	before := r.snapshot(ctx)
	err := body(ph)
	after := r.snapshot(ctx)
	ph.Seconds = after.at.Sub(before.at).Seconds()
	for id, p := range r.ctrls {
		if perr := p.stopProfile(ctx); perr != nil {
			r.logf("stop CPU profile of %s: %v", id, perr)
		}
		if herr := p.writeHeap(ctx, r.profilePath("heap", name, id)); herr != nil {
			r.logf("heap profile of %s: %v", id, herr)
		}
	}
	r.fill(ph, before, after)
	r.res.Phases = append(r.res.Phases, ph)
	r.logf("phase %s done in %.1fs", name, ph.Seconds)
	return ph, err
}

func latencyLine(ph *report.Phase) string {
	var parts []string
	for _, k := range sortedKeys(ph.Latency) {
		d := ph.Latency[k]
		parts = append(parts, fmt.Sprintf("%s n=%d p50=%s p99=%s max=%s", k, d.N, report.MS(d.P50), report.MS(d.P99), report.MS(d.Max)))
	}
	if ph.Converged > 0 {
		parts = append(parts, fmt.Sprintf("converged in %.2fs", ph.Converged))
	}
	return strings.Join(parts, "; ")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// fill computes the phase's resource figures from two snapshots. A
// controller whose process changed in between counts from zero.
func (r *run) fill(ph *report.Phase, before, after snapshot) {
	ph.Controllers = map[string]report.Proc{}
	ph.APIWrites = map[string]map[string]int{}
	ph.RegistryOps = map[string]float64{}
	ph.Reconciles = map[string]float64{}
	ph.Propagation = map[string]float64{}
	for id, pid := range after.ctrlPID {
		same := before.ctrlPID[id] == pid
		cpu := after.ctrlCPU[id]
		if same {
			cpu -= before.ctrlCPU[id]
		}
		ph.Controllers[id] = report.Proc{CPUSeconds: cpu, PeakRSS: after.peakRSS[id], HeapInuse: after.heapInuse[id]}
		writes := map[string]int{}
		for res, n := range after.ctrlStats[id].Writes {
			if same {
				n -= before.ctrlStats[id].Writes[res]
			}
			if n != 0 {
				writes[res] = n
			}
		}
		ph.APIWrites[id] = writes
		for series, v := range after.ctrlStats[id].Metrics {
			if same {
				v -= before.ctrlStats[id].Metrics[series]
			}
			name, labels := splitSeries(series)
			switch name {
			case "mcsd_registry_operations_total":
				ph.RegistryOps[labels["operation"]] += v
			case "controller_runtime_reconcile_total":
				ph.Reconciles[labels["controller"]] += v
			case "mcsd_propagation_seconds_count":
				ph.Propagation["observations"] += v
			case "mcsd_propagation_seconds_sum":
				ph.Propagation["sum seconds"] += v
			}
		}
	}
	if n := ph.Propagation["observations"]; n > 0 {
		ph.Propagation["mean seconds"] = ph.Propagation["sum seconds"] / n
	}
	ph.Processes = map[string]float64{}
	for k, v := range after.testbed {
		ph.Processes[k] = v - before.testbed[k]
	}
	ph.Processes["harness"] = after.self - before.self
	ph.Processes["machine"] = after.machine - before.machine
	ph.RegistryServer = map[string]float64{}
	for k, v := range after.server {
		if d := v - before.server[k]; d != 0 {
			ph.RegistryServer[k] = d
		}
	}
}

// splitSeries splits "name{a=b,c=d}" into its name and labels.
func splitSeries(s string) (string, map[string]string) {
	name, rest, _ := strings.Cut(s, "{")
	labels := map[string]string{}
	for _, kv := range strings.Split(strings.TrimSuffix(rest, "}"), ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			labels[k] = v
		}
	}
	return name, labels
}

func perChange(ph *report.Phase, clusters int) map[string]float64 {
	n := float64(ph.Changes)
	out := map[string]float64{}
	var writes, cpu float64
	for _, byRes := range ph.APIWrites {
		for _, w := range byRes {
			writes += float64(w)
		}
	}
	for _, c := range ph.Controllers {
		cpu += c.CPUSeconds
	}
	out["API writes, all clusters"] = writes / n
	out["API writes per cluster"] = writes / n / float64(clusters)
	out["controller CPU ms, all clusters"] = cpu * 1000 / n
	for _, op := range []string{"Publish", "PutExport", "PutEndpoints", "DeleteExport", "WatchUpdate"} {
		if v := ph.RegistryOps[op]; v > 0 {
			out["mcsd registry calls: "+op] = v / n
		}
	}
	for k, v := range ph.RegistryServer {
		out["registry server: "+k] = v / n
	}
	return out
}

// samples turns outcomes into latency samples, one per cluster other than
// the source.
func (r *run) samples(phase, what string, outs []outcome) []float64 {
	var xs []float64
	for _, o := range outs {
		if o.start.IsZero() {
			continue
		}
		for _, c := range r.ids {
			if c == o.source {
				continue
			}
			d, ok := o.done[c]
			if !ok {
				continue
			}
			secs := max(d.Sub(o.start).Seconds(), 0)
			xs = append(xs, secs)
			r.res.Samples = append(r.res.Samples, report.Sample{Phase: phase, What: what, Service: o.service, Source: o.source, Cluster: c, Seconds: secs})
		}
	}
	return xs
}

// stages summarizes, over outs, the time from the start to each step on
// the way (the source's steps once per change, the importers' for every
// cluster other than the source).
func (r *run) stages(outs []outcome) map[string]report.Dist {
	by := map[string][]float64{}
	for _, o := range outs {
		if o.start.IsZero() {
			continue
		}
		for c, st := range o.stages {
			for step, at := range st {
				if c == o.source && importerStage(step) {
					continue // the source's own import
				}
				by[step] = append(by[step], max(at.Sub(o.start).Seconds(), 0))
			}
		}
	}
	out := map[string]report.Dist{}
	for step, xs := range by {
		out[step] = report.Summarize(xs)
	}
	return out
}

// lastDone is the latest convergence of any cluster among outs.
func lastDone(outs []outcome) time.Time {
	var last time.Time
	for _, o := range outs {
		for _, d := range o.done {
			if d.After(last) {
				last = d
			}
		}
	}
	return last
}

func names(idx []int) []string {
	out := make([]string, len(idx))
	for i, n := range idx {
		out[i] = serviceName(n)
	}
	return out
}
