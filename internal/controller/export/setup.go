package export

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/clusterset"
	"github.com/mcsd-io/mcsd/internal/controller/kind"
	"github.com/mcsd-io/mcsd/internal/metrics"
	"github.com/mcsd-io/mcsd/internal/wellknown"
	"github.com/mcsd-io/mcsd/pkg/registry"
)

// Backoff of the startup cleanup while the registry cannot be read.
const (
	cleanupRetryMin = time.Second
	cleanupRetryMax = time.Minute
)

// SetupWithManager registers the controller, the startup cleanup and the
// cluster's export metrics with mgr. The View's changes reach the
// controller's workqueue through its source (View.Source) while the
// controller runs.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if r.Client == nil || r.Registry == nil || r.View == nil || r.ClusterID == "" {
		return errors.New("export: Client, Registry, View and ClusterID are required")
	}
	// Listing a Service's slices by label scans every slice of the
	// namespace; an index makes it a lookup.
	if err := mgr.GetFieldIndexer().IndexField(ctx, &discoveryv1.EndpointSlice{}, sliceIndex, serviceOfSlice); err != nil {
		return fmt.Errorf("index EndpointSlices by Service: %w", err)
	}
	r.slicesIndexed = true
	log := mgr.GetLogger().WithValues("controller", ControllerName)
	exported := make(chan event.TypedGenericEvent[*mcsv1beta1.ServiceExport])
	// Each runs once the caches have synced, and hands ServiceExports to the
	// controller's queue through exported.
	afterSync := func(f func(context.Context, chan<- event.TypedGenericEvent[*mcsv1beta1.ServiceExport])) manager.Runnable {
		return manager.RunnableFunc(func(ctx context.Context) error {
			if mgr.GetCache().WaitForCacheSync(ctx) {
				f(ctrl.LoggerInto(ctx, log), exported)
			}
			return nil
		})
	}
	if err := mgr.Add(afterSync(r.enqueueExported)); err != nil {
		return fmt.Errorf("add export cleanup: %w", err)
	}
	if r.Lapses != nil {
		if err := mgr.Add(afterSync(r.enqueueOnLapse)); err != nil {
			return fmt.Errorf("add export lapse source: %w", err)
		}
	}
	r.metrics = metrics.NewExports(r.ClusterID)
	// The counts are this run's: when the manager stops, they go.
	if err := metrics.CloseOnStop(mgr, r.metrics); err != nil {
		return fmt.Errorf("add export metrics: %w", err)
	}

	// The events that only echo the reconciler's own writes (its
	// finalizer, its status) bring nothing to do: they are dropped (package
	// echo; first, so that it sees the status writes that notStatusOnly
	// drops as well, and forgets them).
	r.Client = r.echoes.Client(r.Client)
	b := ctrl.NewControllerManagedBy(mgr).Named(ControllerName)
	if err := kind.Add(ctx, b, mgr.GetCache(),
		kind.Watch{Object: &mcsv1beta1.ServiceExport{}, Handler: &handler.EnqueueRequestForObject{},
			Predicates: []predicate.Predicate{r.echoes.Predicate(), notStatusOnly()}},
		kind.Watch{Object: &corev1.Service{}, Handler: handler.EnqueueRequestsFromMapFunc(r.serviceToExport)},
		kind.Watch{Object: &discoveryv1.EndpointSlice{}, Handler: handler.EnqueueRequestsFromMapFunc(sliceToExport)},
	); err != nil {
		return fmt.Errorf("build export controller: %w", err)
	}
	err := b.WatchesRawSource(r.View.Source(r.changeToExport)).
		WatchesRawSource(source.Channel(exported, &handler.TypedEnqueueRequestForObject[*mcsv1beta1.ServiceExport]{})).
		Complete(r)
	if err != nil {
		return fmt.Errorf("build export controller: %w", err)
	}
	return nil
}

// notStatusOnly lets through every ServiceExport event except updates that
// change neither the spec (generation), the deletion timestamp nor the
// finalizers: the controller's own status patches.
func notStatusOnly() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, n := e.ObjectOld, e.ObjectNew
			if o == nil || n == nil {
				return true
			}
			return o.GetGeneration() != n.GetGeneration() ||
				!o.GetDeletionTimestamp().Equal(n.GetDeletionTimestamp()) ||
				!slices.Equal(o.GetFinalizers(), n.GetFinalizers())
		},
	}
}

// serviceToExport maps a Service to the ServiceExport of the same name. A
// Service mcsd derived for an import maps to it only when that
// ServiceExport exists (or the cache cannot tell): the import controller
// writes each derived Service twice when it creates an import (hundreds of
// times when a cluster joins), and each write would queue a reconcile of an
// export that does not exist.
func (r *Reconciler) serviceToExport(ctx context.Context, o client.Object) []reconcile.Request {
	key := client.ObjectKeyFromObject(o)
	if derived(o) && !r.mayBeExported(ctx, key) {
		return nil
	}
	return []reconcile.Request{{NamespacedName: key}}
}

// derived reports whether mcsd derived the Service o for an import.
func derived(o client.Object) bool {
	a := o.GetAnnotations()
	return a[wellknown.AnnotationManaged] == "true" && a[wellknown.AnnotationServiceImport] != ""
}

// mayBeExported reports whether the manager's cache has a ServiceExport
// named key, or cannot tell.
func (r *Reconciler) mayBeExported(ctx context.Context, key types.NamespacedName) bool {
	err := r.Client.Get(ctx, key, &mcsv1beta1.ServiceExport{})
	return !apierrors.IsNotFound(err)
}

// sliceIndex indexes, in the manager's cache, the EndpointSlices of local
// Services (not those mcsd imports) by their Service's name.
const sliceIndex = "mcsd.io/service"

// serviceOfSlice is the sliceIndex value of an EndpointSlice.
func serviceOfSlice(o client.Object) []string {
	l := o.GetLabels()
	if name := l[discoveryv1.LabelServiceName]; name != "" && l[discoveryv1.LabelManagedBy] != wellknown.ManagedBy {
		return []string{name}
	}
	return nil
}

// sliceToExport maps an EndpointSlice to the ServiceExport named by its
// kubernetes.io/service-name label, ignoring the slices mcsd imports.
func sliceToExport(_ context.Context, o client.Object) []reconcile.Request {
	l := o.GetLabels()
	name := l[discoveryv1.LabelServiceName]
	if name == "" || l[discoveryv1.LabelManagedBy] == wellknown.ManagedBy {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
}

// changeToExport maps a Service whose registry records changed to its
// ServiceExport, when the change can concern it (concerns). When the View
// becomes usable (the first full read, or the registry back after an
// outage), every ServiceExport of this cluster, from the manager's cache:
// their Conflict conditions follow the View. Its becoming unreachable
// concerns no export.
func (r *Reconciler) changeToExport(ctx context.Context, c clusterset.Change) []reconcile.Request {
	if c.Namespace != "" {
		// The View came to hold the namespace: its exports' conflicts can
		// be told (updateConflict).
		return r.exportsIn(ctx, client.InNamespace(c.Namespace))
	}
	if !c.Reachability {
		if len(c.EndpointsOf) > 0 && !slices.Contains(c.EndpointsOf, r.ClusterID) {
			// Other clusters' endpoints: this cluster's export, its
			// Conflict and its records to withdraw are as they were.
			return nil
		}
		if !r.concerns(ctx, c.Service) {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: c.Service.Namespace, Name: c.Service.Name}}}
	}
	if connected, _ := r.View.Connected(); !connected {
		return nil
	}
	return r.exportsIn(ctx)
}

// exportsIn returns the requests of the ServiceExports the manager's cache
// lists with opts.
func (r *Reconciler) exportsIn(ctx context.Context, opts ...client.ListOption) []reconcile.Request {
	list := &mcsv1beta1.ServiceExportList{}
	if err := r.Client.List(ctx, list, opts...); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Cannot list ServiceExports to reconcile after the registry was read")
		return nil
	}
	reqs := make([]reconcile.Request, len(list.Items))
	for i := range list.Items {
		reqs[i] = reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])}
	}
	return reqs
}

// concerns reports whether a change of key's records in the registry can
// concern this cluster's export of it: there is a ServiceExport of key (or
// the cache cannot tell), or this cluster has records of key to withdraw
// (withdrawGone). Any other cluster's change of any other Service would
// reconcile an export that does not exist: at a hundred clusters, most of
// the clusterset's changes.
func (r *Reconciler) concerns(ctx context.Context, key registry.ServiceKey) bool {
	if r.mayBeExported(ctx, types.NamespacedName{Namespace: key.Namespace, Name: key.Name}) {
		return true
	}
	r.unguardedMu.Lock()
	unguarded := r.unguarded[key]
	r.unguardedMu.Unlock()
	return unguarded || !r.withdrawn(key)
}

// enqueueOnLapse hands every ServiceExport of this cluster to the
// controller's queue (out) each time the backend says its records may have
// lapsed in the registry, or are live again (Lapses): Ready follows on
// exports that nothing else changes. Until ctx ends.
func (r *Reconciler) enqueueOnLapse(ctx context.Context, out chan<- event.TypedGenericEvent[*mcsv1beta1.ServiceExport]) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.Lapses.Lapses():
		}
		for _, req := range r.lapseRequests(ctx) {
			se := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: req.Namespace, Name: req.Name}}
			select {
			case out <- event.TypedGenericEvent[*mcsv1beta1.ServiceExport]{Object: se}:
			case <-ctx.Done():
				return
			}
		}
	}
}

// lapseRequests returns the exports to reconcile after a change of
// Lapses: every one, but none when the records are live again while the
// View has not read the registry yet (each export would say it is
// unreachable, then exported: the View's return brings every export back,
// changeToExport).
func (r *Reconciler) lapseRequests(ctx context.Context) []reconcile.Request {
	log := ctrl.LoggerFrom(ctx)
	why := r.Lapses.Lapsed()
	if why == nil && r.unreachable() != nil {
		log.Info("This cluster's records are live in the registry again; its exports follow once the registry is read")
		return nil
	}
	reqs := r.exportsIn(ctx)
	if why != nil {
		log.Info("This cluster's records may have lapsed in the registry; marking its exports", "reason", why.Error(), "exports", len(reqs))
	} else {
		log.Info("This cluster's records are live in the registry again", "exports", len(reqs))
	}
	return reqs
}

// enqueueExported lists, once the controller starts, the Services this
// cluster has records of in the registry (backing off while it cannot be
// read) and hands each to the controller's queue (out) as unguarded:
// Reconcile withdraws those that have no ServiceExport, or one being
// deleted without mcsd's finalizer (exports deleted while the controller
// was down, or before the finalizer was added), even when the View does not
// show them. Through the queue, a withdrawal never races a publish of the
// same Service.
func (r *Reconciler) enqueueExported(ctx context.Context, out chan<- event.TypedGenericEvent[*mcsv1beta1.ServiceExport]) {
	log := ctrl.LoggerFrom(ctx)
	// Step keeps returning the cap once reached (wait.ExponentialBackoff
	// would stop there): it retries until the registry answers.
	backoff := wait.Backoff{Duration: cleanupRetryMin, Factor: 2, Jitter: 0.1, Steps: math.MaxInt32, Cap: cleanupRetryMax}
	var keys []registry.ServiceKey
	for {
		var err error
		if keys, err = r.Registry.Exported(ctx); err == nil {
			break
		}
		delay := backoff.Step()
		log.Error(err, "Listing this cluster's exports in the registry failed; retrying", "retryAfter", delay)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
	for _, key := range keys {
		r.setUnguarded(key, true)
		se := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
		select {
		case out <- event.TypedGenericEvent[*mcsv1beta1.ServiceExport]{Object: se}:
		case <-ctx.Done():
			return
		}
	}
}
