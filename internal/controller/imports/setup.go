package imports

import (
	"context"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/flowcontrol"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/clusterset"
	"github.com/mcsd-io/mcsd/internal/controller/kind"
	"github.com/mcsd-io/mcsd/internal/metrics"
	"github.com/mcsd-io/mcsd/internal/wellknown"
	"github.com/mcsd-io/mcsd/pkg/registry"
)

// MaxConcurrentReconciles is how many imports the controller reconciles at
// once; never the same import twice at once, the work queue sees to that. A
// new import takes several API writes one after the other (docs/design.md,
// "Imports"): with one worker, thousands of new imports (a cold start, a
// namespace exported at once) would be written strictly one request at a
// time, the controller waiting on the API server between requests; with
// several, the writes of different imports overlap. What that buys on the
// benchmark's testbed is in docs/performance.md.
const MaxConcurrentReconciles = 4

// SetupWithManager registers the controller with mgr. Requests come from:
// the View (a Service's records changed; every import when the registry
// becomes reachable or unreachable), Namespaces (every exported Service of
// the namespace), Nodes whose zone changes (the imports that prefer their
// own cluster, whose hints name its zones), and the ServiceImports, derived Services and
// EndpointSlices mcsd writes, so that hand edits and deletions are repaired.
//
// The View's changes reach the controller's workqueue through its source
// (View.Source) while the controller runs. SetupWithManager also makes the
// cluster's import and propagation metrics; the import counts end with mgr.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if r.Client == nil || r.View == nil {
		return errors.New("imports: Client and View are required")
	}
	// Listing an import's slices by label scans every slice of the
	// namespace; an index makes it a lookup.
	if err := mgr.GetFieldIndexer().IndexField(ctx, &discoveryv1.EndpointSlice{}, sliceIndex, importOfSlice); err != nil {
		return fmt.Errorf("index EndpointSlices by import: %w", err)
	}
	r.slicesIndexed = true
	r.clusterEvents = flowcontrol.NewTokenBucketRateLimiter(clusterEventsQPS, clusterEventsBurst)
	// The events that only echo the reconciler's own writes bring nothing
	// to do: they are dropped (package echo).
	r.Client = r.echoes.Client(client.WithFieldOwner(r.Client, wellknown.FieldManager))
	echoes := []predicate.Predicate{r.echoes.Predicate()}
	b := ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		WithOptions(controller.Options{MaxConcurrentReconciles: MaxConcurrentReconciles})
	if err := kind.Add(ctx, b, mgr.GetCache(),
		kind.Watch{Object: &mcsv1beta1.ServiceImport{}, Handler: &handler.EnqueueRequestForObject{}, Predicates: echoes},
		kind.Watch{Object: &corev1.Service{}, Handler: handler.EnqueueRequestsFromMapFunc(serviceToImport), Predicates: echoes},
		kind.Watch{Object: &discoveryv1.EndpointSlice{}, Handler: handler.EnqueueRequestsFromMapFunc(sliceToImport), Predicates: echoes},
		kind.Watch{Object: &corev1.Namespace{}, Handler: handler.EnqueueRequestsFromMapFunc(r.namespaceToImports)},
		kind.Watch{Object: nodeMetadata(), Handler: r.nodeHandler()},
	); err != nil {
		return fmt.Errorf("build import controller: %w", err)
	}
	b = b.WatchesRawSource(r.View.Source(r.changeToImports))
	if r.Local != nil {
		// This cluster's own endpoints of a Service it exports changed: the
		// namespace is here, the ServiceExport is in it.
		b = b.WatchesRawSource(r.Local.Source(func(_ context.Context, k registry.ServiceKey) []reconcile.Request {
			return []reconcile.Request{request(k.Namespace, k.Name)}
		}))
	}
	if err := b.Complete(r); err != nil {
		return fmt.Errorf("build import controller: %w", err)
	}
	r.metrics = metrics.NewImports(r.ClusterID)
	r.propagation = metrics.NewPropagation(r.ClusterID)
	// The counts are this run's: when the manager stops, they go.
	if err := metrics.CloseOnStop(mgr, r.metrics); err != nil {
		return fmt.Errorf("add import metrics: %w", err)
	}
	return nil
}

// serviceToImport maps a derived Service to its import: by mcsd's
// annotation, or failing that, by its ServiceImport controller reference.
func serviceToImport(_ context.Context, o client.Object) []reconcile.Request {
	if name := o.GetAnnotations()[wellknown.AnnotationServiceImport]; name != "" && isManaged(o) {
		return []reconcile.Request{request(o.GetNamespace(), name)}
	}
	for _, ref := range o.GetOwnerReferences() {
		if ref.Controller != nil && *ref.Controller && ref.Kind == mcsv1beta1.ServiceImportKindName &&
			ref.APIVersion == mcsv1beta1.SchemeGroupVersion.String() {
			return []reconcile.Request{request(o.GetNamespace(), ref.Name)}
		}
	}
	return nil
}

// sliceIndex indexes, in the manager's cache, the EndpointSlices mcsd wrote
// by the name of their import.
const sliceIndex = "mcsd.io/import"

// importOfSlice is the sliceIndex value of an EndpointSlice: its import's
// name if mcsd wrote it.
func importOfSlice(o client.Object) []string {
	l := o.GetLabels()
	if name := l[mcsv1beta1.LabelServiceName]; name != "" && l[discoveryv1.LabelManagedBy] == wellknown.ManagedBy {
		return []string{name}
	}
	return nil
}

// sliceToImport maps an EndpointSlice that mcsd wrote to its import.
func sliceToImport(_ context.Context, o client.Object) []reconcile.Request {
	l := o.GetLabels()
	name := l[mcsv1beta1.LabelServiceName]
	if name == "" || l[discoveryv1.LabelManagedBy] != wellknown.ManagedBy {
		return nil
	}
	return []reconcile.Request{request(o.GetNamespace(), name)}
}

// namespaceToImports maps a Namespace to the imports of every Service the
// clusterset exports in it.
func (r *Reconciler) namespaceToImports(_ context.Context, o client.Object) []reconcile.Request {
	var reqs []reconcile.Request
	for _, k := range r.View.Keys(o.GetName()) {
		reqs = append(reqs, request(k.Namespace, k.Name))
	}
	return reqs
}

// changeToImports maps a change of the View to requests: the import of a
// Service whose records changed; when the registry's reachability changed,
// every Service the View knows and every import mcsd made (the View no
// longer lists Services that stopped being exported while it was
// unreachable). The ServiceImports are listed from the manager's cache.
//
// Only Services of namespaces this cluster has are asked for: a clusterset
// exports Services of many namespaces that a cluster does not have, and the
// first full read or a reconnection would otherwise queue every one (5,000
// reconciles for 200 imports, say). A namespace that appears later brings
// its imports (namespaceToImports): the cache holds a namespace before its
// event is handled, so a Service the check leaves out comes with that event.
//
// A namespace the View came to hold (a scoped View, after its first read)
// brings its Services and the imports mcsd made in it: their reconciles
// waited for it.
func (r *Reconciler) changeToImports(ctx context.Context, c clusterset.Change) []reconcile.Request {
	if c.Namespace != "" {
		return r.importsOf(ctx, c.Namespace)
	}
	has := r.namespaceLookup(ctx)
	if !c.Reachability {
		if !has(c.Service.Namespace) {
			return nil
		}
		return []reconcile.Request{request(c.Service.Namespace, c.Service.Name)}
	}
	// A request listed twice is queued once: the workqueue deduplicates.
	var reqs []reconcile.Request
	for _, k := range r.View.Keys("") {
		if has(k.Namespace) {
			reqs = append(reqs, request(k.Namespace, k.Name))
		}
	}
	return append(reqs, r.managedImports(ctx)...)
}

// importsOf returns the requests of every Service the View knows in
// namespace and of every import mcsd made or may take over there.
func (r *Reconciler) importsOf(ctx context.Context, namespace string) []reconcile.Request {
	var reqs []reconcile.Request
	for _, k := range r.View.Keys(namespace) {
		reqs = append(reqs, request(k.Namespace, k.Name))
	}
	return append(reqs, r.managedImports(ctx, client.InNamespace(namespace))...)
}

// managedImports returns the requests of the ServiceImports mcsd made, and
// of those the AWS Cloud Map MCS controller made, which mcsd takes over or
// retires (takeover.go), as the manager's cache lists them with opts; and
// of the derived Services mcsd made, whose ServiceImport may never have
// been created (a create that failed, or a process that stopped, between
// the two): the event that brought such a Service at the start came before
// the View held the registry, and its import, no longer exported, would not
// come again.
func (r *Reconciler) managedImports(ctx context.Context, opts ...client.ListOption) []reconcile.Request {
	log := ctrl.LoggerFrom(ctx)
	// Read, not kept or changed: the cache's own objects, not copies.
	opts = append(slices.Clone(opts), client.UnsafeDisableDeepCopy)
	list := &mcsv1beta1.ServiceImportList{}
	if err := r.Client.List(ctx, list, opts...); err != nil {
		log.Error(err, "Cannot list ServiceImports to reconcile after the registry changed")
	}
	var reqs []reconcile.Request
	listed := map[reconcile.Request]bool{}
	add := func(namespace, name string) {
		if req := request(namespace, name); !listed[req] {
			listed[req] = true
			reqs = append(reqs, req)
		}
	}
	for i := range list.Items {
		if si := &list.Items[i]; isManaged(si) || isAWSImport(si) {
			add(si.Namespace, si.Name)
		}
	}
	services := &corev1.ServiceList{}
	if err := r.Client.List(ctx, services, opts...); err != nil {
		log.Error(err, "Cannot list Services to reconcile after the registry changed")
	}
	for i := range services.Items {
		if name := services.Items[i].Annotations[wellknown.AnnotationServiceImport]; name != "" && isManaged(&services.Items[i]) {
			add(services.Items[i].Namespace, name)
		}
	}
	return reqs
}

// namespaceLookup returns whether a namespace is in the manager's cache,
// each looked up once. A failed lookup says yes: the reconcile decides.
func (r *Reconciler) namespaceLookup(ctx context.Context) func(string) bool {
	seen := map[string]bool{}
	return func(name string) bool {
		has, ok := seen[name]
		if !ok {
			err := r.Client.Get(ctx, client.ObjectKey{Name: name}, &corev1.Namespace{})
			has = !apierrors.IsNotFound(err)
			seen[name] = has
		}
		return has
	}
}

func request(namespace, name string) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: namespace, Name: name}}
}
