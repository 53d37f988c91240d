package imports

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/clusterset"
	"github.com/mcsd-io/mcsd/internal/conditions"
	"github.com/mcsd-io/mcsd/internal/controller/echo"
	"github.com/mcsd-io/mcsd/internal/controller/parallel"
	"github.com/mcsd-io/mcsd/internal/controller/patch"
	"github.com/mcsd-io/mcsd/internal/controller/skeleton"
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
	// eventTrafficDistributionRefused: the derived Service goes without
	// the import's trafficDistribution, which the API server refuses.
	eventTrafficDistributionRefused = "TrafficDistributionNotSupported"
	eventRecordsRejected            = "RecordsRejected"
	eventTakenOver                  = "TakenOver"
)

// Reconciler keeps, for every Service the clusterset exports, the
// ServiceImport, the derived Service (ClusterSetIP only) and the
// EndpointSlices of every source cluster in this cluster. Requests name the
// Service: the ServiceImport's namespace and name.
//
// The permissions it needs are in config/rbac/role.yaml (tested by
// test/e2e/install, which runs mcsd under exactly those).
type Reconciler struct {
	// Client reads from the manager's cache and writes the imports;
	// SetupWithManager has it tell the reconciler's echo filter what it
	// wrote.
	Client client.Client
	// APIReader reads past the cache: the ServiceImport of a Service no
	// longer exported, when the cache does not show it yet (importToDelete).
	// Nil is Client.
	APIReader client.Reader
	// View is the registry's state: every live cluster's exports and
	// endpoints.
	View *clusterset.View
	// ClusterID is this cluster's id: this cluster imports its own exports
	// like any other cluster's, but for its endpoints, read from Local.
	ClusterID string
	// Local holds this cluster's own endpoints of the Services it exports,
	// as its export controller builds them (clusterset.Local): this
	// cluster's part of an import follows them, with no round trip through
	// the registry, and while the registry cannot be read. Nil is none:
	// this cluster's endpoints come from the registry like the others'.
	Local *clusterset.Local
	// Recorder records events on ServiceImports; nil records none.
	Recorder record.EventRecorder
	// RetireGrace is how long the derived Services of an import taken over
	// from the AWS Cloud Map MCS controller that mcsd did not adopt keep
	// carrying its traffic (see takeover.go). Zero is DefaultRetireGrace; a
	// negative grace is none.
	RetireGrace time.Duration
	// Now is the clock of the retirements; nil is time.Now.
	Now func() time.Time

	// echoes drops the watch events of the reconciler's own writes;
	// SetupWithManager wraps Client with it.
	echoes echo.Filter

	// written keeps the last status write of each ServiceImport until the
	// cache shows it: a reconcile starts from that status (patch.Known).
	written patch.Written

	// unseen holds the imports whose ServiceImport this controller created
	// (or found existing) and its cache has not shown yet: the one case in
	// which a Service no longer exported reads its ServiceImport past the
	// cache (importToDelete).
	unseen unseenImports

	// metrics counts the ServiceImports by state, and propagation times
	// EndpointSlices; SetupWithManager sets both.
	metrics     *metrics.Imports
	propagation *metrics.Propagation
	// slicesIndexed says that Client's cache indexes EndpointSlices by
	// import (sliceIndex); SetupWithManager sets it.
	slicesIndexed bool

	// zones keeps the zones of this cluster's nodes, from the Node watch.
	zones zoneBook

	// nodeHintsDropped: the API server returned the last EndpointSlice
	// written with node hints without them (Kubernetes before 1.34 by
	// default): a slice without them is then as wanted (noteNodeHints).
	nodeHintsDropped atomic.Bool

	// tdRefused holds the trafficDistribution values the API server
	// refused on a derived Service, with the time (withoutRefusedTD): they
	// are left out for tdRetry.
	tdRefused sync.Map
	// familyRefused holds the IP families the API server refused on a
	// derived Service, with the time (createService): a family the
	// cluster is not configured for is left out of the next creates for
	// familyRetry, rather than refused again at each.
	familyRefused sync.Map

	// clusterEvents limits the ClustersChanged events (see eventClusters);
	// SetupWithManager sets it, nil is no limit.
	clusterEvents flowcontrol.RateLimiter

	// behind spaces out the looks again at an import whose cache stays
	// behind, reconcile after reconcile (lookAgainIn).
	behind skeleton.Behind
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
	// nodeHintsDropped: the API server drops node hints
	// (Reconciler.nodeHintsDropped).
	nodeHintsDropped bool
	// slicesInPlace: every EndpointSlice is as desired (none waits for the
	// cache to show it).
	slicesInPlace bool
	// recheck is when to look again at a status write skipped because the
	// cache did not show it yet (patch.StatusOnce).
	recheck time.Duration
	// behind: the reconcile found its cache behind the API server
	// (recheckSoon).
	behind bool
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

	// exports are every cluster's exports of the Service, read from the
	// View with endpoints and rejected.
	exports []registry.Export
	// foreign is a ServiceImport of the Service's name that mcsd did not
	// create: one of the AWS Cloud Map MCS controller's is taken over
	// (apply) or deleted with the export (finalize), another is left alone.
	foreign *mcsv1beta1.ServiceImport
	// unreachable is why the registry cannot be read, when it cannot: the
	// view may be stale, so nothing is created or deleted, nothing changed
	// but this cluster's own endpoints (ownEndpointsOnly), and the status
	// says so.
	unreachable error
	// ownEndpointsOnly: while the registry cannot be read, the import's
	// EndpointSlices are written from the View as last read, with this
	// cluster's own endpoints from Local (the others' as they were); the
	// ServiceImport and the derived Service are left as they are.
	ownEndpointsOnly bool
	// adopt is the derived Service written before the ServiceImport
	// existed: it gets the ServiceImport as its owner at the same time as
	// the status is written.
	adopt *corev1.Service
	// svcWritten: svc is as this reconcile's own write of it returned it,
	// at the version the API server holds unless someone wrote it since.
	svcWritten bool
	// statusKnown: the steps got as far as reading the derived Service, so
	// the status can say how the import stands; a step that failed before
	// (the hints, the take-over, a retirement) leaves the status as it was.
	statusKnown bool
}

// cacheLag is how soon a reconcile looks again at an object its cache did
// not show yet.
const cacheLag = skeleton.BehindMin

// recheckSoon asks to look at the import again once the cache has caught
// up (cacheLag, or later when it stays behind: lookAgainIn).
func (s *scope) recheckSoon() {
	s.behind = true
	if s.recheck == 0 || cacheLag < s.recheck {
		s.recheck = cacheLag
	}
}

// lookAgainIn is when to look at the import of s again: s.recheck, except
// that an import whose cache was behind in every reconcile since the last
// that found it caught up waits longer each time (skeleton.Behind).
func (r *Reconciler) lookAgainIn(s *scope) time.Duration {
	key := types.NamespacedName{Namespace: s.key.Namespace, Name: s.key.Name}
	if !s.behind {
		r.behind.Forget(key)
		return s.recheck
	}
	return r.behind.When(key)
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

// Reconcile converges the import of one Service to the registry's state,
// in the five steps of package skeleton.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	res, err := skeleton.Reconcile(ctx, req, skeleton.Steps[*scope]{
		LogKey:      "serviceImport",
		Fetch:       r.fetch,
		Finalize:    r.finalize,
		Compute:     r.compute,
		Apply:       r.apply,
		PatchStatus: r.patchStatus,
	})
	if err != nil && namespaceTerminating(err) {
		// The namespace is being deleted, and the cache did not show it
		// yet: the import goes with it, and its next look (the Namespace's
		// events bring it) finds the namespace terminating.
		ctrl.LoggerFrom(ctx).V(1).Info("Namespace being deleted; import not written", "reason", err.Error())
		return ctrl.Result{}, nil
	}
	return res, err
}

// namespaceTerminating reports whether err, or an error it joins or wraps,
// is an API server's refusal to create an object in a namespace being
// deleted.
func namespaceTerminating(err error) bool {
	if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
		return true
	}
	switch e := err.(type) { //nolint:errorlint // walks the tree itself
	case interface{ Unwrap() []error }:
		return slices.ContainsFunc(e.Unwrap(), namespaceTerminating)
	case interface{ Unwrap() error }:
		return namespaceTerminating(e.Unwrap())
	}
	return false
}

// fetch reads the ServiceImport, when its namespace exists, and the
// Service's records from the View, once it holds the namespace's (the first
// full read, or the namespace's arrival in a scoped View, brings every
// import back, changeToImports).
func (r *Reconciler) fetch(ctx context.Context, req ctrl.Request) (*scope, bool, error) {
	log := ctrl.LoggerFrom(ctx)
	key := registry.ServiceKey{Namespace: req.Namespace, Name: req.Name}
	// An import exists only where its namespace does; Namespace events bring
	// it when the namespace is created.
	ns := &corev1.Namespace{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: key.Namespace}, ns); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.NamespacedName)
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("get namespace: %w", err)
	}
	if ns.DeletionTimestamp != nil || ns.Status.Phase == corev1.NamespaceTerminating {
		r.forget(req.NamespacedName)
		return nil, false, nil
	}
	if !r.View.HasSyncedFor(key.Namespace) {
		// The View's change when it has read the namespace brings it back.
		log.V(1).Info("Registry not read yet, waiting")
		return nil, false, nil
	}

	si := &mcsv1beta1.ServiceImport{}
	if err := r.Client.Get(ctx, req.NamespacedName, si); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, false, fmt.Errorf("get ServiceImport: %w", err)
		}
		si = nil
	} else {
		r.unseen.remove(req.NamespacedName)
	}
	s := &scope{localCluster: r.ClusterID, key: key, nodeHintsDropped: r.nodeHintsDropped.Load()}
	if si != nil {
		// The status as the cache shows it is the base of the status patch;
		// the reconcile starts from the status this controller last wrote,
		// if the cache does not show it yet (the events compare with it).
		s.cached = *si.Status.DeepCopy()
		si.Status = patch.Known(&r.written, si.UID, si.Status)
		if !isManaged(si) {
			s.foreign, si = si, nil
		}
	}
	if si != nil && si.DeletionTimestamp != nil {
		// Someone deleted it (foreground): let the garbage collector finish;
		// the deletion event brings the import back if it is still exported.
		return nil, false, nil
	}
	if si == nil {
		// None of mcsd's (yet): nothing to count until one is created.
		r.metrics.Forget(req.NamespacedName)
	}
	s.si = si

	if connected, connErr := r.View.Connected(); !connected {
		if connErr == nil {
			// Not connected yet: a backend delivers its first full read just
			// before it reports the connection. Wait for the report rather
			// than mark the import unreachable for a moment.
			log.V(1).Info("Registry connection not reported yet, waiting")
			return nil, false, nil
		}
		log.V(1).Info("Registry unreachable, keeping the import as last seen", "reason", connErr.Error())
		s.unreachable = connErr
		// The connection's return brings every import back
		// (changeToImports), so nothing is retried meanwhile; but this
		// cluster's own endpoints, which do not come through the
		// registry, are kept current (ownEndpointsOnly).
		if si != nil {
			s.ownEndpointsOnly = r.readView(s)
		}
		return s, si != nil, nil
	}
	r.readView(s)
	return s, true, nil
}

// readView reads the Service's records from the View, with this cluster's
// endpoints from Local where the View shows this cluster's export (a
// refused record hides it, and it stays hidden) as Local's were built for,
// and reports whether Local gave them.
func (r *Reconciler) readView(s *scope) bool {
	svc := r.View.Service(s.key)
	s.exports, s.rejected, s.endpoints = svc.Exports, svc.Rejected, svc.Endpoints
	i := slices.IndexFunc(s.exports, func(e registry.Export) bool { return e.Cluster == s.localCluster })
	if i < 0 {
		return false
	}
	own, ok := r.Local.Endpoints(s.localCluster, s.key, s.exports[i].Spec)
	if !ok {
		return false
	}
	if v, inView := s.endpoints[s.localCluster]; inView && equality.Semantic.DeepEqual(v.Groups, own.Groups) {
		return true // the registry's record, with its stamp
	}
	s.endpoints = maps.Clone(s.endpoints)
	if s.endpoints == nil {
		s.endpoints = map[string]registry.Endpoints{}
	}
	s.endpoints[s.localCluster] = own
	return true
}

// finalize deletes the import of a Service that no cluster exports any
// more, and leaves alone a ServiceImport of its name that neither mcsd nor
// the AWS controller created. An import has no finalizer: everything mcsd
// creates for it is owned by the ServiceImport (the slices through the
// derived Service), so the garbage collector cleans up after it.
func (r *Reconciler) finalize(ctx context.Context, s *scope) (bool, error) {
	log := ctrl.LoggerFrom(ctx)
	switch {
	case s.unreachable != nil:
		return false, nil
	case len(s.exports) == 0 && s.foreign != nil && isAWSImport(s.foreign):
		return true, r.deleteAWSImport(ctx, s.foreign)
	case len(s.exports) == 0:
		if s.foreign != nil {
			log.V(1).Info("Not deleting a ServiceImport that mcsd did not create")
		} else if s.si == nil && r.unseen.has(types.NamespacedName{Namespace: s.key.Namespace, Name: s.key.Name}) {
			si, err := r.importToDelete(ctx, s.key)
			if err != nil {
				return true, err
			}
			s.si = si
		}
		return true, r.reconcileDelete(ctx, s.key, s.si)
	case s.foreign != nil && !isAWSImport(s.foreign):
		log.Error(errNotManaged, "A ServiceImport that mcsd did not create holds the name of an exported Service; leaving it alone")
		r.eventf(s.foreign, corev1.EventTypeWarning, eventNotManaged,
			"ServiceImport %s was not created by mcsd (no %s annotation): mcsd will not manage it. Delete it to let mcsd import the Service exported by the clusterset", s.key, wellknown.AnnotationManaged)
		return true, nil
	}
	return false, nil
}

var errNotManaged = errors.New("ServiceImport not created by mcsd")

// importToDelete reads, past the cache, the ServiceImport mcsd made for key,
// a Service no longer exported whose ServiceImport this controller created
// and the cache does not show yet (unseen): its event has not come (an API
// server's restart delays them). Left, it would keep the IPs of the derived
// Service deleted, and no event would bring it back (its own write's is
// dropped, package echo). It returns nil when there is none, or none of
// mcsd's. The read is a list by name: mcsd may list ServiceImports, not get
// them.
func (r *Reconciler) importToDelete(ctx context.Context, key registry.ServiceKey) (*mcsv1beta1.ServiceImport, error) {
	reader := r.APIReader
	if reader == nil {
		reader = r.Client
	}
	list := &mcsv1beta1.ServiceImportList{}
	if err := reader.List(ctx, list, client.InNamespace(key.Namespace), client.MatchingFields{"metadata.name": key.Name}); err != nil {
		return nil, fmt.Errorf("read ServiceImport: %w", err)
	}
	for i := range list.Items {
		if si := &list.Items[i]; si.Name == key.Name && isManaged(si) && si.DeletionTimestamp == nil {
			ctrl.LoggerFrom(ctx).V(1).Info("ServiceImport not in the cache yet, deleting it as read")
			return si, nil
		}
	}
	return nil, nil
}

// compute merges the exports (package merge) and plans the endpoints'
// topology hints (package topology). While the registry cannot be read it
// sets RegistryReachable=False, and goes on only for this cluster's own
// endpoints (ownEndpointsOnly).
func (r *Reconciler) compute(ctx context.Context, s *scope) error {
	if s.unreachable != nil {
		conditions.Set(&s.si.Status.Conditions, s.si.Generation, metav1.Condition{
			Type:    conditions.RegistryReachable,
			Status:  metav1.ConditionFalse,
			Reason:  conditions.ReasonRegistryUnreachable,
			Message: fmt.Sprintf("The registry is unreachable (%s). The import, its Service and its EndpointSlices are kept as last seen until it is back, but for this cluster's own endpoints, which follow its EndpointSlices.", conditions.Cap(s.unreachable.Error(), 512)),
		})
		if !s.ownEndpointsOnly {
			return nil
		}
	}
	s.res = merge.Merge(s.exports)
	s.derivedName, s.retiring = derivedServiceOf(s.si, s.key), retirementOf(s.si)
	return r.planHints(ctx, s)
}

// apply takes an import of the AWS controller over, then writes the derived
// Service, the ServiceImport and the EndpointSlices (applyImport).
func (r *Reconciler) apply(ctx context.Context, s *scope) error {
	if s.unreachable != nil {
		if s.ownEndpointsOnly {
			return r.applyOwnEndpoints(ctx, s)
		}
		return nil
	}
	if s.foreign != nil {
		adopted, ret, err := r.takeOver(ctx, s.foreign, s.res.Spec.IPFamilies)
		if err != nil {
			return err
		}
		s.si, s.foreign, s.retiring, s.svc = s.foreign, nil, ret, adopted
		if adopted != nil {
			s.derivedName = adopted.Name
		}
	}
	return r.applyImport(ctx, s)
}

// patchStatus writes the status from what the steps found and, at the same
// time, the owner of a derived Service written before its ServiceImport.
func (r *Reconciler) patchStatus(ctx context.Context, s *scope) (time.Duration, error) {
	if s.si == nil || (s.unreachable == nil && !s.statusKnown) {
		// Not created, or a step failed before the import could be told:
		// no owner to give the derived Service, no status to write. The
		// error, or the look again asked for, brings the import back.
		return r.lookAgainIn(s), nil
	}
	if s.unreachable != nil {
		recheck, err := r.writeStatus(ctx, s.si, &s.cached)
		if err == nil {
			r.metrics.Set(client.ObjectKeyFromObject(s.si), metrics.ImportRegistryUnreachable)
		}
		if d := r.lookAgainIn(s); d > 0 && (recheck == 0 || d < recheck) {
			recheck = d // slices written from Local met a cache behind
		}
		return recheck, err
	}
	old := s.si.Status.DeepCopy()
	r.setStatus(s)
	ref := ownerRef(s.si)
	_, adoptErr, recheck, patchErr := parallel.Both(
		func() (struct{}, error) {
			if s.adopt == nil {
				return struct{}{}, nil
			}
			return struct{}{}, r.adoptService(ctx, s.adopt, ref, s.svcWritten)
		},
		func() (time.Duration, error) { return r.writeStatus(ctx, s.si, &s.cached) })
	if recheck > 0 {
		s.recheckAt(recheck)
	}
	if patchErr == nil {
		r.metrics.Set(client.ObjectKeyFromObject(s.si), importState(s.si.Status.Conditions))
		r.eventClusters(ctx, s.si, old.Clusters)
		r.eventRejected(s.si, old.Conditions)
	}
	return r.lookAgainIn(s), errors.Join(adoptErr, patchErr)
}

// applyImport writes an exported Service's import: the derived Service,
// the ServiceImport and the EndpointSlices; patchStatus follows.
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
func (r *Reconciler) applyImport(ctx context.Context, s *scope) error {
	if err := r.retireDue(ctx, s); err != nil {
		return err
	}
	if err := r.readDerivedService(ctx, s); err != nil {
		return err
	}
	keepPrimaryFamily(s.res.Spec.IPFamilies, s.svc)
	s.statusKnown = true
	clusterSetIP := s.res.Spec.Type == mcsv1beta1.ClusterSetIP
	replacing := s.svc != nil && (!clusterSetIP || needsRecreate(s.svc, s.res.Spec.IPFamilies))
	var svcErr error
	if clusterSetIP && !replacing {
		svcErr = r.reconcileService(ctx, s)
		if errors.Is(svcErr, errServiceNotCached) {
			// Nothing more until the cache shows the Service; the status
			// stays as it was.
			s.statusKnown = false
			s.recheckSoon()
			return nil
		}
	}

	// The slices need their owner: the derived Service, or the ServiceImport.
	var importErr, slicesErr error
	var si *mcsv1beta1.ServiceImport
	setSliceOwners(s, replacing)
	if len(s.sliceOwners) > 0 {
		si, importErr, s.slicesInPlace, slicesErr = parallel.Both(
			func() (*mcsv1beta1.ServiceImport, error) { return r.reconcileImport(ctx, s) },
			func() (bool, error) { return r.reconcileEndpointSlices(ctx, s) })
		importErr = s.lookAgainIfBehind(importErr)
		s.setImport(si)
	} else {
		si, importErr = r.reconcileImport(ctx, s)
		if importErr = s.lookAgainIfBehind(importErr); importErr == nil && si != nil {
			s.setImport(si)
			setSliceOwners(s, replacing)
			s.slicesInPlace, slicesErr = r.reconcileEndpointSlices(ctx, s)
		}
	}
	if s.si == nil {
		// Not created: the error brings the import back.
		return errors.Join(svcErr, importErr, slicesErr)
	}
	s.flushEvents()
	if slicesErr == nil && !s.slicesInPlace {
		s.recheckSoon()
	}
	if slicesErr == nil {
		slicesErr = r.removeAWSSlices(ctx, s)
	}

	switch {
	case replacing && slicesErr == nil && s.slicesInPlace:
		svcErr = r.reconcileService(ctx, s)
		if errors.Is(svcErr, errServiceNotCached) {
			// Nothing more until the cache shows the Service as it is.
			s.statusKnown = false
			s.recheckSoon()
			return errors.Join(importErr, slicesErr)
		}
		if clusterSetIP && svcErr == nil {
			// The new Service's IPs.
			si, err := r.reconcileImport(ctx, s)
			s.setImport(si)
			importErr = errors.Join(importErr, s.lookAgainIfBehind(err))
		}
	case replacing:
		// Not every slice is the ServiceImport's yet: the Service stays
		// until a later reconcile (the error, or recheckSoon, brings it).
	case svcErr == nil && s.svc != nil && !hasControllerRef(s.svc, ownerRef(s.si)):
		// Written before the ServiceImport existed: it gets its owner
		// at the same time as the status (patchStatus).
		s.adopt = s.svc
	}

	return errors.Join(svcErr, importErr, slicesErr)
}

// applyOwnEndpoints writes, while the registry cannot be read, the
// EndpointSlices of an import whose ServiceImport and derived Service are
// kept as they are: from the View as last read, with this cluster's own
// endpoints current (readView). The other clusters' endpoints are as last
// read; their slices change only where their hints follow this cluster's
// (the same-cluster preference, when this cluster's ready endpoints come
// or go), or where someone deleted or edited them.
// Nothing is created but slices: an import without its derived Service
// (or ServiceImport, for a headless one) waits for the registry.
func (r *Reconciler) applyOwnEndpoints(ctx context.Context, s *scope) error {
	if s.res.Spec.Type == mcsv1beta1.ClusterSetIP {
		svc := &corev1.Service{}
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: s.key.Namespace, Name: s.derivedName}, svc); err != nil {
			return client.IgnoreNotFound(fmt.Errorf("get derived Service: %w", err))
		}
		if !isOurService(svc, s.key.Name) {
			return nil
		}
		keepPrimaryFamily(s.res.Spec.IPFamilies, svc)
		if needsRecreate(svc, s.res.Spec.IPFamilies) {
			return nil
		}
		s.svc = svc
	}
	setSliceOwners(s, false)
	if len(s.sliceOwners) == 0 {
		return nil
	}
	inPlace, err := r.reconcileEndpointSlices(ctx, s)
	if err == nil && !inPlace {
		// A write met a cache behind it: its event, an echo of this
		// write, is dropped, so look again.
		s.recheckSoon()
	}
	return err
}

// writeStatus patches si's status from old (as the cache shows it) to its
// current one, and returns when to look again at a write it skipped (see
// patch.StatusOnce).
func (r *Reconciler) writeStatus(ctx context.Context, si *mcsv1beta1.ServiceImport, old *mcsv1beta1.ServiceImportStatus) (time.Duration, error) {
	base := si.DeepCopy()
	base.Status = *old
	_, recheck, err := patch.StatusOnce(ctx, r.Client, &r.written, base, si, func(si *mcsv1beta1.ServiceImport) any { return si.Status })
	return recheck, err
}

// forget drops what the controller keeps about an import that is gone,
// except the propagation stamps (see reconcileDelete).
func (r *Reconciler) forget(key types.NamespacedName) {
	r.metrics.Forget(key)
	r.behind.Forget(key)
	r.unseen.remove(key)
}

// unseenImports is a set of imports whose ServiceImport exists but the
// cache does not show yet. The zero value is ready to use.
type unseenImports struct {
	mu sync.Mutex
	m  map[types.NamespacedName]bool
}

func (u *unseenImports) add(key types.NamespacedName) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.m == nil {
		u.m = map[types.NamespacedName]bool{}
	}
	u.m[key] = true
}

func (u *unseenImports) remove(key types.NamespacedName) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.m, key)
}

func (u *unseenImports) has(key types.NamespacedName) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.m[key]
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
