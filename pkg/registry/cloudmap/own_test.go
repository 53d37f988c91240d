package cloudmap

import (
	"testing"
	"time"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

// TestOwnWatchReadDuringAWrite: a poll that began while a write of the
// backend's own was under way, and delivers after it ended, may have read
// it half done: what it delivers of that Service marks nothing lost (the
// write's operations have the next poll read the Service again). A poll
// that began after the write ended is judged as usual.
func TestOwnWatchReadDuringAWrite(t *testing.T) {
	enc := newEncoder(testID)
	spec := testSpec()
	full, err := enc.instances(state{Created: 1, Spec: &spec, HasEndpoints: true, Groups: webGroups("10.0.0.1", "10.0.0.2")})
	mustDo(t, err)
	half := decodeService(testID.ClusterSet, testKey, toList(full))[testID.Cluster]
	half.Endpoints.Groups = webGroups("10.0.0.1")
	partial := registry.Update{Exports: []registry.Export{*half.Export}, Endpoints: []registry.Endpoints{*half.Endpoints}}

	o := newOwnWatch()
	o.begin(testKey)
	from := o.epoch() // the poll begins its reads
	o.end(testID, testKey, full, true, true)
	if lost := o.check(testID.Cluster, partial, from, nil); len(lost) > 0 {
		t.Errorf("a read during the write marked %v lost", lost)
	}
	if lost := o.check(testID.Cluster, partial, o.epoch(), nil); len(lost) != 1 {
		t.Errorf("a read begun after the write, missing an endpoint: lost %v, want %v", lost, testKey)
	}

	// A put that found every instance as wanted sent nothing: a read
	// during it caught nothing half done, and is judged.
	o = newOwnWatch()
	o.seed(testID, testKey, full)
	from = o.epoch()
	o.begin(testKey)
	o.end(testID, testKey, full, true, false)
	if lost := o.check(testID.Cluster, partial, from, nil); len(lost) != 1 {
		t.Errorf("a read during a put that wrote nothing, missing an endpoint: lost %v, want %v", lost, testKey)
	}
}

// TestPutThatWritesNothingEndsNoWrite: a put of what the backend already
// holds sends nothing to Cloud Map, and so does not keep the polls under
// way from judging the Service (a Service put on every poll would never be
// judged lost otherwise). A put that writes does.
func TestPutThatWritesNothingEndsNoWrite(t *testing.T) {
	srv := moto(t)
	opts := motoOptions(srv, registry.Identity{ClusterSet: randName("noop"), Cluster: "east"}, 30*time.Second)
	b, key := openExporting(t, opts, "10.0.0.1")
	from := b.ownWatch.epoch()
	putWeb(t, b, key, "10.0.0.1")
	if got := b.ownWatch.epoch(); got != from {
		t.Errorf("puts that wrote nothing ended writes: epoch %d, was %d", got, from)
	}
	putWeb(t, b, key, "10.0.0.1", "10.0.0.2")
	if got := b.ownWatch.epoch(); got == from {
		t.Errorf("a put that wrote an endpoint ended no write: epoch %d", got)
	}
}
