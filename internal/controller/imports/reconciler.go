package imports

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/clusterset"
	"github.com/mcsd-io/mcsd/internal/conditions"
	"github.com/mcsd-io/mcsd/internal/controller/parallel"
	"github.com/mcsd-io/mcsd/internal/controller/patch"
	"github.com/mcsd-io/mcsd/internal/merge"
	"github.com/mcsd-io/mcsd/internal/metrics"
	"github.com/mcsd-io/mcsd/internal/topology"
	"github.com/mcsd-io/mcsd/internal/wellknown"
	"github.com/mcsd-io/mcsd/pkg/registry"
)

// ControllerName names the import controller (logs, metrics).
const ControllerName = "serviceimport"

// Event reasons.
const (
	eventClustersChanged  = "ClustersChanged"
	eventNotManaged       = "NotManaged"
	eventServiceConflict  = "DerivedServiceConflict"
	eventServiceRecreated = "DerivedServiceRecreated"
	eventFamilyRefused    = "IPFamilyNotSupported"
	eventRecordsRejected  = "RecordsRejected"
	eventTakenOver        = "TakenOver"
)

// Reconciler keeps, for every Service the clusterset exports, the
// ServiceImport, the derived Service (ClusterSetIP only) and the
// EndpointSlices of every source cluster in this cluster. Requests name the
// Service: the ServiceImport's namespace and name.
//
// The permissions it needs are in config/rbac/role.yaml (tested by
// test/e2e/install, which runs mcsd under exactly those).
type Reconciler struct {
	Client client.Client
	// View is the registry's state: every live cluster's exports and
	// endpoints.
	View *clusterset.View
	// ClusterID is this cluster's id, for reference only: this cluster
	// imports its own exports like any other cluster's, endpoints included.
	ClusterID string
	// Recorder records events on ServiceImports; nil records none.
	Recorder record.EventRecorder
	// RetireGrace is how long the derived Services of an import taken over
	// from the AWS Cloud Map MCS controller that mcsd did not adopt keep
	// carrying its traffic (see takeover.go). Zero is DefaultRetireGrace; a
	// negative grace is none.
	RetireGrace time.Duration
	// Now is the clock of the retirements; nil is time.Now.
	Now func() time.Time

	// written keeps the last status write of each ServiceImport until the
	// cache shows it: a reconcile starts from that status (patch.Known).
	written patch.Written

	// metrics counts the ServiceImports by state, and propagation times
	// EndpointSlices; SetupWithManager sets both.
	metrics     *metrics.Imports
	propagation *metrics.Propagation
	// slicesIndexed says that Client's cache indexes EndpointSlices by
	// import (sliceIndex); SetupWithManager sets it.
	slicesIndexed bool

	// zones keeps the zones of this cluster's nodes, from the Node watch.
	zones zoneBook

	// clusterEvents limits the ClustersChanged events (see eventClusters);
	// SetupWithManager sets it, nil is no limit.
	clusterEvents flowcontrol.RateLimiter
}

// scope is what the phases of one reconcile share.
type scope struct {
	// localCluster is this cluster's id.
	localCluster string
	key          registry.ServiceKey
	res          merge.Result
	si           *mcsv1beta1.ServiceImport
	// rejected are the refused records of the Service: their clusters
	// count in res for nothing.
	rejected []registry.Rejection

	// derivedName is the derived Service's name (whatever the import type).
	derivedName string
	// svc is the derived Service when it exists and is mcsd's.
	svc *corev1.Service
	// foreignSvc is a Service of the derived name that mcsd did not create.
	foreignSvc *corev1.Service
	// unsupported lists the import's IP families the API server refused when
	// none was left to create the derived Service with.
	unsupported []corev1.IPFamily
	// svcErr is why the derived Service could not be created or updated.
	svcErr error
	// events wait for the ServiceImport to be created (importEventf).
	events []func(*mcsv1beta1.ServiceImport)
	// sliceOwners are the controller references the EndpointSlices may
	// have, the first for new ones (setSliceOwners).
	sliceOwners []metav1.OwnerReference
	// slicesInPlace: every EndpointSlice is as desired (none waits for the
	// cache to show it).
	slicesInPlace bool
	// recheck is when to look again at a status write skipped because the
	// cache did not show it yet (patch.StatusOnce).
	recheck time.Duration
	// endpoints are every cluster's endpoints of the Service, read from the
	// View once per reconcile: the hints, the slices and the conditions
	// follow one snapshot.
	endpoints map[string]registry.Endpoints
	// hints are the topology hints of the import's endpoints, and the
	// condition that says so.
	hints topology.Hints
	// retiring are the derived Services of an import taken over from the
	// AWS controller that still carry its traffic (see takeover.go).
	retiring retirement
	// cached is the ServiceImport's status as the cache shows it: the base
	// of the status patch (si's may be the status last written, see
	// patch.Known).
	cached mcsv1beta1.ServiceImportStatus
}

// recheckAt asks to look at the import again within d (at least half a
// second from now).
func (s *scope) recheckAt(d time.Duration) {
	d = max(d, 500*time.Millisecond)
	if s.recheck == 0 || d < s.recheck {
		s.recheck = d
	}
}

func (r *Reconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// Reconcile converges the import of one Service to the registry's state.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	key := registry.ServiceKey{Namespace: req.Namespace, Name: req.Name}
	log := ctrl.LoggerFrom(ctx).WithValues("serviceImport", klog.KRef(key.Namespace, key.Name))
	ctx = ctrl.LoggerInto(ctx, log)

	// An import exists only where its namespace does; Namespace events bring
	// it when the namespace is created.
	ns := &corev1.Namespace{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: key.Namespace}, ns); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("get namespace: %w", err)
	}
	if ns.DeletionTimestamp != nil || ns.Status.Phase == corev1.NamespaceTerminating {
		r.forget(req.NamespacedName)
		return ctrl.Result{}, nil
	}

	if !r.View.HasSynced() {
		// The first full read brings every import back (changeToImports).
		log.V(1).Info("Registry not read yet, waiting")
		return ctrl.Result{}, nil
	}

	si := &mcsv1beta1.ServiceImport{}
	if err := r.Client.Get(ctx, req.NamespacedName, si); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("get ServiceImport: %w", err)
		}
		si = nil
	}
	// cached is the status as the cache shows it, the base of the status
	// patch; the reconcile starts from the status this controller last
	// wrote, if the cache does not show it yet (the events compare with it).
	var cached mcsv1beta1.ServiceImportStatus
	if si != nil {
		cached = *si.Status.DeepCopy()
		si.Status = patch.Known(&r.written, si.UID, si.Status)
	}
	var foreign *mcsv1beta1.ServiceImport
	if si != nil && !isManaged(si) {
		foreign, si = si, nil
	}
	if si != nil && si.DeletionTimestamp != nil {
		// Someone deleted it (foreground): let the garbage collector finish;
		// the deletion event brings the import back if it is still exported.
		return ctrl.Result{}, nil
	}

	if si == nil {
		// None of mcsd's (yet): nothing to count until one is created.
		r.metrics.Forget(req.NamespacedName)
	}
	connected, connErr := r.View.Connected()
	if !connected {
		if foreign != nil {
			return ctrl.Result{}, nil
		}
		return r.reconcileDisconnected(ctx, si, &cached, connErr)
	}

	exports := r.View.Exports(key)
	if len(exports) == 0 && foreign != nil && isAWSImport(foreign) {
		return ctrl.Result{}, r.deleteAWSImport(ctx, foreign)
	}
	if len(exports) == 0 {
		if foreign != nil {
			log.V(1).Info("Not deleting a ServiceImport that mcsd did not create")
		}
		return ctrl.Result{}, r.reconcileDelete(ctx, key, si)
	}
	res := merge.Merge(exports)
	derivedName, retiring := derivedServiceOf(si, key), retirementOf(si)
	var svc *corev1.Service // the derived Service, when known without reading it
	if foreign != nil && isAWSImport(foreign) {
		adopted, ret, err := r.takeOver(ctx, foreign, res.Spec.IPFamilies)
		if err != nil {
			return ctrl.Result{}, err
		}
		si, foreign, retiring, svc = foreign, nil, ret, adopted
		if adopted != nil {
			derivedName = adopted.Name
		}
	}
	if foreign != nil {
		log.Error(errNotManaged, "A ServiceImport that mcsd did not create holds the name of an exported Service; leaving it alone")
		r.eventf(foreign, corev1.EventTypeWarning, eventNotManaged,
			"ServiceImport %s was not created by mcsd (no %s annotation): mcsd will not manage it. Delete it to let mcsd import the Service exported by the clusterset", key, wellknown.AnnotationManaged)
		return ctrl.Result{}, nil
	}
	s := &scope{localCluster: r.ClusterID, key: key, res: res, si: si,
		rejected: r.View.Rejected(key), derivedName: derivedName, endpoints: r.View.Endpoints(key), retiring: retiring, svc: svc, cached: cached}
	if err := r.planHints(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.reconcileNormal(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: s.recheck}, nil
}

var errNotManaged = errors.New("ServiceImport not created by mcsd")

// reconcileDisconnected runs while the registry cannot be read: the view may
// be stale, so nothing is created, changed or deleted. The ServiceImport only
// records that the registry is unreachable. The connection's return brings
// every import back (changeToImports), so nothing is retried meanwhile.
func (r *Reconciler) reconcileDisconnected(ctx context.Context, si *mcsv1beta1.ServiceImport, cached *mcsv1beta1.ServiceImportStatus, connErr error) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	if connErr == nil {
		// Not connected yet: a backend delivers its first full read just
		// before it reports the connection. Wait for the report rather than
		// mark the import unreachable for a moment.
		log.V(1).Info("Registry connection not reported yet, waiting")
		return ctrl.Result{}, nil
	}
	log.V(1).Info("Registry unreachable, keeping the import as last seen", "reason", connErr.Error())
	if si == nil {
		return ctrl.Result{}, nil
	}
	conditions.Set(&si.Status.Conditions, si.Generation, metav1.Condition{
		Type:    conditions.RegistryReachable,
		Status:  metav1.ConditionFalse,
		Reason:  conditions.ReasonRegistryUnreachable,
		Message: fmt.Sprintf("The registry is unreachable (%s). The import, its Service and its EndpointSlices are kept as last seen until it is back.", conditions.Cap(connErr.Error(), 512)),
	})
	recheck, err := r.patchStatus(ctx, si, cached)
	if err != nil {
		return ctrl.Result{}, err
	}
	r.metrics.Set(client.ObjectKeyFromObject(si), metrics.ImportRegistryUnreachable)
	return ctrl.Result{RequeueAfter: recheck}, nil
}

// reconcileDelete removes what mcsd created for a Service that no cluster
// exports any more: its EndpointSlices, its derived Service and its
// ServiceImport (si, nil when there is none of mcsd's). Objects without
// mcsd's marker are left alone. Owner references would have the garbage
// collector delete the slices and Service with the ServiceImport; deleting
// them here makes the removal immediate and independent of the collector.
func (r *Reconciler) reconcileDelete(ctx context.Context, key registry.ServiceKey, si *mcsv1beta1.ServiceImport) error {
	log := ctrl.LoggerFrom(ctx)
	if err := r.deleteEndpointSlices(ctx, key); err != nil {
		return err
	}
	svc := &corev1.Service{}
	name := derivedServiceOf(si, key)
	switch err := r.Client.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: name}, svc); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("get derived Service: %w", err)
	case isOurService(svc, key.Name):
		log.Info("Deleting derived Service: the Service is no longer exported", "service", klog.KObj(svc))
		if err := r.Client.Delete(ctx, svc); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete derived Service: %w", err)
		}
	}
	if si != nil {
		log.Info("Deleting ServiceImport: the Service is no longer exported")
		if err := r.Client.Delete(ctx, si); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete ServiceImport: %w", err)
		}
	}
	r.forget(types.NamespacedName{Namespace: key.Namespace, Name: key.Name})
	r.propagation.Forget(key)
	return nil
}

// reconcileNormal converges an exported Service's import: the derived
// Service, the ServiceImport and the EndpointSlices, then the status.
//
// The order serves a new import, which appears whole: a ClusterSetIP
// import's derived Service is written first, since the API server returns
// its cluster IPs in the create response, so the ServiceImport is created
// already carrying them (no consumer sees it without IPs, and no second
// write of it is needed). Its EndpointSlices are owned by the derived
// Service, so they are written at the same time as the ServiceImport; then
// the derived Service gets the ServiceImport as its owner, at the same time
// as the status is written. Three API round trips, each write needed once.
//
// A derived Service that goes (the import turned headless) or is replaced
// (its IP families changed) first hands its slices to the ServiceImport,
// and goes only once every slice is handed over: the garbage collector
// would delete the slices it owns.
func (r *Reconciler) reconcileNormal(ctx context.Context, s *scope) (retErr error) {
	if err := r.retireDue(ctx, s); err != nil {
		return err
	}
	if err := r.readDerivedService(ctx, s); err != nil {
		return err
	}
	clusterSetIP := s.res.Spec.Type == mcsv1beta1.ClusterSetIP
	replacing := s.svc != nil && (!clusterSetIP || needsRecreate(s.svc, s.res.Spec.IPFamilies))
	var svcErr error
	if clusterSetIP && !replacing {
		svcErr = r.reconcileService(ctx, s)
	}

	// The slices need their owner: the derived Service, or the ServiceImport.
	var importErr, slicesErr error
	var si *mcsv1beta1.ServiceImport
	setSliceOwners(s, replacing)
	if len(s.sliceOwners) > 0 {
		si, importErr, s.slicesInPlace, slicesErr = parallel.Both(
			func() (*mcsv1beta1.ServiceImport, error) { return r.reconcileImport(ctx, s) },
			func() (bool, error) { return r.reconcileEndpointSlices(ctx, s) })
		s.setImport(si)
	} else if si, importErr = r.reconcileImport(ctx, s); importErr == nil {
		s.setImport(si)
		setSliceOwners(s, replacing)
		s.slicesInPlace, slicesErr = r.reconcileEndpointSlices(ctx, s)
	}
	if s.si == nil {
		// Not created: no owner to give the derived Service, no status to
		// write. The error brings the import back.
		return errors.Join(svcErr, importErr, slicesErr)
	}
	s.flushEvents()
	if slicesErr == nil {
		slicesErr = r.removeAWSSlices(ctx, s)
	}

	// No finalizer: everything mcsd creates for an import is owned by the
	// ServiceImport (the slices through the derived Service), so the garbage
	// collector cleans up after it.
	var adopt *corev1.Service
	switch {
	case replacing && slicesErr == nil && s.slicesInPlace:
		svcErr = r.reconcileService(ctx, s)
		if clusterSetIP && svcErr == nil {
			// The new Service's IPs.
			si, err := r.reconcileImport(ctx, s)
			s.setImport(si)
			importErr = errors.Join(importErr, err)
		}
	case replacing:
		// Not every slice is the ServiceImport's yet: the Service stays
		// until a later reconcile (the error, or the slices' events, bring
		// it).
	case svcErr == nil && s.svc != nil && !hasControllerRef(s.svc, ownerRef(s.si)):
		// Written before the ServiceImport existed: it gets its owner
		// below, at the same time as the status.
		adopt = s.svc
	}

	old := s.si.Status.DeepCopy()
	r.setStatus(s)
	ref := ownerRef(s.si)
	_, adoptErr, recheck, patchErr := parallel.Both(
		func() (struct{}, error) {
			if adopt == nil {
				return struct{}{}, nil
			}
			return struct{}{}, r.adoptService(ctx, adopt, ref)
		},
		func() (time.Duration, error) { return r.patchStatus(ctx, s.si, &s.cached) })
	if recheck > 0 {
		s.recheckAt(recheck)
	}
	if patchErr == nil {
		r.metrics.Set(client.ObjectKeyFromObject(s.si), importState(s.si.Status.Conditions))
		r.eventClusters(ctx, s.si, old.Clusters)
		r.eventRejected(s.si, old.Conditions)
	}
	return errors.Join(svcErr, importErr, slicesErr, adoptErr, patchErr)
}

// reconcileImport creates or updates the ServiceImport's labels, annotations
// and spec, writing only when they differ from the desired ones, and returns
// the ServiceImport as it now is (nil when it could not be created). It
// reads s and writes none of it: it runs beside reconcileEndpointSlices.
func (r *Reconciler) reconcileImport(ctx context.Context, s *scope) (*mcsv1beta1.ServiceImport, error) {
	desired := desiredImport(s)
	if s.si == nil {
		if err := r.Client.Create(ctx, desired); err != nil {
			return nil, fmt.Errorf("create ServiceImport: %w", err)
		}
		ctrl.LoggerFrom(ctx).Info("Created ServiceImport", "type", desired.Spec.Type, "clusters", s.res.Clusters)
		return desired, nil
	}
	if importUpToDate(s.si, desired) {
		return s.si, nil
	}
	if old := s.si.Annotations[wellknown.AnnotationLegacyDerivedService]; old != "" {
		// Written by an older mcsd; the update below replaces it with the
		// standard annotation, keeping the import and its derived Service.
		ctrl.LoggerFrom(ctx).Info("Replacing the legacy derived-service annotation", "derivedService", old,
			"annotation", wellknown.AnnotationDerivedService)
	}
	updated := s.si.DeepCopy()
	updated.Labels = desired.Labels
	updated.Annotations = desired.Annotations
	updated.Spec = desired.Spec
	if err := r.Client.Update(ctx, updated); err != nil {
		return s.si, fmt.Errorf("update ServiceImport: %w", err)
	}
	// The update response carries the stored status; keep the one being
	// built, which the deferred patch compares with the stored one.
	updated.Status = s.si.Status
	return updated, nil
}

// setImport makes si, when there is one, the import's ServiceImport.
func (s *scope) setImport(si *mcsv1beta1.ServiceImport) {
	if si != nil {
		s.si = si
	}
}

// desiredImport is the ServiceImport the registry asks for, with the IPs
// and families of the derived Service when it has them.
func desiredImport(s *scope) *mcsv1beta1.ServiceImport {
	annotations := maps.Clone(s.res.Annotations)
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[wellknown.AnnotationManaged] = "true"
	spec := *s.res.Spec.DeepCopy()
	spec.IPs = nil
	s.retiring.annotate(annotations)
	if spec.Type == mcsv1beta1.ClusterSetIP {
		annotations[wellknown.AnnotationDerivedService] = s.derivedName
		if s.svc != nil && !needsRecreate(s.svc, spec.IPFamilies) {
			spec.IPFamilies, spec.IPs = importIPs(s.svc, spec.IPFamilies)
		}
	}
	return &mcsv1beta1.ServiceImport{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   s.key.Namespace,
			Name:        s.key.Name,
			Labels:      maps.Clone(s.res.Labels),
			Annotations: annotations,
		},
		Spec: spec,
	}
}

// importUpToDate reports whether si already has desired's labels,
// annotations and spec. mcsd owns the whole ServiceImport: labels and
// annotations it did not set are removed.
func importUpToDate(si, desired *mcsv1beta1.ServiceImport) bool {
	return maps.Equal(si.Labels, desired.Labels) &&
		maps.Equal(si.Annotations, desired.Annotations) &&
		equality.Semantic.DeepEqual(si.Spec, desired.Spec)
}

// patchStatus patches si's status from old (as the cache shows it) to its
// current one, and returns when to look again at a write it skipped (see
// patch.StatusOnce).
func (r *Reconciler) patchStatus(ctx context.Context, si *mcsv1beta1.ServiceImport, old *mcsv1beta1.ServiceImportStatus) (time.Duration, error) {
	base := si.DeepCopy()
	base.Status = *old
	_, recheck, err := patch.StatusOnce(ctx, r.Client, &r.written, base, si, func(si *mcsv1beta1.ServiceImport) any { return si.Status })
	return recheck, err
}

// deleteEndpointSlices deletes every EndpointSlice mcsd wrote for key.
func (r *Reconciler) deleteEndpointSlices(ctx context.Context, key registry.ServiceKey) error {
	n, err := r.deleteSlicesBy(ctx, key, wellknown.ManagedBy)
	if n > 0 {
		ctrl.LoggerFrom(ctx).Info("Deleted EndpointSlices", "count", n)
	}
	return err
}

// deleteSlicesBy deletes the EndpointSlices of the import key that
// managedBy wrote, and returns how many it deleted.
func (r *Reconciler) deleteSlicesBy(ctx context.Context, key registry.ServiceKey, managedBy string) (int, error) {
	slices, err := r.listSlicesBy(ctx, key, managedBy)
	if err != nil {
		return 0, err
	}
	for i := range slices {
		if err := r.Client.Delete(ctx, &slices[i]); client.IgnoreNotFound(err) != nil {
			return i, fmt.Errorf("delete EndpointSlice %s: %w", slices[i].Name, err)
		}
	}
	return len(slices), nil
}

// listEndpointSlices lists the EndpointSlices mcsd wrote for key.
func (r *Reconciler) listEndpointSlices(ctx context.Context, key registry.ServiceKey) ([]discoveryv1.EndpointSlice, error) {
	return r.listSlicesBy(ctx, key, wellknown.ManagedBy)
}

// listSlicesBy lists the EndpointSlices of the import key that managedBy
// (mcsd, or the AWS controller) wrote.
func (r *Reconciler) listSlicesBy(ctx context.Context, key registry.ServiceKey, managedBy string) ([]discoveryv1.EndpointSlice, error) {
	list := &discoveryv1.EndpointSliceList{}
	opts := []client.ListOption{client.InNamespace(key.Namespace), client.MatchingLabels{
		mcsv1beta1.LabelServiceName: key.Name,
		discoveryv1.LabelManagedBy:  managedBy,
	}}
	if r.slicesIndexed && managedBy == wellknown.ManagedBy {
		// The same slices, found through the index rather than by matching
		// the labels of every slice in the namespace.
		opts = append(opts, client.MatchingFields{sliceIndex: key.Name})
	}
	if err := r.Client.List(ctx, list, opts...); err != nil {
		return nil, fmt.Errorf("list EndpointSlices managed by %s: %w", managedBy, err)
	}
	return list.Items, nil
}

// forget drops what the controller keeps about an import that is gone,
// except the propagation stamps (see reconcileDelete).
func (r *Reconciler) forget(key types.NamespacedName) {
	r.metrics.Forget(key)
}

func isManaged(o metav1.Object) bool {
	return o.GetAnnotations()[wellknown.AnnotationManaged] == "true"
}

func (r *Reconciler) eventf(o *mcsv1beta1.ServiceImport, typ, reason, format string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(o, typ, reason, format, args...)
	}
}

// importEventf records an event on s's ServiceImport, or once it is
// created (flushEvents) when it does not exist yet.
func (r *Reconciler) importEventf(s *scope, typ, reason, format string, args ...any) {
	if s.si != nil {
		r.eventf(s.si, typ, reason, format, args...)
		return
	}
	msg := fmt.Sprintf(format, args...)
	s.events = append(s.events, func(si *mcsv1beta1.ServiceImport) { r.eventf(si, typ, reason, "%s", msg) })
}

// flushEvents records the events that waited for the ServiceImport.
func (s *scope) flushEvents() {
	for _, e := range s.events {
		e(s.si)
	}
	s.events = nil
}
