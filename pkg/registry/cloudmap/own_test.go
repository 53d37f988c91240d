package cloudmap

import (
	"testing"

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
	o.end(testID, testKey, full, true)
	if lost := o.check(testID.Cluster, partial, from); len(lost) > 0 {
		t.Errorf("a read during the write marked %v lost", lost)
	}
	if lost := o.check(testID.Cluster, partial, o.epoch()); len(lost) != 1 {
		t.Errorf("a read begun after the write, missing an endpoint: lost %v, want %v", lost, testKey)
	}
}
