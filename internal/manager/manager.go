package manager

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	aboutv1alpha1 "github.com/mcsd-io/mcsd/api/about/v1alpha1"
	aboutv1beta1 "github.com/mcsd-io/mcsd/api/about/v1beta1"
	"github.com/mcsd-io/mcsd/internal/clusterid"
	"github.com/mcsd-io/mcsd/internal/clusterset"
	"github.com/mcsd-io/mcsd/internal/controller/export"
	"github.com/mcsd-io/mcsd/internal/controller/imports"
	"github.com/mcsd-io/mcsd/internal/controller/kind"
	"github.com/mcsd-io/mcsd/internal/metrics"
	"github.com/mcsd-io/mcsd/pkg/registry"
)

// Scheme holds every API mcsd reads or writes.
var Scheme = runtime.NewScheme()

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(Scheme))
	utilruntime.Must(mcsv1alpha1.Install(Scheme))
	utilruntime.Must(mcsv1beta1.Install(Scheme))
	utilruntime.Must(aboutv1alpha1.AddToScheme(Scheme))
	utilruntime.Must(aboutv1beta1.AddToScheme(Scheme))
}

// OpenFunc opens the registry for an identity.
type OpenFunc func(ctx context.Context, id registry.Identity) (registry.Registry, error)

// Options configure Run.
type Options struct {
	// RESTConfig reaches this cluster's API server.
	RESTConfig *rest.Config
	// OpenRegistry opens the registry once the identity is known.
	OpenRegistry OpenFunc
	// MetricsAddr serves Prometheus metrics ("0" disables). Default ":8080".
	MetricsAddr string
	// HealthAddr serves /healthz and /readyz ("0" disables). Default ":8081".
	HealthAddr string
	// HealthListener, when set, serves /healthz and /readyz in place of
	// HealthAddr: a listener the caller bound already (a test's, on a port
	// no other process can take in between). Run closes it.
	HealthListener net.Listener
	// LeaderElection makes only one replica run the controllers.
	LeaderElection bool
	// LeaderElectionNamespace holds the leader lease. Default: the pod's
	// namespace (POD_NAMESPACE is read by the command, not here) or "mcsd-system".
	LeaderElectionNamespace string
	// LeaderElectionID names the lease. Default "mcsd-leader".
	LeaderElectionID string
	// IdentityRetry is how often a missing identity is looked up again. Default 5s.
	IdentityRetry time.Duration
	// CacheSyncTimeout bounds the wait for the caches' first sync, from
	// the controllers' start (once the identity is read and, with
	// LeaderElection, the lease held): past it, Run fails with the last
	// list or watch error of each kind not synced (a role missing a grant
	// keeps a kind from syncing). It is also each controller's bound on
	// its sources' sync (controller-runtime's CacheSyncTimeout). Zero
	// means the default, 2 minutes; there is no unbounded wait.
	CacheSyncTimeout time.Duration
	// TakeoverGrace is how long the derived Services of an import taken
	// over from the AWS Cloud Map MCS controller that mcsd does not adopt
	// keep carrying its traffic. Default imports.DefaultRetireGrace.
	TakeoverGrace time.Duration
}

func (o *Options) defaults() error {
	if o.RESTConfig == nil {
		return errors.New("manager: RESTConfig is required")
	}
	if o.OpenRegistry == nil {
		return errors.New("manager: OpenRegistry is required")
	}
	if o.MetricsAddr == "" {
		o.MetricsAddr = ":8080"
	}
	if o.HealthAddr == "" {
		o.HealthAddr = ":8081"
	}
	if o.LeaderElectionNamespace == "" {
		o.LeaderElectionNamespace = "mcsd-system"
	}
	if o.LeaderElectionID == "" {
		o.LeaderElectionID = "mcsd-leader"
	}
	if o.IdentityRetry == 0 {
		o.IdentityRetry = 5 * time.Second
	}
	if o.CacheSyncTimeout < 0 {
		return fmt.Errorf("manager: CacheSyncTimeout %s is negative", o.CacheSyncTimeout)
	}
	if o.CacheSyncTimeout == 0 {
		o.CacheSyncTimeout = 2 * time.Minute
	}
	if o.TakeoverGrace == 0 {
		o.TakeoverGrace = imports.DefaultRetireGrace
	}
	return nil
}

// errIdentityChanged ends one run so that the next starts with the new identity.
var errIdentityChanged = errors.New("cluster identity changed")

// Run runs mcsd until ctx ends. When the cluster's ClusterProperties change,
// it stops the controllers and starts them again with the new identity.
func Run(ctx context.Context, opts Options) error {
	if l := opts.HealthListener; l != nil {
		defer func() { _ = l.Close() }()
	}
	if err := opts.defaults(); err != nil {
		return err
	}
	log := logr.FromContextOrDiscard(ctx)
	api, err := newAPIClients(opts.RESTConfig)
	if err != nil {
		return err
	}
	direct, err := client.New(opts.RESTConfig, client.Options{Scheme: Scheme, HTTPClient: api.http, Mapper: api.mapper})
	if err != nil {
		return fmt.Errorf("create client: %w", err)
	}
	h := &health{}
	stop, err := h.serve(ctx, opts.HealthAddr, opts.HealthListener)
	if err != nil {
		return err
	}
	defer stop()
	var (
		inUse    string // the last ErrClusterIDInUse logged
		instance string // the last kube-system UID read
	)
	for {
		h.notReady("waiting for the cluster identity (ClusterProperties cluster.clusterset.k8s.io and clusterset.k8s.io)")
		id, err := waitForIdentity(ctx, direct, opts.IdentityRetry, h)
		if err != nil {
			return err
		}
		// A read that fails keeps the UID read before: the check must not
		// lapse at one slow answer.
		if uid := readInstance(ctx, direct); uid != "" {
			instance = uid
		}
		id.Instance = instance
		log.Info("cluster identity", "cluster", id.Cluster, "clusterSet", id.ClusterSet, "instance", id.Instance)
		err = runWithLeadership(ctx, opts, api, id, h, inUse)
		switch {
		case errors.Is(err, errIdentityChanged):
			log.Info("cluster identity changed, restarting controllers")
			inUse = ""
			continue
		case errors.Is(err, registry.ErrClusterIDInUse):
			// Another cluster runs with this id: nothing is written until
			// its records expire, or this cluster's id is changed (read
			// again at each try). Said once, and by /readyz throughout.
			h.notReady(err.Error())
			if err.Error() != inUse {
				inUse = err.Error()
				log.Error(err, "Cluster id in use by another cluster; exporting and importing nothing, retrying", "retryIn", opts.IdentityRetry)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(opts.IdentityRetry):
			}
			continue
		}
		return err
	}
}

// readInstance returns what tells this Kubernetes cluster apart from
// another given the same cluster id (registry.Identity.Instance): the UID
// of its kube-system namespace. Empty, and said, when it cannot be read:
// the registry then cannot tell the two apart.
func readInstance(ctx context.Context, c client.Reader) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	uid, err := clusterid.Instance(ctx, c)
	if err != nil {
		logr.FromContextOrDiscard(ctx).Info("Cannot read the kube-system namespace; another cluster given this cluster's id would not be detected", "reason", err.Error())
	}
	return uid
}

// apiClients are what the clients of a Run share: the REST mapper, which
// reads the API server's discovery once rather than once for each client,
// and the HTTP client of the mapper and of the identity's client.
type apiClients struct {
	http   *http.Client
	mapper meta.RESTMapper
}

func newAPIClients(cfg *rest.Config) (apiClients, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return apiClients{}, fmt.Errorf("create HTTP client: %w", err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, hc)
	if err != nil {
		return apiClients{}, fmt.Errorf("create REST mapper: %w", err)
	}
	return apiClients{http: hc, mapper: mapper}, nil
}

func (a apiClients) mapperProvider(*rest.Config, *http.Client) (meta.RESTMapper, error) {
	return a.mapper, nil
}

// waitForIdentity reads the cluster's identity until it is set. What it
// waits for is logged, and said by /readyz, when it changes, not at every
// try.
func waitForIdentity(ctx context.Context, c client.Reader, retry time.Duration, h *health) (registry.Identity, error) {
	log := logr.FromContextOrDiscard(ctx)
	var last string
	for {
		id, err := clusterid.Read(ctx, c)
		if err == nil {
			return id, nil
		}
		if err.Error() != last {
			last = err.Error()
			h.notReady("waiting for the cluster identity: " + last)
			if !errors.Is(err, clusterid.ErrMissing) && !errors.Is(err, clusterid.ErrInvalid) {
				log.Error(err, "Cannot read the cluster identity; retrying", "retryIn", retry)
			} else {
				// An expected state, not a failure: no stack trace.
				log.Info("Waiting for the cluster identity; exporting and importing nothing until it is set", "reason", last)
			}
		}
		select {
		case <-ctx.Done():
			return registry.Identity{}, ctx.Err()
		case <-time.After(retry):
		}
	}
}

// runWithLeadership runs the controllers, under leader election if opts
// ask for it. inUse is the error of the last try, when the cluster id was
// in use by another cluster: this replica is not ready for that reason
// until it leads (and tries again) or another replica does.
func runWithLeadership(ctx context.Context, opts Options, api apiClients, id registry.Identity, h *health, inUse string) error {
	if !opts.LeaderElection {
		return runControllers(ctx, opts, api, id, h)
	}
	// A standby replica is healthy and ready: it takes over when the leader
	// goes.
	var notReady atomic.Pointer[string]
	if inUse != "" {
		notReady.Store(&inUse)
	}
	h.set(func() error {
		if why := notReady.Load(); why != nil {
			return errors.New(*why)
		}
		return nil
	})
	log := logr.FromContextOrDiscard(ctx)
	hostname, _ := os.Hostname()
	me := hostname + "-" + fmt.Sprint(os.Getpid())
	lock, err := resourcelock.NewFromKubeconfig(resourcelock.LeasesResourceLock, opts.LeaderElectionNamespace,
		opts.LeaderElectionID, resourcelock.ResourceLockConfig{Identity: me}, opts.RESTConfig, 10*time.Second)
	if err != nil {
		return fmt.Errorf("leader election lock: %w", err)
	}
	// The elector runs until the controllers have stopped, not until ctx
	// ends: it releases the lease when it stops (ReleaseOnCancel), and a
	// standby must not lead while this replica still writes. client-go
	// does not wait for OnStartedLeading.
	electorCtx, stopElector := context.WithCancel(context.WithoutCancel(ctx))
	defer stopElector()
	var (
		leading atomic.Bool
		// ended: the controllers returned by themselves (an identity
		// change, an error) while leading; the elector then stops, and
		// that is no loss of leadership.
		ended   atomic.Bool
		stopped = make(chan struct{})
		runErr  error // written before stopped is closed
	)
	go func() {
		// Stopped before it leads: nothing to wait for.
		select {
		case <-ctx.Done():
			if !leading.Load() {
				stopElector()
			}
		case <-electorCtx.Done():
		}
	}()
	leaderelection.RunOrDie(electorCtx, leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   15 * time.Second,
		RenewDeadline:   10 * time.Second,
		RetryPeriod:     2 * time.Second,
		ReleaseOnCancel: true,
		Name:            opts.LeaderElectionID,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(leadCtx context.Context) {
				leading.Store(true)
				defer close(stopped)
				defer stopElector()
				if leadCtx.Err() != nil {
					return // stopped as it began to lead
				}
				// The controllers stop when ctx ends or leadership is lost.
				runCtx, cancel := context.WithCancel(ctx)
				defer cancel()
				defer context.AfterFunc(leadCtx, cancel)()
				runErr = runControllers(runCtx, opts, api, id, h)
				ended.Store(leadCtx.Err() == nil)
			},
			OnStoppedLeading: func() {
				if ctx.Err() == nil && !ended.Load() {
					log.Info("leadership lost")
				}
			},
			OnNewLeader: func(identity string) {
				if identity != me {
					// Another replica leads: its readiness says how the
					// cluster's controllers are; this one is a standby.
					notReady.Store(nil)
				}
			},
		},
	})
	if !leading.Load() {
		return nil // stopped (ctx ended) before it led
	}
	<-stopped
	if runErr == nil && ctx.Err() == nil {
		return errors.New("leadership lost")
	}
	return runErr
}

// CacheOptions are the manager's cache's: informers made by newInformer
// (nil: controller-runtime's), and no managedFields kept (the API server's
// record of who wrote which field: in clusters of thousands of Services
// and Nodes, much of what the cache would hold, and read by nothing here)
// but on EndpointSlices, whose field managers tell the import controller
// whether mcsd alone wrote them. An update of an object without them
// leaves the API server's as they are.
func CacheOptions(newInformer func(toolscache.ListerWatcher, runtime.Object, time.Duration, toolscache.Indexers) toolscache.SharedIndexInformer) cache.Options {
	return cache.Options{
		NewInformer:      newInformer,
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&discoveryv1.EndpointSlice{}: {Transform: func(o any) (any, error) { return o, nil }},
		},
	}
}

func runControllers(ctx context.Context, opts Options, api apiClients, id registry.Identity, h *health) error {
	// Not ready until the registry is read and the caches have synced (a
	// standby, ready until now, has just taken the lease).
	h.notReady("opening the registry")
	// The backends add the clusterset; the cluster is said once, here.
	log := logr.FromContextOrDiscard(ctx).WithValues("cluster", id.Cluster)
	ctx = logr.NewContext(ctx, log)
	reg, err := opts.OpenRegistry(ctx, id)
	if err != nil {
		return fmt.Errorf("open registry: %w", err)
	}
	defer func() { _ = reg.Close() }()
	fenced := fencedCheck(reg)
	lapses, _ := reg.(registry.Lapser) // before the instrumentation hides it
	reg = metrics.InstrumentRegistry(reg, id.Cluster)

	listErrs := &listErrors{}
	mgr, err := ctrl.NewManager(opts.RESTConfig, ctrl.Options{
		Scheme:                 Scheme,
		MapperProvider:         api.mapperProvider,
		Logger:                 log,
		Metrics:                metricsserver.Options{BindAddress: opts.MetricsAddr},
		HealthProbeBindAddress: "0", // served by Run for its whole life
		Cache:                  CacheOptions(listErrs.newInformer),
		NewCache:               newQuickSync(listErrs),

		LeaderElection: false,
		// Run starts the controllers again in the same process when the
		// identity changes, so their names are registered more than once.
		Controller: config.Controller{SkipNameValidation: ptr.To(true), CacheSyncTimeout: opts.CacheSyncTimeout},
	})
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}
	view, err := addControllers(ctx, mgr, reg, lapses, id.Cluster, opts.TakeoverGrace)
	if err != nil {
		return err
	}
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if err := setupIdentityWatch(ctx, mgr, id, cancel); err != nil {
		return err
	}
	// Ready once the first full read of the registry arrived and the caches
	// have synced: before that the controllers have not seen this cluster's
	// objects or the clusterset's state.
	h.set(func() error {
		if err := fenced(); err != nil {
			return err
		}
		if !view.HasSynced() {
			return errors.New("registry not synced yet")
		}
		ctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return errors.New("caches not synced yet")
		}
		return nil
	})
	defer h.notReady("controllers stopped")
	err = start(runCtx, mgr, reg, view, cacheSync{timeout: opts.CacheSyncTimeout, why: listErrs.err})
	if cause := context.Cause(runCtx); errors.Is(cause, errIdentityChanged) {
		return errIdentityChanged
	}
	return err
}

// fencedCheck returns what makes the controllers not ready from the
// backend's side: another cluster took the cluster id while the backend
// ran (registry.Fencer); nil for a backend that cannot tell.
func fencedCheck(reg registry.Registry) func() error {
	if f, ok := reg.(registry.Fencer); ok {
		return f.Fenced
	}
	return func() error { return nil }
}

// addControllers adds to mgr the export and import controllers over a new
// View, which start feeds from the registry. The View needs the namespaces
// the cluster has (needNamespaces). lapses, nil for a backend that cannot
// tell, is how the backend reports that the cluster's records may have
// lapsed. It returns the View.
func addControllers(ctx context.Context, mgr ctrl.Manager, reg registry.Registry, lapses registry.Lapser, cluster string, takeoverGrace time.Duration) (*clusterset.ScopedView, error) {
	view := clusterset.NewScopedView()
	if err := needNamespaces(ctx, mgr, view); err != nil {
		return nil, err
	}
	countRejected := metrics.RecordsRejected(cluster)
	rejectLog := mgr.GetLogger().WithName("registry")
	view.OnReject(func(r registry.Rejection) {
		countRejected(r)
		rejectLog.Info("Refused a registry record", "sourceCluster", r.Record.Cluster, "service", r.Record.Service.String(),
			"kind", r.Kind, "reason", r.Reason, "detail", r.Message)
	})
	// The controllers record through record.EventRecorder (core/v1 Events),
	// which every API server and kubectl version shows.
	recorder := mgr.GetEventRecorderFor("mcsd") //nolint:staticcheck // see above

	// The export controller hands this cluster's endpoints to its imports
	// directly, beside the registry.
	local := clusterset.NewLocal()
	if err := (&export.Reconciler{Client: mgr.GetClient(), Registry: reg, View: view.View, ClusterID: cluster, Recorder: recorder, Local: local, Lapses: lapses}).SetupWithManager(ctx, mgr); err != nil {
		return nil, fmt.Errorf("set up export controller: %w", err)
	}
	if err := (&imports.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), View: view.View, ClusterID: cluster, Recorder: recorder, RetireGrace: takeoverGrace, Local: local}).SetupWithManager(ctx, mgr); err != nil {
		return nil, fmt.Errorf("set up import controller: %w", err)
	}
	return view, nil
}

// start runs mgr, and the registry's watch feeding view, until ctx ends or
// either fails. The watch begins beside the manager, not after its caches
// have synced: the first read of the registry and the caches' sync take a
// few hundred milliseconds each (30,000 records: 0.3 s), and the imports
// wait for both. The View keeps what it read until the controllers' sources
// start. The namespaces the cluster has are listed first, in one request:
// the first read then decodes theirs alone (the cache's, later, adds those
// created meanwhile).
func start(ctx context.Context, mgr ctrl.Manager, reg registry.Watcher, view *clusterset.ScopedView, cs cacheSync) error {
	namespaces := &corev1.NamespaceList{}
	listCtx, cancel := context.WithTimeout(ctx, namespaceListTimeout)
	if err := mgr.GetAPIReader().List(listCtx, namespaces); err != nil {
		logr.FromContextOrDiscard(ctx).Info("Cannot list the namespaces before reading the registry; taking them from the cache", "reason", err.Error())
	}
	cancel()
	for i := range namespaces.Items {
		view.Need(namespaces.Items[i].Name)
	}
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		err := reg.Watch(ctx, view)
		if errors.Is(err, context.Canceled) && ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("watch registry: %w", err)
		}
		return nil
	})
	g.Go(func() error { return runManager(ctx, mgr, cs) })
	return g.Wait()
}

// cacheSync bounds the wait for the caches' first sync: past timeout,
// runManager fails with the error why gives (listErrors.err).
type cacheSync struct {
	timeout time.Duration
	why     func(timeout time.Duration) error
}

// runManager runs mgr until ctx ends, and returns when mgr.Start does, or
// at once when ctx ended before mgr's caches had synced. controller-runtime
// v0.23's manager stopped then never returns: it keeps waiting for them,
// spinning on the done context (kubernetes-sigs/controller-runtime#3440),
// so a controller stopped while it cannot reach its API server would
// spin until killed. Its goroutines end with the process.
//
// The manager itself waits for its caches without a bound, and the
// controllers' sources have their informers made before it starts
// (internal/controller/kind), so runManager bounds that wait: caches not
// synced in cs.timeout fail the run, naming each kind not synced with
// its last list or watch error, or as not listed yet (a role missing a
// grant, a list never answered: the process exits and says which).
func runManager(ctx context.Context, mgr ctrl.Manager, cs cacheSync) error {
	stopped := make(chan error, 1)
	go func() { stopped <- mgr.Start(ctx) }()
	synced := make(chan bool, 1)
	go func() { synced <- mgr.GetCache().WaitForCacheSync(ctx) }()
	timeout := time.NewTimer(cs.timeout)
	defer timeout.Stop()
	for {
		select {
		case err := <-stopped:
			return err
		case ok := <-synced:
			if !ok {
				logr.FromContextOrDiscard(ctx).Info("Stopped before the caches synced; not waiting for the manager")
				return nil
			}
			synced = nil
			timeout.Stop()
		case <-timeout.C:
			if ctx.Err() != nil {
				// Stopped as the bound passed: a stop, not a failure.
				return nil
			}
			return cs.why(cs.timeout)
		}
	}
}

// namespaceListTimeout bounds start's list of the namespaces: the
// registry's read waits for it.
const namespaceListTimeout = 5 * time.Second

// needNamespaces makes view need every namespace the manager's cache holds,
// from its first list on: the Services a cluster imports and exports are in
// those alone.
func needNamespaces(ctx context.Context, mgr ctrl.Manager, view *clusterset.ScopedView) error {
	inf, err := mgr.GetCache().GetInformer(ctx, &corev1.Namespace{})
	if err != nil {
		return fmt.Errorf("namespace informer: %w", err)
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if o, ok := obj.(client.Object); ok {
				view.Need(o.GetName())
			}
		},
	}); err != nil {
		return fmt.Errorf("namespace informer: %w", err)
	}
	return nil
}

// setupIdentityWatch ends the run when a ClusterProperty that mcsd reads
// no longer holds the identity the controllers run with: when it changes or
// goes, and also when that happened between reading the identity and the
// cache's first list (no event would tell then).
func setupIdentityWatch(ctx context.Context, mgr ctrl.Manager, id registry.Identity, cancel context.CancelCauseFunc) error {
	names := map[string]string{aboutv1beta1.ClusterIDName: id.Cluster, aboutv1beta1.ClusterSetIDName: id.ClusterSet}
	c := mgr.GetClient()
	check := func(ctx context.Context, name string) error {
		p := &aboutv1beta1.ClusterProperty{}
		err := c.Get(ctx, client.ObjectKey{Name: name}, p)
		if client.IgnoreNotFound(err) != nil {
			return err
		}
		if err != nil || p.Spec.Value != names[name] {
			ctrl.LoggerFrom(ctx).Info("cluster identity property changed", "property", name)
			cancel(errIdentityChanged)
		}
		return nil
	}
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return nil
		}
		for name := range names {
			if err := check(ctx, name); err != nil {
				return fmt.Errorf("check cluster identity: %w", err)
			}
		}
		return nil
	})); err != nil {
		return fmt.Errorf("add identity check: %w", err)
	}
	b := ctrl.NewControllerManagedBy(mgr).Named("clusterproperty")
	if err := kind.Add(ctx, b, mgr.GetCache(), kind.Watch{
		Object: &aboutv1beta1.ClusterProperty{}, Handler: &handler.EnqueueRequestForObject{},
		Predicates: []predicate.Predicate{predicate.NewPredicateFuncs(func(o client.Object) bool {
			_, ok := names[o.GetName()]
			return ok
		})},
	}); err != nil {
		return fmt.Errorf("build identity watch: %w", err)
	}
	return b.Complete(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		return reconcile.Result{}, check(ctx, req.Name)
	}))
}
