package export

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/clusterset"
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
	cleanup := manager.RunnableFunc(func(ctx context.Context) error {
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return nil
		}
		r.withdrawOrphansUntilDone(ctrl.LoggerInto(ctx, log))
		return nil
	})
	if err := mgr.Add(cleanup); err != nil {
		return fmt.Errorf("add export cleanup: %w", err)
	}
	r.metrics = metrics.NewExports(r.ClusterID)
	// The counts are this run's: when the manager stops, they go.
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		<-ctx.Done()
		r.metrics.Close()
		return nil
	})); err != nil {
		return fmt.Errorf("add export metrics: %w", err)
	}

	err := ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&mcsv1beta1.ServiceExport{}, builder.WithPredicates(notStatusOnly())).
		Watches(&corev1.Service{}, handler.EnqueueRequestsFromMapFunc(serviceToExport)).
		Watches(&discoveryv1.EndpointSlice{}, handler.EnqueueRequestsFromMapFunc(sliceToExport)).
		WatchesRawSource(r.View.Source(changeToExport)).
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

// serviceToExport maps a Service to the ServiceExport of the same name.
func serviceToExport(_ context.Context, o client.Object) []reconcile.Request {
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}}}
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
// ServiceExport; the registry's reachability does not concern exports.
func changeToExport(_ context.Context, c clusterset.Change) []reconcile.Request {
	if c.Reachability {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: c.Service.Namespace, Name: c.Service.Name}}}
}

// withdrawOrphansUntilDone runs withdrawOrphans until it succeeds or ctx
// ends, backing off while the registry cannot be read.
func (r *Reconciler) withdrawOrphansUntilDone(ctx context.Context) {
	log := ctrl.LoggerFrom(ctx)
	delay := cleanupRetryMin
	for {
		err := r.withdrawOrphans(ctx)
		if err == nil {
			return
		}
		log.Error(err, "Withdrawing exports without a ServiceExport failed; retrying", "retryAfter", delay)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, cleanupRetryMax)
	}
}

// withdrawOrphans withdraws this cluster's registry records of every Service
// that has no ServiceExport, or one being deleted without mcsd's finalizer:
// exports deleted while the controller was down and their finalizer did not
// run, or before it was added.
func (r *Reconciler) withdrawOrphans(ctx context.Context) error {
	keys, err := r.Registry.Exported(ctx)
	if err != nil {
		return fmt.Errorf("list exported services: %w", err)
	}
	var errs []error
	for _, key := range keys {
		if err := r.withdrawOrphan(ctx, key); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (r *Reconciler) withdrawOrphan(ctx context.Context, key registry.ServiceKey) error {
	// Exclusive: no reconcile can publish key between the check and the
	// withdrawal. A ServiceExport created after the check is reconciled
	// after the withdrawal and publishes again.
	r.writeMu.Lock()
	defer r.writeMu.Unlock()
	se := &mcsv1beta1.ServiceExport{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: key.Name}, se)
	switch {
	case err == nil && (se.DeletionTimestamp.IsZero() || controllerutil.ContainsFinalizer(se, Finalizer)):
		// Exported, or its finalizer withdraws it.
		return nil
	case err != nil && !apierrors.IsNotFound(err):
		return fmt.Errorf("get ServiceExport %s: %w", key, err)
	}
	if err := r.Registry.DeleteExport(ctx, key); err != nil {
		return fmt.Errorf("withdraw export %s: %w", key, err)
	}
	ctrl.LoggerFrom(ctx).Info("Withdrew export without a ServiceExport", "service", klog.KRef(key.Namespace, key.Name))
	return nil
}
