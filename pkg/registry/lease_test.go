package registry

import (
	"slices"
	"testing"
	"time"
)

func TestIdleTracker(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tr := IdleTracker{Grace: 10 * time.Second}
	steps := []struct {
		at   time.Duration
		idle []string
		want []string
	}{
		{0, []string{"a", "b"}, nil},
		{5 * time.Second, []string{"a", "b", "c"}, nil},
		{10 * time.Second, []string{"a", "c"}, []string{"a"}}, // b got a record: forgotten
		{12 * time.Second, []string{"a", "b", "c"}, []string{"a"}},
		{15 * time.Second, []string{"a", "b", "c"}, []string{"a", "c"}},
		{22 * time.Second, []string{"b"}, []string{"b"}},
		{23 * time.Second, nil, nil},
	}
	for _, s := range steps {
		got := tr.Observe(t0.Add(s.at), s.idle)
		if !slices.Equal(got, s.want) {
			t.Errorf("at %s: %v, want %v", s.at, got, s.want)
		}
	}
	if (&IdleTracker{}).Observe(t0, []string{"x"})[0] != "x" {
		t.Error("no grace: an idle lease counts at once")
	}
}
