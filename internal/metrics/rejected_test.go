package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

func TestRecordsRejected(t *testing.T) {
	c := newCollectors()
	count := recordsRejected(c, "c2")
	if n := testutil.CollectAndCount(c.recordsRejected); n != len(registry.RejectReasons) {
		t.Errorf("%d series at start, want one per reason (%d)", n, len(registry.RejectReasons))
	}
	count(registry.Rejection{Reason: registry.RejectInvalidAddress})
	count(registry.Rejection{Reason: registry.RejectInvalidAddress})
	count(registry.Rejection{Reason: registry.RejectNotMember})
	for reason, want := range map[registry.RejectReason]float64{
		registry.RejectInvalidAddress: 2, registry.RejectNotMember: 1, registry.RejectTooLarge: 0,
	} {
		if got := testutil.ToFloat64(c.recordsRejected.WithLabelValues("c2", string(reason))); got != want {
			t.Errorf("reason %s: %v, want %v", reason, got, want)
		}
	}
}
