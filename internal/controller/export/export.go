package export

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/clusterset"
	"github.com/mcsd-io/mcsd/internal/conditions"
	"github.com/mcsd-io/mcsd/internal/controller/parallel"
	"github.com/mcsd-io/mcsd/internal/controller/patch"
	"github.com/mcsd-io/mcsd/internal/merge"
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
	// Client reads from the manager's cache and writes ServiceExports.
	Client client.Client
	// Registry receives this cluster's exports and endpoints.
	Registry registry.Publisher
	// View is the clusterset as the registry watch delivers it: the source of
	// the Conflict condition, and of what this cluster already published.
	View *clusterset.View
	// ClusterID is this cluster's id, as the registry knows it.
	ClusterID string
	// Recorder records Warning events on ServiceExports; nil records none.
	Recorder record.EventRecorder

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
}

// acted is what the events of one ServiceExport reported, as its status
// says (actedFromStatus).
type acted struct {
	// conflict is the Conflict reason while it is True, else "".
	conflict string
	// failure is the message of the last registry failure, "" after a
	// success.
	failure string
}

// Reconcile publishes or withdraws this cluster's export of the Service named
// by req and updates the ServiceExport's conditions.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	key := registry.ServiceKey{Namespace: req.Namespace, Name: req.Name}
	log := ctrl.LoggerFrom(ctx).WithValues("service", klog.KRef(req.Namespace, req.Name))
	ctx = ctrl.LoggerInto(ctx, log)

	se := &mcsv1beta1.ServiceExport{}
	if err := r.Client.Get(ctx, req.NamespacedName, se); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.NamespacedName)
			return ctrl.Result{}, r.withdrawGone(ctx, key)
		}
		return ctrl.Result{}, fmt.Errorf("get ServiceExport: %w", err)
	}
	// The reconcile starts from the status this controller last wrote, if
	// the cache does not show it yet (the events compare with it); the
	// status patch's base is the cache's.
	cached := se.Status.DeepCopy()
	se.Status = patch.Known(&r.written, se.UID, se.Status)

	if !se.DeletionTimestamp.IsZero() {
		r.metrics.Forget(req.NamespacedName)
		return ctrl.Result{}, r.reconcileDelete(ctx, se, key)
	}

	// The finalizer is written while the export is published, not before:
	// importers need not wait for it. Until it is in place the export is
	// unguarded, and a ServiceExport deleted meanwhile is withdrawn when
	// its deletion is seen.
	var fin *mcsv1beta1.ServiceExport
	if !controllerutil.ContainsFinalizer(se, Finalizer) || controllerutil.ContainsFinalizer(se, wellknown.AWSExportFinalizer) {
		r.setUnguarded(key, !controllerutil.ContainsFinalizer(se, Finalizer))
		fin = se.DeepCopy()
	}
	before := se.DeepCopy()
	_, finErr, _, err := parallel.Both(
		func() (struct{}, error) {
			if fin == nil {
				return struct{}{}, nil
			}
			return struct{}{}, r.addFinalizer(ctx, fin)
		},
		func() (struct{}, error) { return struct{}{}, r.reconcileNormal(ctx, se, key) })
	switch {
	case apierrors.IsNotFound(finErr):
		// Deleted while it was being published.
		r.forget(req.NamespacedName)
		return ctrl.Result{}, r.withdrawGone(ctx, key)
	case finErr != nil:
		// The status waits for the finalizer: the retry writes both.
		return ctrl.Result{}, errors.Join(err, finErr)
	}
	r.setUnguarded(key, false)
	before.Status = *cached
	recheck, perr := r.patchStatus(ctx, before, se)
	r.metrics.Set(req.NamespacedName, exportState(se.Status.Conditions))
	return ctrl.Result{RequeueAfter: recheck}, errors.Join(err, perr)
}

func (r *Reconciler) reconcileNormal(ctx context.Context, se *mcsv1beta1.ServiceExport, key registry.ServiceKey) error {
	svc := &corev1.Service{}
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(se), svc); err != nil {
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("get Service: %w", err)
		}
		svc = nil
	}
	if !r.validate(se, svc) {
		return r.withdraw(ctx, se, key)
	}
	if err := r.publish(ctx, se, svc, key); err != nil {
		if errors.Is(err, errRefused) {
			return nil
		}
		return err
	}
	r.registrySucceeded(se)
	r.updateConflict(se, key)
	return nil
}

// validate sets the Valid condition and reports whether svc can be exported.
func (r *Reconciler) validate(se *mcsv1beta1.ServiceExport, svc *corev1.Service) bool {
	switch {
	case svc == nil:
		setCondition(se, mcsv1beta1.ServiceExportConditionValid, metav1.ConditionFalse, mcsv1beta1.ServiceExportReasonNoService,
			fmt.Sprintf("Service %q not found in namespace %q", se.Name, se.Namespace))
		setCondition(se, mcsv1beta1.ServiceExportConditionReady, metav1.ConditionFalse, mcsv1beta1.ServiceExportReasonPending,
			fmt.Sprintf("waiting for Service %q", se.Name))
		return false
	case svc.Spec.Type == corev1.ServiceTypeExternalName:
		setCondition(se, mcsv1beta1.ServiceExportConditionValid, metav1.ConditionFalse, mcsv1beta1.ServiceExportReasonInvalidServiceType,
			fmt.Sprintf("Service %q has type ExternalName, which cannot be exported", se.Name))
		setCondition(se, mcsv1beta1.ServiceExportConditionReady, metav1.ConditionFalse, mcsv1beta1.ServiceExportReasonPending,
			fmt.Sprintf("waiting for Service %q to have a type other than ExternalName", se.Name))
		return false
	}
	setCondition(se, mcsv1beta1.ServiceExportConditionValid, metav1.ConditionTrue, mcsv1beta1.ServiceExportReasonValid,
		fmt.Sprintf("Service %q can be exported", se.Name))
	return true
}

// withdraw removes this cluster's records of a Service that cannot be
// exported. The Ready condition validate set stands unless the registry
// fails; Conflict no longer applies and is removed.
func (r *Reconciler) withdraw(ctx context.Context, se *mcsv1beta1.ServiceExport, key registry.ServiceKey) error {
	conditions.Remove(&se.Status.Conditions, string(mcsv1beta1.ServiceExportConditionConflict))
	r.actConflict(se, "")
	if r.withdrawn(key) {
		r.registrySucceeded(se)
		return nil
	}
	if err := r.Registry.DeleteExport(ctx, key); err != nil {
		return r.registryFailed(se, fmt.Errorf("withdraw export: %w", err))
	}
	r.registrySucceeded(se)
	ctrl.LoggerFrom(ctx).Info("Withdrew export")
	return nil
}

// publish writes this cluster's export and endpoints of svc and sets Ready.
func (r *Reconciler) publish(ctx context.Context, se *mcsv1beta1.ServiceExport, svc *corev1.Service, key registry.ServiceKey) error {
	log := ctrl.LoggerFrom(ctx)
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
	spec := serviceSpec(svc, se)
	groups := endpointGroups(list.Items)
	if err := errors.Join(
		registry.ValidateExport(registry.Export{Cluster: r.ClusterID, Service: key, Spec: spec}),
		registry.ValidateGroups(groups),
	); err != nil {
		return r.refuse(ctx, se, key, err)
	}

	// A new or changed export is written with its endpoints, in one write
	// where the backend can: importers see the export whole, at once.
	own, ownEndpoints := r.published(key)
	exportStale := own == nil || !equality.Semantic.DeepEqual(own.Spec, spec)
	endpointsStale := ownEndpoints == nil || !equality.Semantic.DeepEqual(ownEndpoints.Groups, groups)
	var err error
	switch {
	case exportStale:
		err = r.Registry.Publish(ctx, key, spec, groups)
	case endpointsStale:
		err = r.Registry.PutEndpoints(ctx, key, groups)
	}
	if err != nil {
		if _, ok := errors.AsType[*registry.RejectedError](err); ok {
			return r.refuse(ctx, se, key, err)
		}
		return r.registryFailed(se, fmt.Errorf("publish: %w", err))
	}
	switch {
	case exportStale:
		log.Info("Published export", "type", spec.Type, "ports", len(spec.Ports), "groups", len(groups))
	case endpointsStale:
		log.V(1).Info("Published endpoints", "groups", len(groups))
	}
	setCondition(se, mcsv1beta1.ServiceExportConditionReady, metav1.ConditionTrue, mcsv1beta1.ServiceExportReasonExported,
		fmt.Sprintf("exported to the registry as cluster %q", r.ClusterID))
	return nil
}

// Ready=False reasons of an export whose records every cluster would refuse.
const (
	// ReasonTooManyEndpoints: the Service has more than registry.MaxEndpoints
	// endpoints.
	ReasonTooManyEndpoints mcsv1beta1.ServiceExportConditionReason = "TooManyEndpoints"
	// ReasonRecordTooLarge: a record is larger than registry.MaxRecordBytes.
	ReasonRecordTooLarge mcsv1beta1.ServiceExportConditionReason = "RecordTooLarge"
	// ReasonInvalidRecord: the Service or ServiceExport holds what
	// importing clusters would refuse (an exported label key that is not a
	// valid label key, say).
	ReasonInvalidRecord mcsv1beta1.ServiceExportConditionReason = "InvalidRecord"
)

// EventReasonRefused: the export's records would be refused by every
// cluster, and were withdrawn.
const EventReasonRefused = "ExportRefused"

// refuse handles an export whose records every importing cluster would
// refuse (err, see registry.ValidateExport): it withdraws this cluster's
// records of key, as the importers would drop them, and sets Ready=False
// with why. The request is not retried: a change of the Service or its
// endpoints brings it back.
func (r *Reconciler) refuse(ctx context.Context, se *mcsv1beta1.ServiceExport, key registry.ServiceKey, err error) error {
	reason := ReasonInvalidRecord
	if re, ok := errors.AsType[*registry.RejectedError](err); ok {
		switch re.Reason {
		case registry.RejectTooManyEndpoints:
			reason = ReasonTooManyEndpoints
		case registry.RejectTooLarge:
			reason = ReasonRecordTooLarge
		}
	}
	msg := fmt.Sprintf("not exported: every cluster would refuse this cluster's records (%v); limits: %d endpoints, %d bytes per record",
		err, registry.MaxEndpoints, registry.MaxRecordBytes)
	ctrl.LoggerFrom(ctx).Info("Export refused, withdrawing it", "reason", reason, "detail", err.Error())
	conditions.Remove(&se.Status.Conditions, string(mcsv1beta1.ServiceExportConditionConflict))
	r.actConflict(se, "")
	if r.actFailure(se, msg) {
		r.warn(se, EventReasonRefused, msg)
	}
	setCondition(se, mcsv1beta1.ServiceExportConditionReady, metav1.ConditionFalse, reason, msg)
	if r.withdrawn(key) {
		return errRefused
	}
	if err := r.Registry.DeleteExport(ctx, key); err != nil {
		err = fmt.Errorf("withdraw refused export: %w", err)
		ctrl.LoggerFrom(ctx).Error(err, "Withdrawing a refused export failed")
		return err
	}
	return errRefused
}

// errRefused: the export was refused and withdrawn; Ready says why.
var errRefused = errors.New("export refused")

// updateConflict sets the Conflict condition from every cluster's export of
// key, once the view holds this cluster's own export; until then it leaves
// the condition as it is.
func (r *Reconciler) updateConflict(se *mcsv1beta1.ServiceExport, key registry.ServiceKey) {
	if r.View == nil {
		return
	}
	exports := r.View.Exports(key)
	if !slices.ContainsFunc(exports, func(e registry.Export) bool { return e.Cluster == r.ClusterID }) {
		return
	}
	c := merge.Merge(exports).Conflict.Condition()
	var reason string
	if c.Status == metav1.ConditionTrue {
		reason = c.Reason
	}
	// Before the condition is set: actConflict may compare with it.
	if r.actConflict(se, reason) {
		r.warn(se, EventReasonConflict, c.Message)
	}
	conditions.Set(&se.Status.Conditions, se.Generation, c)
}

// published returns what the view holds of this cluster's records of key, or
// nils. The view may lag behind the registry; every change it sees brings
// the key back here, so skipping a write that the view shows as done
// converges all the same.
func (r *Reconciler) published(key registry.ServiceKey) (*registry.Export, *registry.Endpoints) {
	if r.View == nil {
		return nil, nil
	}
	var export *registry.Export
	for _, e := range r.View.Exports(key) {
		if e.Cluster == r.ClusterID && e.WrittenBy == "" {
			// (An export another controller wrote for this cluster, the
			// AWS Cloud Map MCS controller that ran here before mcsd, is
			// not mcsd's: it is published over.)
			export = &e
			break
		}
	}
	var endpoints *registry.Endpoints
	if e, ok := r.View.Endpoints(key)[r.ClusterID]; ok {
		endpoints = &e
	}
	return export, endpoints
}

// withdrawn reports whether the synced view holds no record of key from this
// cluster.
func (r *Reconciler) withdrawn(key registry.ServiceKey) bool {
	if r.View == nil || !r.View.HasSynced() {
		return false
	}
	export, endpoints := r.published(key)
	if export != nil || endpoints != nil {
		return false
	}
	// Records the View refused (written under older rules, say) are still
	// in the registry: they are withdrawn too.
	return !slices.ContainsFunc(r.View.Rejected(key), func(rj registry.Rejection) bool { return rj.Record.Cluster == r.ClusterID })
}

// registryFailed sets Ready=False Failed, records a Warning event and returns
// err, so that the request is retried with backoff.
func (r *Reconciler) registryFailed(se *mcsv1beta1.ServiceExport, err error) error {
	msg := fmt.Sprintf("registry: %v", err)
	// Before the condition is set: actFailure may compare with it.
	if r.actFailure(se, msg) {
		r.warn(se, EventReasonRegistryFailed, msg)
	}
	setCondition(se, mcsv1beta1.ServiceExportConditionReady, metav1.ConditionFalse, mcsv1beta1.ServiceExportReasonFailed, msg)
	return err
}

// registrySucceeded records that the registry took this cluster's records
// of se: a later failure is a new one.
func (r *Reconciler) registrySucceeded(se *mcsv1beta1.ServiceExport) {
	r.actFailure(se, "")
}

func (r *Reconciler) reconcileDelete(ctx context.Context, se *mcsv1beta1.ServiceExport, key registry.ServiceKey) error {
	if !controllerutil.ContainsFinalizer(se, Finalizer) {
		// Deleted (another party's finalizer keeps it) before mcsd's
		// finalizer was added, perhaps after it was published.
		if err := r.withdrawGone(ctx, key); err != nil {
			return err
		}
		return r.releaseAWSFinalizer(ctx, se)
	}
	if err := r.Registry.DeleteExport(ctx, key); err != nil {
		err = fmt.Errorf("withdraw export: %w", err)
		if msg := fmt.Sprintf("registry: %v", err); r.actFailure(se, msg) {
			r.warn(se, EventReasonRegistryFailed, msg)
		}
		return err
	}
	ctrl.LoggerFrom(ctx).Info("Withdrew export of deleted ServiceExport")
	base := se.DeepCopy()
	controllerutil.RemoveFinalizer(se, Finalizer)
	controllerutil.RemoveFinalizer(se, wellknown.AWSExportFinalizer)
	if err := r.Client.Patch(ctx, se, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("remove finalizer: %w", err))
	}
	r.forget(client.ObjectKeyFromObject(se))
	return nil
}

// addFinalizer adds mcsd's finalizer to se, which it modifies.
func (r *Reconciler) addFinalizer(ctx context.Context, se *mcsv1beta1.ServiceExport) error {
	base := se.DeepCopy()
	controllerutil.AddFinalizer(se, Finalizer)
	// The AWS Cloud Map MCS controller's, left by a cluster that ran it: mcsd
	// withdraws what that controller wrote for this cluster with its own
	// records (the backend took them over), and its finalizer would keep
	// the ServiceExport for ever once it is deleted.
	controllerutil.RemoveFinalizer(se, wellknown.AWSExportFinalizer)
	if err := r.Client.Patch(ctx, se, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("add finalizer: %w", err)
	}
	return nil
}

// releaseAWSFinalizer removes the AWS Cloud Map MCS controller's finalizer
// from a deleted ServiceExport whose records mcsd withdrew: that controller
// no longer runs here to remove it.
func (r *Reconciler) releaseAWSFinalizer(ctx context.Context, se *mcsv1beta1.ServiceExport) error {
	if !controllerutil.ContainsFinalizer(se, wellknown.AWSExportFinalizer) {
		return nil
	}
	base := se.DeepCopy()
	controllerutil.RemoveFinalizer(se, wellknown.AWSExportFinalizer)
	if err := r.Client.Patch(ctx, se, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("remove the AWS controller's finalizer: %w", err))
	}
	return nil
}

// patchStatus writes se's status if it differs from before's, and returns
// when to look again at a write it skipped (see patch.StatusOnce).
func (r *Reconciler) patchStatus(ctx context.Context, before, se *mcsv1beta1.ServiceExport) (time.Duration, error) {
	_, recheck, err := patch.StatusOnce(ctx, r.Client, &r.written, before, se, func(se *mcsv1beta1.ServiceExport) any { return se.Status })
	return recheck, client.IgnoreNotFound(err)
}

// actConflict records reason as the conflict of se ("" for none) and
// reports whether it is a new one to warn about (see act).
func (r *Reconciler) actConflict(se *mcsv1beta1.ServiceExport, reason string) bool {
	return r.act(se, func(a *acted) *string { return &a.conflict }, reason)
}

// actFailure records msg as the registry failure of se ("" for success) and
// reports whether it is a new one to warn about (see act).
func (r *Reconciler) actFailure(se *mcsv1beta1.ServiceExport, msg string) bool {
	return r.act(se, func(a *acted) *string { return &a.failure }, msg)
}

// act reports whether v, the field of what se's events report, is new to
// warn about: not "", and not what se's status reports already. se's status
// is the one the reconcile started from (patch.Known), with the conditions
// this reconcile set so far; callers ask before they set the condition that
// v goes into.
func (r *Reconciler) act(se *mcsv1beta1.ServiceExport, field func(*acted) *string, v string) bool {
	last := actedFromStatus(se)
	return v != "" && v != *field(&last)
}

// actedFromStatus is what se's stored conditions say was last reported.
func actedFromStatus(se *mcsv1beta1.ServiceExport) acted {
	var a acted
	if c := conditions.Get(se.Status.Conditions, string(mcsv1beta1.ServiceExportConditionConflict)); c != nil && c.Status == metav1.ConditionTrue {
		a.conflict = c.Reason
	}
	if c := conditions.Get(se.Status.Conditions, string(mcsv1beta1.ServiceExportConditionReady)); c != nil && c.Status == metav1.ConditionFalse {
		switch mcsv1beta1.ServiceExportConditionReason(c.Reason) {
		case mcsv1beta1.ServiceExportReasonFailed, ReasonTooManyEndpoints, ReasonRecordTooLarge, ReasonInvalidRecord:
			a.failure = c.Message
		}
	}
	return a
}

// setUnguarded records whether key may be published while its
// ServiceExport has no finalizer yet.
func (r *Reconciler) setUnguarded(key registry.ServiceKey, unguarded bool) {
	r.unguardedMu.Lock()
	defer r.unguardedMu.Unlock()
	if !unguarded {
		delete(r.unguarded, key)
		return
	}
	if r.unguarded == nil {
		r.unguarded = map[registry.ServiceKey]bool{}
	}
	r.unguarded[key] = true
}

// withdrawGone withdraws this cluster's records of key, whose ServiceExport
// is gone or being deleted without mcsd's finalizer: those published while
// the finalizer was being added (the view may not show them yet), and those
// the synced view shows (published by an earlier run whose finalizer never
// landed). A Service with neither costs the registry nothing.
func (r *Reconciler) withdrawGone(ctx context.Context, key registry.ServiceKey) error {
	r.unguardedMu.Lock()
	unguarded := r.unguarded[key]
	r.unguardedMu.Unlock()
	synced := r.View != nil && r.View.HasSynced()
	if !unguarded && (!synced || r.withdrawn(key)) {
		return nil
	}
	if err := r.Registry.DeleteExport(ctx, key); err != nil {
		return fmt.Errorf("withdraw export of a ServiceExport deleted without mcsd's finalizer: %w", err)
	}
	ctrl.LoggerFrom(ctx).Info("Withdrew export of a ServiceExport deleted without mcsd's finalizer")
	r.setUnguarded(key, false)
	return nil
}

// forget drops what the controller keeps about a ServiceExport that is gone.
func (r *Reconciler) forget(key types.NamespacedName) {
	r.metrics.Forget(key)
}

// exportState is what the metrics count of a ServiceExport's conditions.
func exportState(conds []metav1.Condition) metrics.ExportState {
	st := metrics.ExportState{
		Valid: conditions.IsTrue(conds, string(mcsv1beta1.ServiceExportConditionValid)),
		Ready: metrics.ExportReadyPending,
	}
	if c := conditions.Get(conds, string(mcsv1beta1.ServiceExportConditionReady)); c != nil {
		switch {
		case c.Status == metav1.ConditionTrue:
			st.Ready = metrics.ExportReadyExported
		case c.Reason == string(mcsv1beta1.ServiceExportReasonFailed):
			st.Ready = metrics.ExportReadyFailed
		}
	}
	if c := conditions.Get(conds, string(mcsv1beta1.ServiceExportConditionConflict)); c != nil && c.Status == metav1.ConditionTrue {
		st.Conflicts = strings.Split(c.Reason, ",")
	}
	return st
}

func (r *Reconciler) warn(se *mcsv1beta1.ServiceExport, reason, msg string) {
	if r.Recorder != nil {
		r.Recorder.Event(se, corev1.EventTypeWarning, reason, msg)
	}
}

func setCondition(se *mcsv1beta1.ServiceExport, t mcsv1beta1.ServiceExportConditionType, s metav1.ConditionStatus,
	reason mcsv1beta1.ServiceExportConditionReason, msg string) {
	conditions.Set(&se.Status.Conditions, se.Generation, metav1.Condition{
		Type:    string(t),
		Status:  s,
		Reason:  string(reason),
		Message: msg,
	})
}
