package merge

import (
	"cmp"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/conditions"
	"github.com/mcsd-io/mcsd/pkg/registry"
)

// DefaultClientIPTimeoutSeconds is the timeout Kubernetes gives ClientIP
// session affinity when none is set (3 hours).
const DefaultClientIPTimeoutSeconds int32 = 10800

// Result is the desired state of the import of one service.
type Result struct {
	// Spec is the ServiceImport spec. IPs is left empty: the importer fills
	// it from the Service it derives in each cluster. Defaults are spelled
	// out (protocol TCP, sessionAffinity None, internalTrafficPolicy
	// Cluster, the ClientIP timeout) so that an export switching between an
	// unset field and its default does not change the import.
	Spec mcsv1beta1.ServiceImportSpec
	// Labels and Annotations are the exported labels and annotations of the
	// oldest export; nil when it has none.
	Labels      map[string]string
	Annotations map[string]string
	// Clusters lists the exporting clusters, oldest export first.
	Clusters []string
	// Served maps each exporting cluster to the names of the import ports
	// its endpoints may serve, in Spec.Ports order ("" for an unnamed port).
	// A cluster serves an import port when its own Service defines it as the
	// import does (same name, protocol and number): that is the port its
	// EndpointSlices carry under that name. A cluster whose definition lost
	// a PortConflict does not serve that port. A cluster that serves no
	// port maps to nil.
	Served map[string][]string
	// Conflict applies to every export of the service, not just the ones
	// whose values lost.
	Conflict Conflict
}

// Conflict is the Conflict condition of every export of a service.
type Conflict struct {
	// Reasons holds the mcs-api conflict reasons raised, always in this
	// order: PortConflict, TypeConflict, SessionAffinityConflict,
	// SessionAffinityConfigConflict, LabelsConflict, AnnotationsConflict,
	// InternalTrafficPolicyConflict, TrafficDistributionConflict,
	// IPFamilyConflict. Empty when the exports agree.
	Reasons []mcsv1beta1.ServiceExportConditionReason
	// Message names each field in conflict, the cluster whose value is used
	// and (up to a few of) the clusters that disagree; empty without
	// conflicts.
	Message string
	// Winners names, for each reason raised, the cluster whose value the
	// import uses: the oldest export that carries the field (an export
	// without it, such as the AWS controller's, takes no part). The
	// import's ports are the union of all exports', a port in conflict the
	// oldest export's with it: PortConflict has a winner only when one
	// cluster's ports won every conflict on a value (not for a port some
	// cluster lacks, or an unnamed port dropped). Nil without conflicts.
	Winners map[mcsv1beta1.ServiceExportConditionReason]string
}

// Status is True when any conflict was raised.
func (c Conflict) Status() metav1.ConditionStatus {
	if len(c.Reasons) == 0 {
		return metav1.ConditionFalse
	}
	return metav1.ConditionTrue
}

// Reason is the condition reason: the reasons joined by commas, or
// NoConflicts.
func (c Conflict) Reason() string {
	if len(c.Reasons) == 0 {
		return string(mcsv1beta1.ServiceExportReasonNoConflicts)
	}
	s := make([]string, len(c.Reasons))
	for i, r := range c.Reasons {
		s[i] = string(r)
	}
	return strings.Join(s, ",")
}

// Condition returns the Conflict condition with type, status, reason and
// message set. ObservedGeneration and LastTransitionTime are left to the
// caller, which owns the object and the clock.
func (c Conflict) Condition() metav1.Condition {
	return metav1.Condition{
		Type:    string(mcsv1beta1.ServiceExportConditionConflict),
		Status:  c.Status(),
		Reason:  c.Reason(),
		Message: c.Message,
	}
}

// Merge computes the import of one service from all clusters' exports of it,
// given in any order. The oldest export (lowest Order, ties broken by the
// lower cluster id; never a timestamp) wins every field the exports disagree
// on, and the import carries the union of their ports.
//
// Merge does not look at Export.Service: passing records of more than one
// service is a programming error. So is passing two records of one cluster;
// the older one is used and the other ignored.
//
// With no exports Merge returns the zero Result: there is nothing to import,
// and the caller deletes the import and its EndpointSlices.
//
// Merge does not modify exports, and the Result shares no memory with them.
func Merge(exports []registry.Export) Result {
	ex := byPrecedence(exports)
	if len(ex) == 0 {
		return Result{}
	}
	var (
		res   Result
		notes = conflictNotes{notes: map[mcsv1beta1.ServiceExportConditionReason][]string{}}
	)
	res.Clusters = make([]string, len(ex))
	for i, e := range ex {
		res.Clusters[i] = e.Cluster
	}

	// Ports.
	u := unionPorts(ex)
	res.Spec.Ports = u.servicePorts()
	notes.notes[mcsv1beta1.ServiceExportReasonPortConflict] = u.notes()
	notes.win(mcsv1beta1.ServiceExportReasonPortConflict, u.winner())
	res.Served = make(map[string][]string, len(ex))
	for _, e := range ex {
		res.Served[e.Cluster] = u.served(e)
	}

	// Type.
	typ, n := resolve(ex, oldestExport, "type", exportType, eq, quote)
	res.Spec.Type = mcsv1beta1.ServiceImportType(typ)
	notes.add(mcsv1beta1.ServiceExportReasonTypeConflict, n, ex)

	// The other fields are compared among the exports that carry them
	// (informed).
	known := informed(ex)
	knownWhy := oldestExport
	if known[0].Cluster != ex[0].Cluster {
		knownWhy = carriesIt
	}

	// Session affinity and its config. The config is only meaningful (and
	// only compared) when affinity is ClientIP.
	affinity, n := resolve(known, knownWhy, "sessionAffinity", sessionAffinity, eq, quote)
	res.Spec.SessionAffinity = affinity
	notes.add(mcsv1beta1.ServiceExportReasonSessionAffinityConflict, n, known)
	if affinity == corev1.ServiceAffinityClientIP {
		clientIP := slices.DeleteFunc(slices.Clone(known), func(e registry.Export) bool {
			return sessionAffinity(e) != corev1.ServiceAffinityClientIP
		})
		timeout, n := resolve(clientIP, knownWhy, "sessionAffinityConfig", clientIPTimeout, eq, formatTimeout)
		res.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{
			ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: &timeout},
		}
		notes.add(mcsv1beta1.ServiceExportReasonSessionAffinityConfigConflict, n, clientIP)
	}

	// Exported labels and annotations.
	labels, n := resolve(known, knownWhy, "exportedLabels", exportedLabels, mapsEqual, formatMap)
	res.Labels = cloneMap(labels)
	notes.add(mcsv1beta1.ServiceExportReasonLabelsConflict, n, known)
	annotations, n := resolve(known, knownWhy, "exportedAnnotations", exportedAnnotations, mapsEqual, formatMap)
	res.Annotations = cloneMap(annotations)
	notes.add(mcsv1beta1.ServiceExportReasonAnnotationsConflict, n, known)

	// Traffic policy and distribution.
	itp, n := resolve(known, knownWhy, "internalTrafficPolicy", internalTrafficPolicy, eq, quote)
	res.Spec.InternalTrafficPolicy = &itp
	notes.add(mcsv1beta1.ServiceExportReasonInternalTrafficPolicyConflict, n, known)
	td, n := resolve(known, knownWhy, "trafficDistribution", trafficDistribution, eq, formatTrafficDistribution)
	if td != "" {
		res.Spec.TrafficDistribution = &td
	}
	notes.add(mcsv1beta1.ServiceExportReasonTrafficDistributionConflict, n, known)

	// IP families: the list of the oldest export that has one, in its
	// order (an export without, such as the AWS controller's without
	// endpoints, says nothing of them); a conflict only when an export
	// lacks one of them, since then traffic of that family reaches only
	// some clusters. A family the import does not have reaches none: an
	// export with more conflicts with nothing.
	withFamilies := slices.DeleteFunc(slices.Clone(ex), func(e registry.Export) bool { return len(e.Spec.IPFamilies) == 0 })
	if len(withFamilies) > 0 {
		ipWhy := oldestExport
		if withFamilies[0].Cluster != ex[0].Cluster {
			ipWhy = carriesIt
		}
		families := ipFamilies(withFamilies[0]) // a fresh slice
		res.Spec.IPFamilies = families
		var lacking []dissent
		var partial []corev1.IPFamily // the import's families some export lacks
		for _, e := range withFamilies[1:] {
			f := ipFamilies(e)
			missing := slices.DeleteFunc(slices.Clone(families), func(x corev1.IPFamily) bool { return slices.Contains(f, x) })
			if len(missing) > 0 {
				lacking = append(lacking, dissent{e.Cluster, formatFamilies(f)})
				partial = append(partial, missing...)
			}
		}
		if len(lacking) > 0 {
			notes.add(mcsv1beta1.ServiceExportReasonIPFamilyConflict,
				conflictNote("ipFamilies", formatFamilies(families), withFamilies[0].Cluster, ipWhy, lacking)+
					"; "+joinFamilies(slices.Compact(sortedFamilies(partial)))+" not exported by every cluster", withFamilies)
		}
	}

	var msg []string
	for _, r := range conditions.ConflictReasons {
		if len(notes.notes[r]) > 0 {
			res.Conflict.Reasons = append(res.Conflict.Reasons, r)
			msg = append(msg, notes.notes[r]...)
		}
	}
	res.Conflict.Message = conditions.Cap(strings.Join(msg, ". "), maxMessageLen)
	res.Conflict.Winners = notes.winners
	return res
}

// informed returns the exports of ex that carry more than a type and ports
// (registry.Export.Partial), or ex when none does: a field that no export
// carries is unset in all of them.
func informed(ex []registry.Export) []registry.Export {
	known := slices.DeleteFunc(slices.Clone(ex), func(e registry.Export) bool { return e.Partial })
	if len(known) == 0 {
		return ex
	}
	return known
}

// byPrecedence returns the exports oldest first, one per cluster.
func byPrecedence(exports []registry.Export) []registry.Export {
	ex := slices.Clone(exports)
	slices.SortStableFunc(ex, func(a, b registry.Export) int {
		return cmp.Or(cmp.Compare(a.Order, b.Order), strings.Compare(a.Cluster, b.Cluster))
	})
	seen := make(map[string]bool, len(ex))
	return slices.DeleteFunc(ex, func(e registry.Export) bool {
		dup := seen[e.Cluster]
		seen[e.Cluster] = true
		return dup
	})
}

// Why a value wins, in conflict notes: the oldest export's, or, where
// older ones do not carry the field, the oldest of those that do.
const (
	oldestExport = "oldest export"
	carriesIt    = "oldest export that carries it"
)

// resolve returns the value of field in the oldest export of ex and, if any
// other export differs, a message naming the winner (and why it wins) and
// the dissenters.
func resolve[T any](ex []registry.Export, why, field string, get func(registry.Export) T, equal func(a, b T) bool, format func(T) string) (T, string) {
	var zero T
	if len(ex) == 0 {
		return zero, ""
	}
	win := get(ex[0])
	var diffs []dissent
	for _, e := range ex[1:] {
		if v := get(e); !equal(win, v) {
			diffs = append(diffs, dissent{e.Cluster, format(v)})
		}
	}
	if len(diffs) == 0 {
		return win, ""
	}
	return win, conflictNote(field, format(win), ex[0].Cluster, why, diffs)
}

// conflictNotes gathers Merge's notes by reason, and the winner of each
// reason decided by one field.
type conflictNotes struct {
	notes   map[mcsv1beta1.ServiceExportConditionReason][]string
	winners map[mcsv1beta1.ServiceExportConditionReason]string // nil without conflicts
}

// add notes a conflict of reason r, unless note is empty; its winner is
// the oldest of the exports compared, ex.
func (c *conflictNotes) add(r mcsv1beta1.ServiceExportConditionReason, note string, ex []registry.Export) {
	if note == "" {
		return
	}
	c.notes[r] = append(c.notes[r], note)
	c.win(r, ex[0].Cluster)
}

// win records cluster as the winner of reason r, unless cluster is "".
func (c *conflictNotes) win(r mcsv1beta1.ServiceExportConditionReason, cluster string) {
	if cluster == "" {
		return
	}
	if c.winners == nil {
		c.winners = map[mcsv1beta1.ServiceExportConditionReason]string{}
	}
	c.winners[r] = cluster
}

// Field accessors: each returns the value with Kubernetes defaults applied,
// so that an unset field and its default compare equal.

func exportType(e registry.Export) registry.ServiceType {
	if e.Spec.Type == "" {
		// A Service without a type is a ClusterIP Service.
		return registry.ClusterSetIP
	}
	return e.Spec.Type
}

func sessionAffinity(e registry.Export) corev1.ServiceAffinity {
	if e.Spec.SessionAffinity == "" {
		return corev1.ServiceAffinityNone
	}
	return e.Spec.SessionAffinity
}

func clientIPTimeout(e registry.Export) int32 {
	c := e.Spec.SessionAffinityConfig
	if c == nil || c.ClientIP == nil || c.ClientIP.TimeoutSeconds == nil {
		return DefaultClientIPTimeoutSeconds
	}
	return *c.ClientIP.TimeoutSeconds
}

func internalTrafficPolicy(e registry.Export) corev1.ServiceInternalTrafficPolicy {
	if p := e.Spec.InternalTrafficPolicy; p != nil && *p != "" {
		return *p
	}
	return corev1.ServiceInternalTrafficPolicyCluster
}

func trafficDistribution(e registry.Export) string {
	if d := e.Spec.TrafficDistribution; d != nil {
		return *d
	}
	return ""
}

func exportedLabels(e registry.Export) map[string]string      { return e.Spec.ExportedLabels }
func exportedAnnotations(e registry.Export) map[string]string { return e.Spec.ExportedAnnotations }

// ipFamilies returns the export's families in its order, each once.
func ipFamilies(e registry.Export) []corev1.IPFamily {
	var out []corev1.IPFamily
	for _, f := range e.Spec.IPFamilies {
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out
}

// cloneMap copies m; nil when m is empty.
func cloneMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return maps.Clone(m)
}

func eq[T comparable](a, b T) bool { return a == b }

func mapsEqual(a, b map[string]string) bool { return maps.Equal(a, b) } // nil equals empty

// sortedFamilies sorts IPv4 before IPv6 before anything else (by name).
func sortedFamilies(fs []corev1.IPFamily) []corev1.IPFamily {
	rank := func(f corev1.IPFamily) int {
		switch f {
		case corev1.IPv4Protocol:
			return 0
		case corev1.IPv6Protocol:
			return 1
		}
		return 2
	}
	out := slices.Clone(fs)
	slices.SortFunc(out, func(a, b corev1.IPFamily) int {
		return cmp.Or(cmp.Compare(rank(a), rank(b)), strings.Compare(string(a), string(b)))
	})
	return out
}

// joinFamilies joins fs with ", ".
func joinFamilies(fs []corev1.IPFamily) string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = string(f)
	}
	return strings.Join(out, ", ")
}
