package export

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/conditions"
	"github.com/mcsd-io/mcsd/internal/merge"
	"github.com/mcsd-io/mcsd/internal/metrics"
	"github.com/mcsd-io/mcsd/pkg/registry"
)

// acted is what the events of one ServiceExport reported, as its status
// says (actedFromStatus).
type acted struct {
	// conflict is the Conflict reason while it is True, else "".
	conflict string
	// failure is the message of the last registry failure, "" after a
	// success.
	failure string
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

// updateConflict sets the Conflict condition from every cluster's export of
// key, once the view holds this cluster's own export as spec (the one just
// published: the condition is stamped with se's generation) and every
// other cluster's records of key's namespace; until then it leaves the
// condition as it is, and the View's change brings the export back.
func (r *Reconciler) updateConflict(se *mcsv1beta1.ServiceExport, key registry.ServiceKey, spec registry.ServiceSpec) {
	if r.View == nil || !r.View.HasSyncedFor(key.Namespace) {
		return
	}
	exports := r.View.Exports(key)
	if !slices.ContainsFunc(exports, func(e registry.Export) bool {
		return e.Cluster == r.ClusterID && equality.Semantic.DeepEqual(e.Spec, spec)
	}) {
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

// lapsed returns why this cluster's records may have lapsed in the
// registry, nil when they have not or the backend cannot tell.
func (r *Reconciler) lapsed() error {
	if r.Lapses == nil {
		return nil
	}
	return r.Lapses.Lapsed()
}

// setLapsed sets Ready for records that may have lapsed for why: Unknown
// (the registry may still hold them: it may be down itself, and every
// importer keep them as it last read them), or False when another cluster
// took this cluster's id. No event: the backend logs the lapse once, and it
// concerns every export alike.
func setLapsed(se *mcsv1beta1.ServiceExport, why error) {
	if errors.Is(why, registry.ErrClusterIDInUse) {
		setCondition(se, mcsv1beta1.ServiceExportConditionReady, metav1.ConditionFalse, mcsv1beta1.ServiceExportReasonFailed,
			fmt.Sprintf("registry: %v", why))
		return
	}
	setCondition(se, mcsv1beta1.ServiceExportConditionReady, metav1.ConditionUnknown, mcsv1beta1.ServiceExportReasonPending,
		fmt.Sprintf("registry: %v; written again once it can be", why))
}

// registrySucceeded records that the registry took this cluster's records
// of se: a later failure is a new one.
func (r *Reconciler) registrySucceeded(se *mcsv1beta1.ServiceExport) {
	r.actFailure(se, "")
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
		case c.Status == metav1.ConditionUnknown:
			st.Ready = metrics.ExportReadyUnknown
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
