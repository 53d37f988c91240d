package conditions

import (
	"slices"

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

// Set puts c into conds, replacing the condition of the same type, and
// reports whether anything changed. c.ObservedGeneration is stored as given.
// When the condition existed with the same status, its LastTransitionTime is
// kept; otherwise c.LastTransitionTime is used, or the current time when it
// is zero. An existing condition keeps its place; a new one is inserted by
// type (Valid, Ready, Conflict, then others in the order they were added).
func Set(conds *[]metav1.Condition, c metav1.Condition) bool {
	if i := slices.IndexFunc(*conds, func(o metav1.Condition) bool { return o.Type == c.Type }); i >= 0 {
		old := (*conds)[i]
		if old.Status == c.Status {
			c.LastTransitionTime = old.LastTransitionTime
		} else if c.LastTransitionTime.IsZero() {
			c.LastTransitionTime = metav1.Now()
		}
		if old == c {
			return false
		}
		(*conds)[i] = c
		return true
	}
	if c.LastTransitionTime.IsZero() {
		c.LastTransitionTime = metav1.Now()
	}
	r := rank(c.Type)
	at := len(*conds)
	if r < len(typeOrder) {
		if i := slices.IndexFunc(*conds, func(o metav1.Condition) bool { return rank(o.Type) > r }); i >= 0 {
			at = i
		}
	}
	*conds = slices.Insert(*conds, at, c)
	return true
}

// Remove deletes the condition of type t and reports whether there was one.
func Remove(conds *[]metav1.Condition, t string) bool {
	n := len(*conds)
	*conds = slices.DeleteFunc(*conds, func(c metav1.Condition) bool { return c.Type == t })
	return len(*conds) != n
}

// Get returns the condition of type t, or nil. The result points into conds.
func Get(conds []metav1.Condition, t string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}

// IsTrue reports whether the condition of type t exists and is True.
func IsTrue(conds []metav1.Condition, t string) bool {
	c := Get(conds, t)
	return c != nil && c.Status == metav1.ConditionTrue
}

// Conditions of a ServiceImport besides the mcs-api Ready condition.
const (
	// RegistryReachable is False while the registry cannot be read: the
	// import, its Service and its EndpointSlices are then kept as last seen.
	// It is removed once the registry is reachable again.
	RegistryReachable = "RegistryReachable"
	// ReasonRegistryUnreachable is the reason of RegistryReachable=False.
	ReasonRegistryUnreachable = "RegistryUnreachable"
	// ReasonDerivedServiceConflict is the reason of Ready=False when a
	// Service mcsd did not create holds the derived Service's name.
	ReasonDerivedServiceConflict = "DerivedServiceConflict"
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
