package conditions

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcsd-io/mcsd/internal/testutil/ctrltest"
)

var (
	t0 = metav1.NewTime(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	t1 = metav1.NewTime(time.Date(2025, 1, 2, 0, 0, 0, 0, time.UTC))
)

func cond(typ string, s metav1.ConditionStatus, reason string, gen int64, at metav1.Time) metav1.Condition {
	return metav1.Condition{Type: typ, Status: s, Reason: reason, Message: reason + " message", ObservedGeneration: gen, LastTransitionTime: at}
}

func TestSet(t *testing.T) {
	tests := []struct {
		name        string
		before      []metav1.Condition
		set         metav1.Condition
		wantChanged bool
		want        []metav1.Condition
	}{
		{
			name:        "new into empty",
			set:         cond("Ready", "True", "Exported", 1, t1),
			wantChanged: true,
			want:        []metav1.Condition{cond("Ready", "True", "Exported", 1, t1)},
		},
		{
			name:        "identical is no change and keeps the time",
			before:      []metav1.Condition{cond("Ready", "True", "Exported", 1, t0)},
			set:         cond("Ready", "True", "Exported", 1, t1),
			wantChanged: false,
			want:        []metav1.Condition{cond("Ready", "True", "Exported", 1, t0)},
		},
		{
			name:        "same status, new reason keeps the time",
			before:      []metav1.Condition{cond("Ready", "False", "Pending", 1, t0)},
			set:         cond("Ready", "False", "Failed", 1, t1),
			wantChanged: true,
			want:        []metav1.Condition{cond("Ready", "False", "Failed", 1, t0)},
		},
		{
			name:        "new generation only",
			before:      []metav1.Condition{cond("Ready", "True", "Exported", 1, t0)},
			set:         cond("Ready", "True", "Exported", 2, t1),
			wantChanged: true,
			want:        []metav1.Condition{cond("Ready", "True", "Exported", 2, t0)},
		},
		{
			name:        "status flip takes the new time",
			before:      []metav1.Condition{cond("Ready", "False", "Pending", 1, t0)},
			set:         cond("Ready", "True", "Exported", 1, t1),
			wantChanged: true,
			want:        []metav1.Condition{cond("Ready", "True", "Exported", 1, t1)},
		},
		{
			name:        "known type goes before later known types",
			before:      []metav1.Condition{cond("Ready", "True", "Exported", 1, t0), cond("Conflict", "False", "NoConflicts", 1, t0)},
			set:         cond("Valid", "True", "Valid", 1, t1),
			wantChanged: true,
			want: []metav1.Condition{
				cond("Valid", "True", "Valid", 1, t1),
				cond("Ready", "True", "Exported", 1, t0),
				cond("Conflict", "False", "NoConflicts", 1, t0),
			},
		},
		{
			name:        "known type goes before unknown types",
			before:      []metav1.Condition{cond("Valid", "True", "Valid", 1, t0), cond("Custom", "True", "X", 1, t0)},
			set:         cond("Ready", "True", "Exported", 1, t1),
			wantChanged: true,
			want: []metav1.Condition{
				cond("Valid", "True", "Valid", 1, t0),
				cond("Ready", "True", "Exported", 1, t1),
				cond("Custom", "True", "X", 1, t0),
			},
		},
		{
			name:        "unknown type is appended",
			before:      []metav1.Condition{cond("Other", "True", "X", 1, t0), cond("Valid", "True", "Valid", 1, t0)},
			set:         cond("Custom", "True", "Y", 1, t1),
			wantChanged: true,
			want: []metav1.Condition{
				cond("Other", "True", "X", 1, t0),
				cond("Valid", "True", "Valid", 1, t0),
				cond("Custom", "True", "Y", 1, t1),
			},
		},
		{
			name:        "existing condition keeps its place",
			before:      []metav1.Condition{cond("Conflict", "False", "NoConflicts", 1, t0), cond("Valid", "True", "Valid", 1, t0)},
			set:         cond("Conflict", "True", "PortConflict", 1, t1),
			wantChanged: true,
			want: []metav1.Condition{
				cond("Conflict", "True", "PortConflict", 1, t1),
				cond("Valid", "True", "Valid", 1, t0),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conds := append([]metav1.Condition(nil), tt.before...)
			if got := Set(&conds, tt.set.ObservedGeneration, tt.set); got != tt.wantChanged {
				t.Errorf("Set() changed = %v, want %v", got, tt.wantChanged)
			}
			if diff := cmp.Diff(tt.want, conds); diff != "" {
				t.Errorf("conditions (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSetStampsTime(t *testing.T) {
	var conds []metav1.Condition
	before := time.Now().Add(-time.Second)
	Set(&conds, 1, metav1.Condition{Type: "Valid", Status: "True", Reason: "Valid"})
	if got := conds[0].LastTransitionTime.Time; got.Before(before) {
		t.Errorf("LastTransitionTime = %v, want now", got)
	}
}

func TestSetOrderIndependentOfHistory(t *testing.T) {
	var a, b []metav1.Condition
	for _, typ := range []string{"Conflict", "Ready", "Valid"} {
		Set(&a, 1, cond(typ, "True", "R", 1, t0))
	}
	for _, typ := range []string{"Valid", "Conflict", "Ready"} {
		Set(&b, 1, cond(typ, "True", "R", 1, t0))
	}
	want := []string{"Valid", "Ready", "Conflict"}
	if diff := cmp.Diff(want, ctrltest.ConditionTypes(a)); diff != "" {
		t.Errorf("order a (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, ctrltest.ConditionTypes(b)); diff != "" {
		t.Errorf("order b (-want +got):\n%s", diff)
	}
}

func TestRemove(t *testing.T) {
	tests := []struct {
		name   string
		before []metav1.Condition
		typ    string
		want   []string
		ok     bool
	}{
		{name: "present", before: []metav1.Condition{cond("Valid", "True", "V", 1, t0), cond("Conflict", "False", "N", 1, t0)}, typ: "Conflict", want: []string{"Valid"}, ok: true},
		{name: "absent", before: []metav1.Condition{cond("Valid", "True", "V", 1, t0)}, typ: "Conflict", want: []string{"Valid"}},
		{name: "empty", typ: "Conflict"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conds := append([]metav1.Condition(nil), tt.before...)
			if got := Remove(&conds, tt.typ); got != tt.ok {
				t.Errorf("Remove() = %v, want %v", got, tt.ok)
			}
			if diff := cmp.Diff(tt.want, ctrltest.ConditionTypes(conds)); diff != "" {
				t.Errorf("types (-want +got):\n%s", diff)
			}
		})
	}
}

func TestGetIsTrue(t *testing.T) {
	conds := []metav1.Condition{cond("Valid", "True", "Valid", 1, t0), cond("Ready", "False", "Pending", 1, t0), cond("Conflict", "Unknown", "X", 1, t0)}
	tests := []struct {
		typ      string
		wantNil  bool
		wantTrue bool
	}{
		{typ: "Valid", wantTrue: true},
		{typ: "Ready"},
		{typ: "Conflict"},
		{typ: "Missing", wantNil: true},
	}
	for _, tt := range tests {
		t.Run(tt.typ, func(t *testing.T) {
			c := Get(conds, tt.typ)
			if (c == nil) != tt.wantNil {
				t.Fatalf("Get() = %v, want nil %v", c, tt.wantNil)
			}
			if c != nil && c.Type != tt.typ {
				t.Errorf("Get().Type = %q", c.Type)
			}
			if got := IsTrue(conds, tt.typ); got != tt.wantTrue {
				t.Errorf("IsTrue() = %v, want %v", got, tt.wantTrue)
			}
		})
	}
}
