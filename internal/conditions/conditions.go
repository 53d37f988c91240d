package conditions

import (
	"slices"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// typeOrder is where Set places a condition type that is not in the list yet:
// the mcs-api types in the order the API documents them. Types not listed
// here go after them, in the order they are first set.
var typeOrder = []string{
	string(mcsv1beta1.ServiceExportConditionValid),
	string(mcsv1beta1.ServiceExportConditionReady),
	string(mcsv1beta1.ServiceExportConditionConflict),
}

// rank is a type's place in typeOrder, or len(typeOrder) for other types.
func rank(t string) int {
	if i := slices.Index(typeOrder, t); i >= 0 {
		return i
	}
	return len(typeOrder)
}

// Set puts c into conds with ObservedGeneration generation (the generation
// of the object whose status holds conds), and reports whether anything
// changed. It is meta.SetStatusCondition: LastTransitionTime moves only when
// the status does (to c's, or now when that is zero). An existing condition
// keeps its place; a new one is inserted by type (Valid, Ready, Conflict,
// then others in the order they were added), so that the order does not
// depend on history.
func Set(conds *[]metav1.Condition, generation int64, c metav1.Condition) bool {
	c.ObservedGeneration = generation
	isNew := meta.FindStatusCondition(*conds, c.Type) == nil
	changed := meta.SetStatusCondition(conds, c)
	if isNew {
		placeLast(*conds)
	}
	return changed
}

// placeLast moves the last condition of conds, just added, before the first
// condition that ranks after it.
func placeLast(conds []metav1.Condition) {
	last := len(conds) - 1
	r := rank(conds[last].Type)
	if r == len(typeOrder) {
		return
	}
	at := slices.IndexFunc(conds[:last], func(o metav1.Condition) bool { return rank(o.Type) > r })
	if at < 0 {
		return
	}
	c := conds[last]
	copy(conds[at+1:], conds[at:last])
	conds[at] = c
}

// Remove deletes the condition of type t and reports whether there was one.
func Remove(conds *[]metav1.Condition, t string) bool {
	return meta.RemoveStatusCondition(conds, t)
}

// Get returns the condition of type t, or nil. The result points into conds.
func Get(conds []metav1.Condition, t string) *metav1.Condition {
	return meta.FindStatusCondition(conds, t)
}

// IsTrue reports whether the condition of type t exists and is True.
func IsTrue(conds []metav1.Condition, t string) bool {
	return meta.IsStatusConditionTrue(conds, t)
}

// Conditions of a ServiceImport besides the mcs-api Ready condition.
const (
	// RegistryReachable is False while the registry cannot be read: the
	// import, its Service and its EndpointSlices are then kept as last seen
	// (but for this cluster's own endpoints, which do not come through the
	// registry). It is removed once the registry is reachable again.
	RegistryReachable = "RegistryReachable"
	// ReasonRegistryUnreachable is the reason of RegistryReachable=False.
	ReasonRegistryUnreachable = "RegistryUnreachable"
	// RecordsAccepted is False while the registry holds records of the
	// Service that mcsd refused (see registry.RejectReason): the message
	// names each refused cluster and why. Those clusters' endpoints are not
	// imported; the other clusters' are. It is removed once no record of the
	// Service is refused.
	RecordsAccepted = "RecordsAccepted"
	// ReasonRecordsRejected is the reason of RecordsAccepted=False.
	ReasonRecordsRejected = "RecordsRejected"
	// ReasonDerivedServiceConflict is the reason of Ready=False when a
	// Service mcsd did not create holds the derived Service's name.
	ReasonDerivedServiceConflict = "DerivedServiceConflict"
	// EndpointsReady says whether every exporting cluster has a ready
	// endpoint of the Service; when not, the message names those that have
	// none (its pods not ready, or scaled to zero), whose share of the
	// traffic then goes to the others.
	EndpointsReady = "EndpointsReady"
	// ReasonAllClustersReady is the reason of EndpointsReady=True.
	ReasonAllClustersReady = "AllClustersReady"
	// ReasonClustersWithoutEndpoints is the reason of EndpointsReady=False.
	ReasonClustersWithoutEndpoints = "ClustersWithoutReadyEndpoints"
)

// ConflictReasons are the mcs-api reasons of Conflict=True, in the order a
// condition that joins several lists them.
var ConflictReasons = []mcsv1beta1.ServiceExportConditionReason{
	mcsv1beta1.ServiceExportReasonPortConflict,
	mcsv1beta1.ServiceExportReasonTypeConflict,
	mcsv1beta1.ServiceExportReasonSessionAffinityConflict,
	mcsv1beta1.ServiceExportReasonSessionAffinityConfigConflict,
	mcsv1beta1.ServiceExportReasonLabelsConflict,
	mcsv1beta1.ServiceExportReasonAnnotationsConflict,
	mcsv1beta1.ServiceExportReasonInternalTrafficPolicyConflict,
	mcsv1beta1.ServiceExportReasonTrafficDistributionConflict,
	mcsv1beta1.ServiceExportReasonIPFamilyConflict,
}

// Cap shortens s to at most n characters, marking the cut with "…": a
// condition's message holds at most 32768 bytes, and mcsd keeps its own
// shorter.
func Cap(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}
