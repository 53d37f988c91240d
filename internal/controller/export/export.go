package export

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/clusterset"
	"github.com/mcsd-io/mcsd/internal/controller/echo"
	"github.com/mcsd-io/mcsd/internal/controller/parallel"
	"github.com/mcsd-io/mcsd/internal/controller/patch"
	"github.com/mcsd-io/mcsd/internal/controller/skeleton"
	"github.com/mcsd-io/mcsd/internal/metrics"
	"github.com/mcsd-io/mcsd/internal/wellknown"
	"github.com/mcsd-io/mcsd/pkg/registry"
)

const (
	// Finalizer keeps a ServiceExport until this cluster's records of its
	// Service are withdrawn from the registry.
	Finalizer = "mcsd.io/export"

	// ControllerName names the controller in logs and metrics.
	ControllerName = "serviceexport"
)

// Event reasons, for the Warning events the controller records.
const (
	// EventReasonConflict: the export disagrees with another cluster's export
	// of the same Service (the Conflict condition turned True or its reasons
	// changed).
	EventReasonConflict = "ExportConflict"
	// EventReasonRegistryFailed: writing to the registry failed.
	EventReasonRegistryFailed = "RegistryFailed"
)

// Reconciler converges the registry's records of this cluster's exported
// Services on the local ServiceExports, Services and EndpointSlices.
type Reconciler struct {
	// Client reads from the manager's cache and writes ServiceExports;
	// SetupWithManager has it tell the reconciler's echo filter what it
	// wrote.
	Client client.Client
	// Registry receives this cluster's exports and endpoints.
	Registry registry.Publisher
	// View is the clusterset as the registry watch delivers it: the source of
	// the Conflict condition, and of what this cluster already published.
	View *clusterset.View
	// ClusterID is this cluster's id, as the registry knows it.
	ClusterID string
	// Local receives this cluster's endpoints of each exported Service as
	// they are published (or would be, when the registry cannot be read),
	// for this cluster's imports; nil is none.
	Local *clusterset.Local
	// Recorder records Warning events on ServiceExports; nil records none.
	Recorder record.EventRecorder
	// Lapses tells when this cluster's records may have lapsed in the
	// registry (its lease or heartbeat expired, its id taken): Ready says
	// so meanwhile, on every ServiceExport. Nil for a backend that cannot
	// tell.
	Lapses registry.Lapser

	// echoes drops the watch events of the reconciler's own writes;
	// SetupWithManager wraps Client with it.
	echoes echo.Filter

	// written keeps the last status write of each ServiceExport until the
	// cache shows it: a reconcile starts from that status (patch.Known).
	written patch.Written

	// metrics counts the ServiceExports by state; SetupWithManager sets it.
	metrics *metrics.Exports
	// slicesIndexed says that Client's cache indexes EndpointSlices by
	// Service (sliceIndex); SetupWithManager sets it.
	slicesIndexed bool

	// unguardedMu guards unguarded: the Services that may have records
	// in the registry that no finalizer guards (published while their
	// ServiceExport had no finalizer yet, or found in the registry at start
	// by enqueueExported), withdrawn even where the View shows none.
	unguardedMu sync.Mutex
	unguarded   map[registry.ServiceKey]bool

	// stale spaces out the looks again at a ServiceExport whose
	// finalizer's write keeps meeting a newer one than the cache's.
	stale skeleton.Behind
}

// scope is what the steps of one reconcile share.
type scope struct {
	key registry.ServiceKey
	// se is the ServiceExport, with the status being built: it starts from
	// the status this controller last wrote if the cache does not show it
	// yet (patch.Known; the events compare with it). cached is the status
	// as the cache shows it, the base of the status patch.
	se     *mcsv1beta1.ServiceExport
	cached mcsv1beta1.ServiceExportStatus
	// addFinalizer: Apply writes the finalizer (and drops the AWS
	// controller's), beside the records.
	addFinalizer bool

	// Compute's: whether the Service can be exported, and if so its
	// records, or why every cluster would refuse the export
	// (invalid) or its endpoints alone (invalidEndpoints).
	valid            bool
	spec             registry.ServiceSpec
	groups           []registry.EndpointGroup
	invalid          error
	invalidEndpoints error

	// skipStatus: the ServiceExport went while it was applied, or its
	// finalizer could not be written (the status waits for it: the retry
	// writes both).
	skipStatus bool
	// recheck is when to look again without an error: the finalizer's
	// write met a newer ServiceExport than the cache's.
	recheck time.Duration
}

// Reconcile publishes or withdraws this cluster's export of the Service named
// by req and updates the ServiceExport's conditions, in the five steps of
// package skeleton.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return skeleton.Reconcile(ctx, req, skeleton.Steps[*scope]{
		LogKey:      "service",
		Fetch:       r.fetch,
		Finalize:    r.finalize,
		Compute:     r.compute,
		Apply:       r.apply,
		PatchStatus: r.patchStatus,
	})
}

// fetch reads the ServiceExport. One that is gone has its records
// withdrawn if a finalizer did not guard them (withdrawGone).
func (r *Reconciler) fetch(ctx context.Context, req ctrl.Request) (*scope, bool, error) {
	key := registry.ServiceKey{Namespace: req.Namespace, Name: req.Name}
	se := &mcsv1beta1.ServiceExport{}
	if err := r.Client.Get(ctx, req.NamespacedName, se); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.NamespacedName)
			return nil, false, r.withdrawGone(ctx, key)
		}
		return nil, false, fmt.Errorf("get ServiceExport: %w", err)
	}
	cached := *se.Status.DeepCopy()
	se.Status = patch.Known(&r.written, se.UID, se.Status)
	return &scope{key: key, se: se, cached: cached}, true, nil
}

// finalize withdraws the export of a ServiceExport being deleted and
// releases it. Otherwise it asks Apply to add the finalizer where it is
// missing: it is written while the export is published, not before, so that
// importers need not wait for it. Until it is in place the export is
// unguarded, and a ServiceExport deleted meanwhile is withdrawn when its
// deletion is seen.
func (r *Reconciler) finalize(ctx context.Context, s *scope) (bool, error) {
	if !s.se.DeletionTimestamp.IsZero() {
		r.metrics.Forget(client.ObjectKeyFromObject(s.se))
		err := r.reconcileDelete(ctx, s.se, s.key)
		if err != nil {
			// Why the ServiceExport stays (Ready=False Failed, when the
			// registry refused the withdrawal), written once.
			if _, perr := r.patchStatus(ctx, s); perr != nil {
				err = errors.Join(err, perr)
			}
		}
		return true, err
	}
	if !controllerutil.ContainsFinalizer(s.se, Finalizer) || controllerutil.ContainsFinalizer(s.se, wellknown.AWSExportFinalizer) {
		r.setUnguarded(s.key, !controllerutil.ContainsFinalizer(s.se, Finalizer))
		s.addFinalizer = true
	}
	return false, nil
}

// compute reads the Service and its EndpointSlices, sets the Valid
// condition and builds this cluster's records of the Service (spec.go).
func (r *Reconciler) compute(ctx context.Context, s *scope) error {
	svc := &corev1.Service{}
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(s.se), svc); err != nil {
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("get Service: %w", err)
		}
		svc = nil
	}
	if s.valid = r.validate(s.se, svc); !s.valid {
		return nil
	}
	var list discoveryv1.EndpointSliceList
	opts := []client.ListOption{client.InNamespace(svc.Namespace), client.MatchingLabels{discoveryv1.LabelServiceName: svc.Name}}
	if r.slicesIndexed {
		// The same slices but mcsd's imported ones (endpointGroups skips
		// those), found through the index rather than by matching the labels
		// of every slice in the namespace.
		opts = append(opts, client.MatchingFields{sliceIndex: svc.Name})
	}
	if err := r.Client.List(ctx, &list, opts...); err != nil {
		return fmt.Errorf("list EndpointSlices: %w", err)
	}
	s.spec = serviceSpec(svc, s.se)
	s.groups = endpointGroups(list.Items)
	s.invalid = registry.ValidateExport(registry.Export{Cluster: r.ClusterID, Service: s.key, Spec: s.spec})
	s.invalidEndpoints = registry.ValidateGroups(s.groups)
	return nil
}

// apply writes the records (publish, withdraw or refuse) and, at the same
// time, the finalizer when finalize asked for it.
func (r *Reconciler) apply(ctx context.Context, s *scope) error {
	var fin *mcsv1beta1.ServiceExport
	if s.addFinalizer {
		fin = s.se.DeepCopy()
	}
	_, finErr, _, err := parallel.Both(
		func() (struct{}, error) {
			if fin == nil {
				return struct{}{}, nil
			}
			return struct{}{}, r.addFinalizer(ctx, fin)
		},
		func() (struct{}, error) { return struct{}{}, r.applyRecords(ctx, s) })
	switch {
	case apierrors.IsNotFound(finErr):
		// Deleted while it was being published.
		s.skipStatus = true
		r.forget(client.ObjectKeyFromObject(s.se))
		return r.withdrawGone(ctx, s.key)
	case apierrors.IsConflict(finErr):
		// The ServiceExport changed after the cache's copy (a user's edit,
		// or this controller's last status write not yet in the cache):
		// not a failure; the next look writes the finalizer and status.
		ctrl.LoggerFrom(ctx).V(1).Info("ServiceExport changed since the cache's copy; adding the finalizer again soon", "reason", finErr.Error())
		s.skipStatus, s.recheck = true, r.stale.When(client.ObjectKeyFromObject(s.se))
		return err
	case finErr != nil:
		s.skipStatus = true
		return errors.Join(err, finErr)
	}
	r.setUnguarded(s.key, false)
	if fin != nil {
		r.stale.Forget(client.ObjectKeyFromObject(s.se))
	}
	return err
}

// applyRecords brings this cluster's records of the Service to what compute
// found, and sets Ready and Conflict.
func (r *Reconciler) applyRecords(ctx context.Context, s *scope) error {
	switch {
	case !s.valid:
		return r.withdraw(ctx, s.se, s.key)
	case s.invalid != nil:
		return ignoreRefused(r.refuse(ctx, s.se, s.key, s.invalid))
	case s.invalidEndpoints != nil:
		return r.withholdEndpoints(ctx, s)
	}
	if err := r.publish(ctx, s); err != nil {
		if errors.Is(err, errUnreachable) {
			return nil
		}
		if isRejected(err) {
			if len(s.groups) > 0 {
				// The backend refused the records (an endpoints record
				// too large for it, say): the export is kept if it is
				// taken without them.
				s.invalidEndpoints = err
				return r.withholdEndpoints(ctx, s)
			}
			return ignoreRefused(r.refuse(ctx, s.se, s.key, err))
		}
		return err
	}
	r.registrySucceeded(s.se)
	r.updateConflict(s.se, s.key, s.spec)
	return nil
}

// unreachable returns why the registry cannot be read, as the View
// reports it, or nil: nil too before the View's first report.
func (r *Reconciler) unreachable() error {
	if r.View == nil {
		return nil
	}
	if connected, err := r.View.Connected(); !connected && err != nil {
		return fmt.Errorf("unreachable, not written until it is back: %w", err)
	}
	return nil
}

// ignoreRefused is err, but nil for errRefused: a refused export is not
// retried (refuse).
func ignoreRefused(err error) error {
	if errors.Is(err, errRefused) {
		return nil
	}
	return err
}

// patchStatus writes the status the steps built, if it differs from the
// cache's, and returns when to look again at a write it skipped (see
// patch.StatusOnce).
func (r *Reconciler) patchStatus(ctx context.Context, s *scope) (time.Duration, error) {
	if s.skipStatus {
		return s.recheck, nil
	}
	base := s.se.DeepCopy()
	base.Status = s.cached
	_, recheck, err := patch.StatusOnce(ctx, r.Client, &r.written, base, s.se, func(se *mcsv1beta1.ServiceExport) any { return se.Status })
	r.metrics.Set(client.ObjectKeyFromObject(s.se), exportState(s.se.Status.Conditions))
	return recheck, client.IgnoreNotFound(err)
}

// forget drops what the controller keeps about a ServiceExport that is gone.
func (r *Reconciler) forget(key types.NamespacedName) {
	r.metrics.Forget(key)
	r.stale.Forget(key)
}
