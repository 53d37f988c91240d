package export

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/clusterset"
	"github.com/mcsd-io/mcsd/internal/conditions"
	"github.com/mcsd-io/mcsd/pkg/registry"
)

// withdraw removes this cluster's records of a Service that cannot be
// exported. The Ready condition validate set stands unless the registry
// fails; once the records are gone, Conflict no longer applies and is
// removed (while they stay, the other clusters still see the conflict).
func (r *Reconciler) withdraw(ctx context.Context, se *mcsv1beta1.ServiceExport, key registry.ServiceKey) error {
	if !r.withdrawn(key) {
		if err := r.Registry.DeleteExport(ctx, key); err != nil {
			return r.registryFailed(se, fmt.Errorf("withdraw export: %w", err))
		}
		ctrl.LoggerFrom(ctx).Info("Withdrew export")
	}
	r.forgetLocal(key)
	r.removeConflict(se)
	r.registrySucceeded(se)
	return nil
}

// removeConflict removes the Conflict condition of an export whose records
// are withdrawn.
func (r *Reconciler) removeConflict(se *mcsv1beta1.ServiceExport) {
	conditions.Remove(&se.Status.Conditions, string(mcsv1beta1.ServiceExportConditionConflict))
	r.actConflict(se, "")
}

// publish writes this cluster's export and endpoints of the Service, as
// compute built them, where the view does not show them already, and sets
// Ready.
func (r *Reconciler) publish(ctx context.Context, s *scope) error {
	log := ctrl.LoggerFrom(ctx)
	if why := r.lapsed(); why != nil {
		// The backend writes its records again once it can; the end of
		// the lapse brings every export back (enqueueOnLapse), and this
		// one's changes meanwhile are written then.
		r.Local.Set(s.key, s.spec, s.groups)
		setLapsed(s.se, why)
		return errUnreachable
	}
	if err := r.unreachable(); err != nil {
		// No write is tried: it would wait out the registry's request
		// timeout, and this Service's next changes behind it. This
		// cluster's imports take its endpoints all the same, and the
		// registry's return brings every export back (changeToExport).
		r.Local.Set(s.key, s.spec, s.groups)
		_ = r.registryFailed(s.se, err)
		return errUnreachable
	}
	// A new or changed export is written with its endpoints, in one write
	// where the backend can: importers see the export whole, at once.
	own, ownEndpoints := r.published(s.key)
	exportStale := own == nil || !equality.Semantic.DeepEqual(own.Spec, s.spec)
	endpointsStale := ownEndpoints == nil || !equality.Semantic.DeepEqual(ownEndpoints.Groups, s.groups)
	var err error
	switch {
	case exportStale:
		err = r.Registry.Publish(ctx, s.key, s.spec, s.groups)
	case endpointsStale:
		err = r.Registry.PutEndpoints(ctx, s.key, s.groups)
	}
	if err != nil && isRejected(err) {
		return err // the caller refuses the export, or withholds its endpoints
	}
	// This cluster's imports take its endpoints from here, whether or not
	// the registry could be written now.
	r.Local.Set(s.key, s.spec, s.groups)
	if err != nil {
		return r.registryFailed(s.se, fmt.Errorf("publish: %w", err))
	}
	switch {
	case exportStale:
		log.Info("Published export", "type", s.spec.Type, "ports", len(s.spec.Ports), "groups", len(s.groups))
	case endpointsStale:
		log.V(1).Info("Published endpoints", "groups", len(s.groups))
	}
	setCondition(s.se, mcsv1beta1.ServiceExportConditionReady, metav1.ConditionTrue, mcsv1beta1.ServiceExportReasonExported,
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
	reason := refusalReason(err)
	msg := fmt.Sprintf("not exported: every cluster would refuse this cluster's records (%v); limits: %d endpoints, %d bytes per record",
		err, registry.MaxEndpoints, registry.MaxRecordBytes)
	ctrl.LoggerFrom(ctx).Info("Export refused, withdrawing it", "reason", reason, "detail", err.Error())
	if r.actFailure(se, msg) {
		r.warn(se, EventReasonRefused, msg)
	}
	setCondition(se, mcsv1beta1.ServiceExportConditionReady, metav1.ConditionFalse, reason, msg)
	if !r.withdrawn(key) {
		if err := r.Registry.DeleteExport(ctx, key); err != nil {
			err = fmt.Errorf("withdraw refused export: %w", err)
			ctrl.LoggerFrom(ctx).Error(err, "Withdrawing a refused export failed")
			return err
		}
	}
	r.forgetLocal(key)
	r.removeConflict(se)
	return errRefused
}

// isRejected reports whether err is the registry's refusal of a record.
func isRejected(err error) bool {
	_, ok := errors.AsType[*registry.RejectedError](err)
	return ok
}

// refusalReason is the Ready=False reason of err, a refusal.
func refusalReason(err error) mcsv1beta1.ServiceExportConditionReason {
	if re, ok := errors.AsType[*registry.RejectedError](err); ok {
		switch re.Reason {
		case registry.RejectTooManyEndpoints:
			return ReasonTooManyEndpoints
		case registry.RejectTooLarge:
			return ReasonRecordTooLarge
		}
	}
	return ReasonInvalidRecord
}

// withholdEndpoints handles an export whose endpoints alone every
// importing cluster would refuse (more than registry.MaxEndpoints, say,
// for the surge of a rollout): the export stands, with no endpoints of
// this cluster, so that it keeps its precedence (the registry's order of
// first storing it), and the import its type and ports, while the cause
// lasts; Ready=False says why. Withdrawing it would make it a new export
// once the cause went, younger than every other cluster's.
func (r *Reconciler) withholdEndpoints(ctx context.Context, s *scope) error {
	reason := refusalReason(s.invalidEndpoints)
	msg := fmt.Sprintf("endpoints not exported: every cluster would refuse them (%v); limits: %d endpoints, %d bytes per record; the export stands, with no endpoints of this cluster",
		s.invalidEndpoints, registry.MaxEndpoints, registry.MaxRecordBytes)
	// Before publish sets Ready: actFailure compares with the status.
	news := r.actFailure(s.se, msg)
	s.groups = nil
	if err := r.publish(ctx, s); err != nil {
		if errors.Is(err, errUnreachable) {
			return nil
		}
		if isRejected(err) {
			// The export itself refused.
			return ignoreRefused(r.refuse(ctx, s.se, s.key, err))
		}
		return err
	}
	if news {
		ctrl.LoggerFrom(ctx).Info("Endpoints refused, withholding them", "reason", reason, "detail", s.invalidEndpoints.Error())
		r.warn(s.se, EventReasonRefused, msg)
	}
	setCondition(s.se, mcsv1beta1.ServiceExportConditionReady, metav1.ConditionFalse, reason, msg)
	r.updateConflict(s.se, s.key, s.spec)
	return nil
}

// errRefused: the export was refused and withdrawn; Ready says why.
var errRefused = errors.New("export refused")

// errUnreachable: the registry cannot be read, or this cluster's records
// may have lapsed there, and nothing was written to it; Ready says why. Not
// retried: the View's return, or the lapse's end, brings every export back.
var errUnreachable = errors.New("registry unreachable")

// published returns what the view holds of this cluster's records of key, or
// nils. The view may lag behind the registry; every change it sees brings
// the key back here, so skipping a write that the view shows as done
// converges all the same.
func (r *Reconciler) published(key registry.ServiceKey) (*registry.Export, *registry.Endpoints) {
	if r.View == nil {
		return nil, nil
	}
	return ownRecords(r.View.Service(key), r.ClusterID)
}

// ownRecords returns cluster's records in svc, or nils.
func ownRecords(svc clusterset.Service, cluster string) (*registry.Export, *registry.Endpoints) {
	var export *registry.Export
	for _, e := range svc.Exports {
		if e.Cluster == cluster && e.WrittenBy == "" {
			// (An export another controller wrote for this cluster, the
			// AWS Cloud Map MCS controller that ran here before mcsd, is
			// not mcsd's: it is published over.)
			export = &e
			break
		}
	}
	var endpoints *registry.Endpoints
	if e, ok := svc.Endpoints[cluster]; ok {
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
	// One read of the View: a refusal that ends between two reads would
	// show the record in neither.
	svc := r.View.Service(key)
	export, endpoints := ownRecords(svc, r.ClusterID)
	if export != nil || endpoints != nil {
		return false
	}
	// Records the View refused (written under older rules, say) are still
	// in the registry: they are withdrawn too.
	return !slices.ContainsFunc(svc.Rejected, func(rj registry.Rejection) bool { return rj.Record.Cluster == r.ClusterID })
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
		r.forgetLocal(key)
		return nil
	}
	if err := r.Registry.DeleteExport(ctx, key); err != nil {
		return fmt.Errorf("withdraw export of a ServiceExport deleted without mcsd's finalizer: %w", err)
	}
	ctrl.LoggerFrom(ctx).Info("Withdrew export of a ServiceExport deleted without mcsd's finalizer")
	r.setUnguarded(key, false)
	r.forgetLocal(key)
	return nil
}

// forgetLocal drops this cluster's endpoints of key from Local once its
// records are withdrawn (or were never written): until then the View still
// shows its export, and this cluster's imports keep its endpoints as last
// built, not the registry's older ones.
func (r *Reconciler) forgetLocal(key registry.ServiceKey) {
	r.Local.Delete(key)
}
