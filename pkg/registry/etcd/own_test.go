package etcd

import (
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// TestAbsentLossReportedOnce: a record of this backend found absent is
// reported once (a log line; for the alive record, a repair), not again at
// every resync that still finds it absent; deleted again after it was
// written again, it is reported again.
func TestAbsentLossReportedOnce(t *testing.T) {
	o := &ownRecords{recs: map[string]ownRecord{}, now: time.Now}
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

// TestContention: a record found changed by another writer contendFlaps
// times in a row, each soon after the one before, is not to be written
// until contendWindow has passed since the last; losses further apart, or
// fewer, never stop it.
func TestContention(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	o := &ownRecords{recs: map[string]ownRecord{}, now: func() time.Time { return now }}
	rev := int64(1)
	lose := func() {
		t.Helper()
		rev++
		o.writing("k", "mine")
		o.written("k", "mine", rev)
		rev++
		if !o.check("k", &mvccpb.KeyValue{Key: []byte("k"), Value: []byte("theirs"), ModRevision: rev}, rev) {
			t.Fatal("the change by another writer was not reported")
		}
	}
	// Further apart than the window: never contended.
	for range 2 * contendFlaps {
		lose()
		if _, ok := o.contended("k"); ok {
			t.Fatal("contended by losses further apart than the window")
		}
		now = now.Add(contendWindow + time.Second)
	}
	// In a row.
	for i := range contendFlaps {
		if _, ok := o.contended("k"); ok {
			t.Fatalf("contended after %d losses in a row, want %d", i, contendFlaps)
		}
		lose()
		now = now.Add(100 * time.Millisecond)
	}
	if n, ok := o.contended("k"); !ok || n != contendFlaps {
		t.Fatalf("contended = %d, %t after %d losses in a row", n, ok, contendFlaps)
	}
	now = now.Add(contendWindow)
	if _, ok := o.contended("k"); ok {
		t.Error("still contended a window after the last loss")
	}
}

// TestEchoOfTheWriteBeforeIsNoLoss: the watch delivers a write of this
// backend's after the next write of the record has begun (endpoints that
// change faster than the registry's round trip): that echo is no loss, and
// no contention; another writer's change after it still is.
func TestEchoOfTheWriteBeforeIsNoLoss(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	o := &ownRecords{recs: map[string]ownRecord{}, now: func() time.Time { return now }}
	rev := int64(10)
	o.writing("k", "v0")
	o.written("k", "v0", rev)
	for i := range 2 * contendFlaps {
		value := "v" + string(rune('a'+i))
		o.writing("k", value)
		if o.check("k", &mvccpb.KeyValue{Key: []byte("k"), Value: []byte("previous"), ModRevision: rev}, rev) {
			t.Fatalf("write %d: the echo of the write before it reported as a loss", i)
		}
		rev++
		o.written("k", value, rev)
		now = now.Add(100 * time.Millisecond)
	}
	if n, ok := o.contended("k"); ok || n != 0 {
		t.Errorf("contended = %d, %t after echoes alone", n, ok)
	}
	o.writing("k", "mine")
	if !o.check("k", &mvccpb.KeyValue{Key: []byte("k"), Value: []byte("theirs"), ModRevision: rev + 1}, rev+1) {
		t.Error("another writer's change during a write: not reported")
	}
}

// TestDeletionDuringTheWrite: a deletion the watch sees while a write of the
// record is under way is a loss when it came after the write landed (the
// write's revision, known once it returns, is earlier): the record is
// written again at the next put, though its value is the one stored. One
// that came before the write is no loss: the write put the record back.
func TestDeletionDuringTheWrite(t *testing.T) {
	o := &ownRecords{recs: map[string]ownRecord{}, now: time.Now}
	o.written("k", "v1", 10)

	o.writing("k", "v2")
	if o.check("k", &mvccpb.KeyValue{Key: []byte("k"), Value: []byte("v2")}, 12) {
		t.Fatal("the write's own echo reported as a loss")
	}
	if o.check("k", nil, 13) {
		t.Error("a deletion reported before the write told its revision")
	}
	if !o.written("k", "v2", 12) {
		t.Error("the deletion after the write: not reported when the write returned")
	}
	if !o.isLost("k") {
		t.Fatal("deleted at revision 13, after the write at 12: not lost")
	}
	if o.check("k", nil, 14) {
		t.Error("still absent at a later resync: reported again")
	}

	// Deleted before the write landed: the write put it back.
	o.written("k", "v2", 20)
	o.writing("k", "v3")
	if o.check("k", nil, 21) {
		t.Error("a deletion reported before the write told its revision")
	}
	if o.written("k", "v3", 22) {
		t.Error("the deletion before the write: reported")
	}
	if o.isLost("k") {
		t.Error("deleted at revision 21, before the write at 22: counted lost")
	}
}
