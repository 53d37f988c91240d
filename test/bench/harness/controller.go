package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	rpprof "runtime/pprof"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap/zapcore"
	"k8s.io/client-go/tools/clientcmd"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/mcsd-io/mcsd/internal/manager"
	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/cloudmap"
	"github.com/mcsd-io/mcsd/pkg/registry/cloudmap/mototest"
	etcdregistry "github.com/mcsd-io/mcsd/pkg/registry/etcd"
	"github.com/mcsd-io/mcsd/test/testbed"
)

// envController carries a controllerConfig (JSON) to a process started as
// a controller: MaybeRunController then runs mcsd instead of the benchmark.
const envController = "MCSD_BENCH_CONTROLLER"

// controllerConfig is how the harness starts one cluster's mcsd.
type controllerConfig struct {
	Cluster    string
	Kubeconfig string
	QPS        float32
	Burst      int
	// Registry is "etcd" or "cloudmap".
	Registry string
	// EtcdURL is the registry's client URLs, comma-separated.
	EtcdURL       string
	TTL           time.Duration
	CloudMapURL   string
	PollInterval  time.Duration
	SweepInterval time.Duration
	// Listen serves /stats, /profile/{start,stop} and /debug/pprof.
	Listen     string
	HealthAddr string
	// CPUProfile, when set, is profiled into from the start of the process.
	CPUProfile string
}

// MaybeRunController runs mcsd and exits when this process was started as
// a benchmark controller; otherwise it returns at once. The benchmark's
// main and its test's TestMain call it first.
func MaybeRunController() {
	data := os.Getenv(envController)
	if data == "" {
		return
	}
	var cfg controllerConfig
	if err := json.Unmarshal([]byte(data), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "bench controller config:", err)
		os.Exit(2)
	}
	if err := runController(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "bench controller:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// runController is the controller process: mcsd's manager.Run, as the
// mcsd command runs it, with its API writes counted and its metrics and
// profiles served to the harness.
func runController(cfg controllerConfig) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	prof := &profiler{}
	if cfg.CPUProfile != "" {
		if err := prof.start(cfg.CPUProfile); err != nil {
			return err
		}
	}
	defer prof.stop()

	restCfg, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	restCfg.QPS, restCfg.Burst = cfg.QPS, cfg.Burst
	wc := testbed.NewWriteCounter()
	restCfg.Wrap(wc.Wrap)

	l, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: controllerMux(wc, prof), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	defer func() { _ = srv.Close() }()

	// Times to the nanosecond: the benchmark's phases are timed in
	// milliseconds, and its logs are read against them.
	log := zap.New(zap.UseDevMode(false), zap.WriteTo(os.Stderr), func(o *zap.Options) { o.TimeEncoder = zapcore.RFC3339NanoTimeEncoder })
	ctrllog.SetLogger(log) // as the mcsd command does
	ctx = logr.NewContext(ctx, log)
	err = manager.Run(ctx, manager.Options{
		RESTConfig:    restCfg,
		OpenRegistry:  cfg.openRegistry,
		MetricsAddr:   "0",
		HealthAddr:    cfg.HealthAddr,
		IdentityRetry: 200 * time.Millisecond,
	})
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func (cfg controllerConfig) openRegistry(ctx context.Context, id registry.Identity) (registry.Registry, error) {
	switch cfg.Registry {
	case "cloudmap":
		return cloudmap.New(ctx, cloudmap.Options{
			Identity:      id,
			Region:        mototest.Region,
			Endpoint:      cfg.CloudMapURL,
			Credentials:   mototest.Credentials,
			TTL:           cfg.TTL,
			PollInterval:  cfg.PollInterval,
			SweepInterval: cfg.SweepInterval,
		})
	default:
		return etcdregistry.New(ctx, etcdregistry.Options{Identity: id, Endpoints: strings.Split(cfg.EtcdURL, ","), TTL: cfg.TTL})
	}
}

// controllerStats is what /stats returns.
type controllerStats struct {
	// Writes are the API writes so far, by resource.
	Writes map[string]int
	// Metrics are mcsd's and controller-runtime's series, flattened:
	// "name{label=value,...}"; histograms as name_count and name_sum.
	Metrics   map[string]float64
	HeapInuse uint64
}

func controllerMux(wc *testbed.WriteCounter, prof *profiler) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/stats", func(w http.ResponseWriter, _ *http.Request) {
		st := controllerStats{Writes: wc.Snapshot(), Metrics: map[string]float64{}, HeapInuse: heapInuse()}
		families, err := ctrlmetrics.Registry.Gather()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		flatten(families, func(name string) bool {
			return strings.HasPrefix(name, "mcsd_") || strings.HasPrefix(name, "controller_runtime_reconcile_")
		}, st.Metrics)
		_ = json.NewEncoder(w).Encode(st)
	})
	mux.HandleFunc("/profile/start", func(w http.ResponseWriter, r *http.Request) {
		if err := prof.start(r.URL.Query().Get("file")); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})
	mux.HandleFunc("/profile/stop", func(w http.ResponseWriter, _ *http.Request) { prof.stop() })
	mux.HandleFunc("/heap", func(w http.ResponseWriter, r *http.Request) {
		runtime.GC()
		f, err := os.Create(r.URL.Query().Get("file"))
		if err == nil {
			err = errors.Join(rpprof.Lookup("heap").WriteTo(f, 0), f.Close())
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	return mux
}

func heapInuse() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// flatten adds the series of the families keep selects to out.
func flatten(families []*dto.MetricFamily, keep func(string) bool, out map[string]float64) {
	for _, f := range families {
		if !keep(f.GetName()) {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := make([]string, 0, len(m.GetLabel()))
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(labels)
			ls := "{" + strings.Join(labels, ",") + "}"
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				out[f.GetName()+ls] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[f.GetName()+ls] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				out[f.GetName()+"_count"+ls] = float64(m.GetHistogram().GetSampleCount())
				out[f.GetName()+"_sum"+ls] = m.GetHistogram().GetSampleSum()
			}
		}
	}
}

// profiler runs one CPU profile at a time.
type profiler struct {
	mu sync.Mutex
	f  *os.File
}

func (p *profiler) start(file string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopLocked()
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if err := rpprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return err
	}
	p.f = f
	return nil
}

func (p *profiler) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopLocked()
}

func (p *profiler) stopLocked() {
	if p.f != nil {
		rpprof.StopCPUProfile()
		_ = p.f.Close()
		p.f = nil
	}
}

// controllerProc is, in the harness, one running controller process.
type controllerProc struct {
	cluster string
	cmd     *exec.Cmd
	base    string // http://listen
	health  string
	exited  chan struct{}
	log     *os.File
}

// startController starts cluster's mcsd as a process of this executable.
func startController(cfg controllerConfig, logDir string) (*controllerProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	data, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	logFile, err := os.OpenFile(filepath.Join(logDir, cfg.Cluster+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), envController+"="+string(data))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("start controller of %s: %w", cfg.Cluster, err)
	}
	p := &controllerProc{cluster: cfg.Cluster, cmd: cmd, base: "http://" + cfg.Listen, health: "http://" + cfg.HealthAddr,
		exited: make(chan struct{}), log: logFile}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

func (p *controllerProc) pid() int { return p.cmd.Process.Pid }

// stop ends the process with SIGTERM (the manager stops cleanly; nothing is
// withdrawn from the registry) and waits for it.
func (p *controllerProc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
	_ = p.log.Close()
}

// waitReady waits for /readyz: the registry read and the caches synced.
func (p *controllerProc) waitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		select {
		case <-p.exited:
			return fmt.Errorf("controller of %s exited: see logs/%s.log", p.cluster, p.cluster)
		default:
		}
		if err := p.get(ctx, p.health+"/readyz", nil); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("controller of %s not ready after %s", p.cluster, timeout)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (p *controllerProc) stats(ctx context.Context) (controllerStats, error) {
	var st controllerStats
	err := p.get(ctx, p.base+"/stats", &st)
	return st, err
}

func (p *controllerProc) startProfile(ctx context.Context, file string) error {
	return p.get(ctx, p.base+"/profile/start?file="+file, nil)
}

func (p *controllerProc) stopProfile(ctx context.Context) error {
	return p.get(ctx, p.base+"/profile/stop", nil)
}

func (p *controllerProc) writeHeap(ctx context.Context, file string) error {
	return p.get(ctx, p.base+"/heap?file="+file, nil)
}

func (p *controllerProc) get(ctx context.Context, url string, into any) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	if into == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(into)
}

// Controller is one cluster's mcsd as the benchmark runs it (a process of
// this executable, its API writes counted), for other benchmarks: `make
// bench-scale` runs its real clusters with it.
type Controller struct{ p *controllerProc }

// StartEtcdController starts cluster c's mcsd on the etcd registry at urls
// with lease ttl; its log goes to logDir/<cluster>.log, and its CPU
// profile from the process's start to StopProfile to cpuProfile, when set.
// The executable must call MaybeRunController first thing in main.
func StartEtcdController(c *testbed.Cluster, urls []string, ttl time.Duration, logDir, cpuProfile string) (*Controller, error) {
	ports, err := testbed.FreePorts(2)
	if err != nil {
		return nil, err
	}
	p, err := startController(controllerConfig{
		Cluster: c.ID, Kubeconfig: c.Kubeconfig, QPS: 1000, Burst: 2000,
		Registry: RegistryEtcd, EtcdURL: strings.Join(urls, ","), TTL: ttl,
		Listen: fmt.Sprintf("127.0.0.1:%d", ports[0]), HealthAddr: fmt.Sprintf("127.0.0.1:%d", ports[1]),
		CPUProfile: cpuProfile,
	}, logDir)
	if err != nil {
		return nil, err
	}
	return &Controller{p: p}, nil
}

// WaitReady waits until the controller has read the registry and synced
// its caches.
func (c *Controller) WaitReady(ctx context.Context, timeout time.Duration) error {
	return c.p.waitReady(ctx, timeout)
}

// Writes are the API writes the controller made so far, by resource
// ("endpointslices", "serviceimports/status", "events", ...).
func (c *Controller) Writes(ctx context.Context) (map[string]int, error) {
	st, err := c.p.stats(ctx)
	return st.Writes, err
}

// Reconciles are the reconciles the controller named controller ran so
// far, every result, and the seconds they took.
func (c *Controller) Reconciles(ctx context.Context, controller string) (n, seconds float64, err error) {
	st, err := c.p.stats(ctx)
	for k, v := range st.Metrics {
		switch {
		case !strings.Contains(k, "controller="+controller):
		case strings.HasPrefix(k, "controller_runtime_reconcile_total{"):
			n += v
		case strings.HasPrefix(k, "controller_runtime_reconcile_time_seconds_sum{"):
			seconds += v
		}
	}
	return n, seconds, err
}

// StopProfile ends the CPU profile the controller began at its start.
func (c *Controller) StopProfile(ctx context.Context) error { return c.p.stopProfile(ctx) }

// PID is the controller's process id.
func (c *Controller) PID() int { return c.p.pid() }

// Stop ends the controller as mcsd ends on SIGTERM.
func (c *Controller) Stop() { c.p.stop() }
