package etcd

import "testing"

// TestAbsentLossReportedOnce: a record of this backend found absent is
// reported once (a log line; for the alive record, a repair), not again at
// every resync that still finds it absent; deleted again after it was
// written again, it is reported again.
func TestAbsentLossReportedOnce(t *testing.T) {
	o := &ownRecords{recs: map[string]ownRecord{}}
	o.written("k", "v", 10)
	if !o.check("k", nil, 11) {
		t.Fatal("the deletion was not reported")
	}
	for rev := int64(12); rev <= 14; rev++ {
		if o.check("k", nil, rev) {
			t.Errorf("still absent at revision %d: reported again", rev)
		}
	}
	o.writing("k", "v")
	o.written("k", "v", 20)
	if !o.check("k", nil, 21) {
		t.Error("deleted again after it was written again: not reported")
	}
	o.failed("k")
	if o.check("k", nil, 22) {
		t.Error("a failed write of a record still absent: reported again")
	}
}
