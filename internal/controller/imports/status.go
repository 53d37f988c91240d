package imports

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/conditions"
	"github.com/mcsd-io/mcsd/internal/merge"
	"github.com/mcsd-io/mcsd/internal/metrics"
	"github.com/mcsd-io/mcsd/internal/topology"
	"github.com/mcsd-io/mcsd/pkg/registry"
)

// setStatus fills in the ServiceImport's status from what the phases found:
// the exporting clusters, endpointSliceObjects Present (mcsd writes the
// import's EndpointSlices, headless or not), Ready, and no
// RegistryReachable condition (the registry was read to get here).
func (r *Reconciler) setStatus(s *scope) {
	si := s.si
	clusters := make([]mcsv1beta1.ClusterStatus, len(s.res.Clusters))
	for i, c := range s.res.Clusters {
		clusters[i] = mcsv1beta1.ClusterStatus{Cluster: c}
	}
	si.Status.Clusters = clusters
	si.Status.EndpointSliceObjects = mcsv1beta1.EndpointSliceObjectsPresent
	conditions.Set(&si.Status.Conditions, si.Generation, readyCondition(s))
	conditions.Remove(&si.Status.Conditions, conditions.RegistryReachable)
	conditions.Set(&si.Status.Conditions, si.Generation, endpointsCondition(s.res, s.endpoints))
	if c := s.hints.Condition; c != nil {
		conditions.Set(&si.Status.Conditions, si.Generation, *c)
	} else {
		conditions.Remove(&si.Status.Conditions, topology.ConditionHints)
	}
	if c, ok := recordsCondition(s.rejected); ok {
		conditions.Set(&si.Status.Conditions, si.Generation, c)
	} else {
		conditions.Remove(&si.Status.Conditions, conditions.RecordsAccepted)
	}
}

// endpointsCondition is EndpointsReady: True when every exporting cluster
// has a ready endpoint serving the import, else False naming those without
// (no ready endpoint, or none of the import's ports as the import defines
// them). Its message changes only when those sets do, so endpoint churn
// writes no status.
func endpointsCondition(res merge.Result, endpoints map[string]registry.Endpoints) metav1.Condition {
	var idle, portless []string
	for _, c := range res.Clusters {
		if len(res.Spec.Ports) > 0 && len(res.Served[c]) == 0 {
			portless = append(portless, c)
			continue
		}
		ready := false
		for _, g := range endpoints[c].Groups {
			ready = ready || slices.ContainsFunc(g.Endpoints, func(e registry.Endpoint) bool { return e.Ready })
		}
		if !ready {
			idle = append(idle, c)
		}
	}
	if len(idle)+len(portless) == 0 {
		return metav1.Condition{Type: conditions.EndpointsReady, Status: metav1.ConditionTrue, Reason: conditions.ReasonAllClustersReady,
			Message: "Every exporting cluster has a ready endpoint"}
	}
	clusters := func(cs []string, one, many string) string {
		if len(cs) == 1 {
			return "cluster " + cs[0] + " " + one
		}
		return "clusters " + strings.Join(cs, ", ") + " " + many
	}
	var parts []string
	if len(idle) > 0 {
		parts = append(parts, "exporting "+clusters(idle, "has", "have")+" no ready endpoint (pods not ready, or scaled to zero)")
	}
	if len(portless) > 0 {
		parts = append(parts, "exporting "+clusters(portless, "serves", "serve")+" none of the import's ports as the import defines them (see Conflict on the ServiceExports)")
	}
	msg := "The " + strings.Join(parts, "; the ")
	if len(idle)+len(portless) == len(res.Clusters) {
		msg += ": no cluster serves the import, requests to it fail"
	} else {
		msg += ": traffic goes to the other clusters' endpoints"
	}
	return metav1.Condition{Type: conditions.EndpointsReady, Status: metav1.ConditionFalse, Reason: conditions.ReasonClustersWithoutEndpoints,
		Message: conditions.Cap(msg, 1024)}
}

// recordsCondition is RecordsAccepted=False naming every refused cluster
// and why, or false when no record is refused.
func recordsCondition(rejected []registry.Rejection) (metav1.Condition, bool) {
	if len(rejected) == 0 {
		return metav1.Condition{}, false
	}
	var b strings.Builder
	b.WriteString("Not imported from ")
	for i, r := range rejected {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "cluster %s: its %s record was refused (%s: %s)", r.Record.Cluster, r.Kind, r.Reason, conditions.Cap(r.Message, 200))
	}
	return metav1.Condition{
		Type:    conditions.RecordsAccepted,
		Status:  metav1.ConditionFalse,
		Reason:  conditions.ReasonRecordsRejected,
		Message: conditions.Cap(b.String(), 1024),
	}, true
}

// eventRejected records a Warning event on si when its RecordsAccepted
// condition turned False or names other refusals than in old, the stored
// conditions.
func (r *Reconciler) eventRejected(si *mcsv1beta1.ServiceImport, old []metav1.Condition) {
	c := conditions.Get(si.Status.Conditions, conditions.RecordsAccepted)
	if c == nil {
		return
	}
	if o := conditions.Get(old, conditions.RecordsAccepted); o != nil && o.Message == c.Message {
		return
	}
	r.eventf(si, corev1.EventTypeWarning, eventRecordsRejected, "%s", c.Message)
}

// readyCondition is the mcs-api Ready condition of s's import. The message
// says what the user needs to know, with no value that changes on its own
// (so that an unchanged import is not written again).
func readyCondition(s *scope) metav1.Condition {
	cond := func(status metav1.ConditionStatus, reason mcsv1beta1.ServiceImportConditionReason, format string, args ...any) metav1.Condition {
		return metav1.Condition{
			Type:    string(mcsv1beta1.ServiceImportConditionReady),
			Status:  status,
			Reason:  string(reason),
			Message: conditions.Cap(fmt.Sprintf(format, args...), 1024),
		}
	}
	const (
		pending     = mcsv1beta1.ServiceImportReasonPending
		unsupported = mcsv1beta1.ServiceImportReasonIPFamilyNotSupported
	)
	if s.res.Spec.Type == mcsv1beta1.Headless {
		return cond(metav1.ConditionTrue, mcsv1beta1.ServiceImportReasonReady,
			"Headless import: DNS answers with the endpoints of the exporting clusters")
	}
	switch {
	case s.foreignSvc != nil:
		return cond(metav1.ConditionFalse, conditions.ReasonDerivedServiceConflict,
			"Service %s, which this import needs for its cluster IPs, exists and was not created by mcsd; delete or rename it", s.derivedName)
	case len(s.unsupported) > 0:
		return cond(metav1.ConditionFalse, unsupported,
			"This cluster supports none of the import's IP families (%s): the import has no cluster IP here", joinFamilies(s.unsupported))
	case len(s.res.Spec.Ports) == 0:
		return cond(metav1.ConditionFalse, pending, "The import has no ports: a ClusterSetIP import needs at least one")
	case s.svc == nil && s.svcErr != nil:
		return cond(metav1.ConditionFalse, pending, "Creating the derived Service %s failed: %v", s.derivedName, s.svcErr)
	case s.svc == nil:
		return cond(metav1.ConditionFalse, pending, "Waiting for the derived Service %s to be created", s.derivedName)
	case len(s.si.Spec.IPs) == 0:
		return cond(metav1.ConditionFalse, pending, "Waiting for the derived Service %s to be given cluster IPs", s.derivedName)
	}
	if missing := missingFamilies(s.svc); len(missing) > 0 {
		return cond(metav1.ConditionFalse, unsupported,
			"This cluster does not support %s Services: the import has %s cluster IP %s only (derived Service %s)",
			joinFamilies(missing), joinFamilies(s.si.Spec.IPFamilies), strings.Join(s.si.Spec.IPs, ", "), s.derivedName)
	}
	return cond(metav1.ConditionTrue, mcsv1beta1.ServiceImportReasonReady,
		"Cluster IP %s from the derived Service %s", strings.Join(s.si.Spec.IPs, ", "), s.derivedName)
}

// eventClusters records an event on si when its source clusters are no
// longer those of old, the status the reconcile started from (patch.Known:
// a cache that does not show the last status patch yet brings no second
// event for one change). A new import gets none: its
// status lists its clusters, the log records its creation, and an Event
// would be one more API write for every import in every cluster (a sixth of
// a clusterset's writes when it starts).
//
// A cluster that joins or leaves changes every import it exports to at
// once: the events are rate-limited (clusterEventsBurst at once, then
// clusterEventsQPS a second), so that it costs the API server the slices
// and statuses that changed, not as many events again. The status of each
// import still lists its clusters; a suppressed event is logged at V(1).
func (r *Reconciler) eventClusters(ctx context.Context, si *mcsv1beta1.ServiceImport, old []mcsv1beta1.ClusterStatus) {
	ids := func(cs []mcsv1beta1.ClusterStatus) []string {
		out := make([]string, len(cs))
		for i, c := range cs {
			out[i] = c.Cluster
		}
		slices.Sort(out)
		return out
	}
	after, before := ids(si.Status.Clusters), ids(old)
	if len(before) == 0 || slices.Equal(before, after) {
		return
	}
	var added, removed []string
	for _, c := range after {
		if !slices.Contains(before, c) {
			added = append(added, c)
		}
	}
	for _, c := range before {
		if !slices.Contains(after, c) {
			removed = append(removed, c)
		}
	}
	msg := "Imported from clusters " + strings.Join(after, ", ")
	if len(added) > 0 {
		msg += "; added " + strings.Join(added, ", ")
	}
	if len(removed) > 0 {
		msg += "; removed " + strings.Join(removed, ", ")
	}
	if r.clusterEvents != nil && !r.clusterEvents.TryAccept() {
		ctrl.LoggerFrom(ctx).V(1).Info("Not recording a ClustersChanged event: over the rate limit", "clusters", after)
		return
	}
	r.eventf(si, corev1.EventTypeNormal, eventClustersChanged, "%s", conditions.Cap(msg, 1024))
}

// The rate limit of ClustersChanged events, per controller.
const (
	clusterEventsBurst = 25
	clusterEventsQPS   = 1
)

// hasReadyReason reports whether si (nil: none yet) is not Ready for
// reason.
func hasReadyReason(si *mcsv1beta1.ServiceImport, reason mcsv1beta1.ServiceImportConditionReason) bool {
	if si == nil {
		return false
	}
	c := conditions.Get(si.Status.Conditions, string(mcsv1beta1.ServiceImportConditionReady))
	return c != nil && c.Status != metav1.ConditionTrue && c.Reason == string(reason)
}

// importState is the state the metrics count an import in, from its Ready
// condition.
func importState(conds []metav1.Condition) metrics.ImportState {
	c := conditions.Get(conds, string(mcsv1beta1.ServiceImportConditionReady))
	switch {
	case c == nil:
		return metrics.ImportPending
	case c.Status == metav1.ConditionTrue:
		return metrics.ImportReady
	case c.Reason == string(mcsv1beta1.ServiceImportReasonIPFamilyNotSupported):
		return metrics.ImportIPFamilyNotSupported
	case c.Reason == conditions.ReasonDerivedServiceConflict:
		return metrics.ImportDerivedServiceConflict
	}
	return metrics.ImportPending
}
