package merge

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/mcsd-io/mcsd/internal/conditions"
)

// Bounds on the conflict message. With them a message stays well under the
// 32768 characters metav1.Condition allows.
const (
	maxDissenters = 3    // clusters named per field
	maxValueLen   = 80   // characters of a value or cluster id
	maxMessageLen = 8192 // last resort; the bounds above keep messages shorter
)

// dissent is a cluster whose value differs from the one used, formatted.
type dissent struct {
	cluster string
	value   string
}

// conflictNote describes a conflict on one field:
//
//	type: using "ClusterSetIP" from cluster "c1" (oldest export); cluster "c2" has "Headless"
func conflictNote(field, value, cluster, why string, diffs []dissent) string {
	return fmt.Sprintf("%s: using %s from cluster %s (%s); %s", field, value, quote(cluster), why, listDissent(diffs, "has"))
}

// listDissent lists up to maxDissenters clusters and their values, joined by
// verb ("has": `cluster "c2" has X`; "of": `X of cluster "c2"`).
func listDissent(diffs []dissent, verb string) string {
	var b strings.Builder
	for i, d := range diffs[:min(len(diffs), maxDissenters)] {
		if i > 0 {
			b.WriteString(", ")
		}
		if verb == "has" {
			fmt.Fprintf(&b, "cluster %s has %s", quote(d.cluster), d.value)
		} else {
			fmt.Fprintf(&b, "%s of cluster %s", d.value, quote(d.cluster))
		}
	}
	if more := len(diffs) - maxDissenters; more > 0 {
		fmt.Fprintf(&b, " and %d more", more)
	}
	return b.String()
}

// listClusters names up to maxDissenters clusters:
// `cluster "c1"`, `clusters "c1", "c2" and 2 more`.
func listClusters(clusters []string) string {
	q := make([]string, 0, maxDissenters)
	for _, c := range clusters[:min(len(clusters), maxDissenters)] {
		q = append(q, quote(c))
	}
	s := "cluster "
	if len(clusters) > 1 {
		s = "clusters "
	}
	s += strings.Join(q, ", ")
	if more := len(clusters) - maxDissenters; more > 0 {
		s += fmt.Sprintf(" and %d more", more)
	}
	return s
}

// quote quotes s, shortened to maxValueLen characters.
func quote[S ~string](s S) string { return strconv.Quote(conditions.Cap(string(s), maxValueLen)) }

func formatTimeout(t int32) string { return fmt.Sprintf("timeoutSeconds %d", t) }

func formatTrafficDistribution(d string) string {
	if d == "" {
		return "unset"
	}
	return quote(d)
}

// formatMap formats m as {k=v, ...}, keys sorted, shortened.
func formatMap(m map[string]string) string {
	kv := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		kv = append(kv, k+"="+m[k])
	}
	return "{" + conditions.Cap(strings.Join(kv, ", "), maxValueLen) + "}"
}

func formatFamilies(fs []corev1.IPFamily) string {
	s := make([]string, len(fs))
	for i, f := range fs {
		s[i] = string(f)
	}
	return "[" + strings.Join(s, ", ") + "]"
}
