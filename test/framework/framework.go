package framework

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/mcsd-io/mcsd/internal/manager"
	"github.com/mcsd-io/mcsd/pkg/registry"
	etcdregistry "github.com/mcsd-io/mcsd/pkg/registry/etcd"
	"github.com/mcsd-io/mcsd/pkg/registry/etcd/embedded"
	"github.com/mcsd-io/mcsd/test/testbed"
	"github.com/mcsd-io/mcsd/test/testbed/etcdcluster"
)

// Options configure an Env.
type Options struct {
	// Name makes the testbed's state directory unique.
	Name string
	// Clusters is the number of clusters. Default 3.
	Clusters int
	// TTL is the registry lease TTL. Default 5s.
	TTL time.Duration
	// RegistryHealthInterval and RegistryRequestTimeout are the etcd
	// backend's HealthInterval and RequestTimeout: together they bound how
	// long a controller takes to notice that the registry is down. Default:
	// the backend's (5s and 10s).
	RegistryHealthInterval time.Duration
	RegistryRequestTimeout time.Duration
	// OpenRegistry, when set, opens another registry backend (Cloud Map on
	// moto, say) instead of the embedded etcd; StartRegistry and
	// StopRegistry then do nothing.
	OpenRegistry func(ctx context.Context, id registry.Identity) (registry.Registry, error)
	// WithoutControllers makes Main start no mcsd: the tests start their own.
	WithoutControllers bool
	// ShortWithout makes Main, under -short (make test-unit), run the tests
	// with no environment: ready is not called, and the tests that need the
	// environment skip with NeedEnv. make test runs without -short.
	ShortWithout bool
	// RegistryMembers, when more than 1, runs the registry as an etcd
	// cluster of that many members, each a process of the testbed's etcd
	// binary (Env.EtcdCluster injects faults), instead of the embedded
	// single-member etcd.
	RegistryMembers int
	// NoDataPlane starts the clusters without the testbed's data plane: kwok
	// fakes the pods (nothing runs, nothing routes) and no root is needed.
	NoDataPlane bool
	// SharedZones names the nodes' zones alike in every cluster
	// (testbed.Options.SharedZones).
	SharedZones bool
	// TakeoverGrace is the controllers' manager.Options.TakeoverGrace.
	TakeoverGrace time.Duration
}

// Env is a running clusterset: clusters, a registry, controllers.
type Env struct {
	TB       *testbed.Testbed
	opts     Options
	dataDir  string
	regMu    sync.Mutex
	registry *embedded.Server
	regURL   string
	// etcd is the registry when Options.RegistryMembers > 1.
	etcd *etcdcluster.Cluster

	mu          sync.Mutex
	controllers map[string]*Controller
}

// Start brings up the environment; Close tears it down.
func Start(ctx context.Context, opts Options) (*Env, error) {
	if opts.Clusters == 0 {
		opts.Clusters = 3
	}
	if opts.TTL == 0 {
		opts.TTL = 5 * time.Second
	}
	if opts.Name == "" {
		opts.Name = "e2e"
	}
	// Parts of controller-runtime log through its global logger.
	ctrllog.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(logWriter("controller-runtime"))))
	tb, err := testbed.Start(ctx, testbed.Options{
		Name:        fmt.Sprintf("%s-%d", opts.Name, os.Getpid()),
		Clusters:    opts.Clusters,
		Ephemeral:   true,
		NoDataPlane: opts.NoDataPlane,
		SharedZones: opts.SharedZones,
		Log:         os.Stderr,
	})
	if err != nil {
		return nil, err
	}
	e := &Env{TB: tb, opts: opts, dataDir: filepath.Join(tb.Dir(), "registry"), controllers: map[string]*Controller{}}
	port, err := testbed.FreePort()
	if err != nil {
		_ = tb.Close(ctx)
		return nil, err
	}
	e.regURL = fmt.Sprintf("http://127.0.0.1:%d", port)
	if opts.OpenRegistry != nil {
		return e, nil
	}
	if opts.RegistryMembers > 1 {
		bins, err := testbed.EnsureBinaries(ctx, nil)
		if err == nil {
			e.etcd, err = etcdcluster.Start(ctx, etcdcluster.Config{Binary: bins.Etcd, Dir: e.dataDir, Members: opts.RegistryMembers})
		}
		if err != nil {
			_ = tb.Close(ctx)
			return nil, fmt.Errorf("start registry: %w", err)
		}
		e.regURL = e.etcd.ClientURLs()[0]
		return e, nil
	}
	if err := e.StartRegistry(ctx); err != nil {
		_ = tb.Close(ctx)
		return nil, err
	}
	return e, nil
}

// Close stops controllers, the registry and the clusters.
func (e *Env) Close(ctx context.Context) error {
	e.mu.Lock()
	ids := make([]string, 0, len(e.controllers))
	for id := range e.controllers {
		ids = append(ids, id)
	}
	e.mu.Unlock()
	for _, id := range ids {
		e.StopController(id)
	}
	e.StopRegistry()
	if e.etcd != nil {
		e.etcd.Close()
	}
	return e.TB.Close(ctx)
}

// StartRegistry starts the embedded etcd (again, on the same data and
// port), or every member of the etcd cluster that does not run.
func (e *Env) StartRegistry(ctx context.Context) error {
	if e.opts.OpenRegistry != nil {
		return nil
	}
	if e.etcd != nil {
		return e.etcd.RestartAll(ctx)
	}
	e.regMu.Lock()
	defer e.regMu.Unlock()
	if e.registry != nil {
		return nil
	}
	peer, err := testbed.FreePort()
	if err != nil {
		return err
	}
	srv, err := embedded.Start(ctx, embedded.Config{
		DataDir:         e.dataDir,
		ListenClientURL: e.regURL,
		ListenPeerURL:   fmt.Sprintf("http://127.0.0.1:%d", peer),
		UnsafeNoFsync:   true,
	})
	if err != nil {
		return fmt.Errorf("start registry: %w", err)
	}
	readyCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := srv.WaitReady(readyCtx); err != nil {
		srv.Close()
		return fmt.Errorf("start registry: %w", err)
	}
	e.registry = srv
	return nil
}

// StopRegistry stops the embedded etcd, keeping its data; an etcd cluster's
// members are killed (SIGKILL), all of them.
func (e *Env) StopRegistry() {
	if e.etcd != nil {
		e.etcd.KillAll()
		return
	}
	e.regMu.Lock()
	defer e.regMu.Unlock()
	if e.registry != nil {
		e.registry.Close()
		e.registry = nil
	}
}

// RegistryURL is the registry's client URL (an etcd cluster's first
// member's).
func (e *Env) RegistryURL() string { return e.regURL }

// RegistryEndpoints are the client URLs of every member of the registry.
func (e *Env) RegistryEndpoints() []string {
	if e.etcd != nil {
		return e.etcd.ClientURLs()
	}
	return []string{e.regURL}
}

// EtcdCluster is the registry's etcd cluster, nil unless
// Options.RegistryMembers > 1.
func (e *Env) EtcdCluster() *etcdcluster.Cluster { return e.etcd }

// OpenRegistry opens a registry client for an identity, as mcsd does.
func (e *Env) OpenRegistry(ctx context.Context, id registry.Identity) (registry.Registry, error) {
	if e.opts.OpenRegistry != nil {
		return e.opts.OpenRegistry(ctx, id)
	}
	return etcdregistry.New(ctx, etcdregistry.Options{
		Identity:       id,
		Endpoints:      e.RegistryEndpoints(),
		TTL:            e.opts.TTL,
		HealthInterval: e.opts.RegistryHealthInterval,
		RequestTimeout: e.opts.RegistryRequestTimeout,
	})
}

// TTL is the registry lease TTL the controllers run with.
func (e *Env) TTL() time.Duration { return e.opts.TTL }

// Controller is one cluster's mcsd running in the test process.
type Controller struct {
	Cluster *testbed.Cluster
	cancel  context.CancelFunc
	done    chan error
	writes  *testbed.WriteCounter
	// healthURL serves the manager's /readyz.
	healthURL string
}

// StartController starts mcsd for cluster id. The returned controller's
// Writes counts every API write it makes from now on.
func (e *Env) StartController(ctx context.Context, id string) (*Controller, error) {
	c := e.TB.Cluster(id)
	if c == nil {
		return nil, fmt.Errorf("no cluster %s", id)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if old := e.controllers[id]; old != nil {
		return old, nil
	}
	// Bound here and handed over: a port picked free and bound later could
	// be taken meanwhile by another test process.
	healthL, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for %s's health probes: %w", id, err)
	}
	healthAddr := healthL.Addr().String()
	wc := testbed.NewWriteCounter()
	cfg := rest.CopyConfig(c.Config)
	cfg.QPS, cfg.Burst = 500, 1000
	cfg.Wrap(wc.Wrap)
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	log := zap.New(zap.UseDevMode(true), zap.WriteTo(logWriter(id))).WithValues("testCluster", id)
	ctx = logr.NewContext(ctx, log)
	ctrl := &Controller{Cluster: c, cancel: cancel, done: make(chan error, 1), writes: wc, healthURL: "http://" + healthAddr}
	go func() {
		err := manager.Run(ctx, manager.Options{
			RESTConfig:     cfg,
			OpenRegistry:   e.OpenRegistry,
			MetricsAddr:    "0",
			HealthListener: healthL,
			IdentityRetry:  500 * time.Millisecond,
			TakeoverGrace:  e.opts.TakeoverGrace,
		})
		if err != nil && ctx.Err() == nil {
			fmt.Fprintf(os.Stderr, "mcsd in %s stopped: %v\n", id, err)
			log.Error(err, "mcsd stopped")
		}
		ctrl.done <- err
	}()
	e.controllers[id] = ctrl
	return ctrl, nil
}

// StartControllers starts mcsd in every cluster.
func (e *Env) StartControllers(ctx context.Context) error {
	for _, c := range e.TB.Clusters {
		if _, err := e.StartController(ctx, c.ID); err != nil {
			return err
		}
	}
	return nil
}

// Controller returns cluster id's running mcsd, or nil.
func (e *Env) Controller(id string) *Controller {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.controllers[id]
}

// StopController stops cluster id's mcsd, as a crash would: nothing is
// withdrawn from the registry.
func (e *Env) StopController(id string) {
	e.mu.Lock()
	ctrl := e.controllers[id]
	delete(e.controllers, id)
	e.mu.Unlock()
	if ctrl == nil {
		return
	}
	ctrl.cancel()
	select {
	case err := <-ctrl.done:
		_ = err // an unexpected stop was reported when it happened
	case <-time.After(30 * time.Second):
	}
}

// WaitReady waits until the controller reports ready (/readyz): it has read
// the registry and its caches have synced.
func (c *Controller) WaitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last string
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.healthURL+"/readyz?verbose", nil)
		if err != nil {
			return err
		}
		if resp, err := http.DefaultClient.Do(req); err != nil {
			last = err.Error()
		} else {
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("mcsd in %s not ready after %s: %s", c.Cluster.ID, timeout, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Writes returns the number of API writes the controller made, by
// resource ("serviceimports", "endpointslices", ...).
func (c *Controller) Writes() map[string]int { return c.writes.Snapshot() }

// Client returns an admin client for cluster id.
func (e *Env) Client(t testing.TB, id string) client.Client {
	t.Helper()
	c := e.TB.Cluster(id)
	if c == nil {
		t.Fatalf("no cluster %s", id)
	}
	cl, err := client.New(c.Config, client.Options{Scheme: manager.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// ClusterIDs are the ids of every cluster of the testbed, in order.
func (e *Env) ClusterIDs() []string {
	ids := make([]string, 0, len(e.TB.Clusters))
	for _, c := range e.TB.Clusters {
		ids = append(ids, c.ID)
	}
	return ids
}

// EnsureNamespaceEverywhere creates namespace ns in every cluster where it
// is missing.
func (e *Env) EnsureNamespaceEverywhere(t testing.TB, ns string) {
	t.Helper()
	for _, id := range e.ClusterIDs() {
		EnsureNamespace(t, e.Client(t, id), ns)
	}
}

// logWriter sends controller logs to a file per cluster when
// MCSD_E2E_LOG_DIR is set, and nowhere otherwise.
func logWriter(id string) io.Writer {
	dir := os.Getenv("MCSD_E2E_LOG_DIR")
	if dir == "" {
		return io.Discard
	}
	_ = os.MkdirAll(dir, 0o755)
	f, err := os.OpenFile(filepath.Join(dir, id+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return io.Discard
	}
	return f
}

// Readyz returns the controller's /readyz status code and body.
func (c *Controller) Readyz(ctx context.Context) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.healthURL+"/readyz", nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(body)), nil
}
