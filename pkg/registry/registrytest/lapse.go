package registrytest

import (
	"errors"
	"testing"
	"time"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

// Switch stands between a backend and its registry: after Cut every
// request the backend sends fails, as in a partition or an outage of the
// registry, until Heal.
type Switch struct {
	Cut, Heal func()
}

// LapseOpener opens the backend of id, whose records outlive it by ttl,
// behind a switch of its own, and returns with it a Factory for other
// members of the same registry (not behind that switch, unless the switch
// stops the registry itself).
type LapseOpener func(t *testing.T, id registry.Identity, ttl time.Duration) (registry.Registry, Switch, Factory)

// RunLapse checks a backend's registry.Lapser: cut off the registry for
// longer than its TTL, it says that its records may have lapsed (wrapping
// registry.ErrRecordsLapsed) and signals it; once it reaches the registry
// again, it says that its records are live again and signals it, and its
// next change reaches another member, with its export.
func RunLapse(t *testing.T, open LapseOpener) {
	t.Run("Lapse", func(t *testing.T) {
		t.Parallel()
		testLapse(t, open)
	})
}

func testLapse(t *testing.T, open LapseOpener) {
	cs := newClusterSet(t, nil)
	reg, sw, f := open(t, registry.Identity{ClusterSet: cs.id, Cluster: "a"}, shortTTL)
	lapser, ok := reg.(registry.Lapser)
	if !ok {
		t.Fatalf("%T does not implement registry.Lapser", reg)
	}
	cs.f = f
	rec := startSynced(t, cs.open("b", longTTL))
	put(t, reg, web, spec(80), endpoints("10.0.0.1"))
	waitRecords(t, rec, "a's records", rid("a", web), spec(80), endpoints("10.0.0.1"))
	if err := lapser.Lapsed(); err != nil {
		t.Fatalf("Lapsed() = %v before the cut, want nil", err)
	}
	select {
	case <-lapser.Lapses(): // a change before the test's
	default:
	}

	sw.Cut()
	// The lease or heartbeat goes unrenewed for its TTL: said, with a
	// signal.
	waitLapsed(t, lapser, 5*shortTTL, "the lapse", func(err error) bool { return errors.Is(err, registry.ErrRecordsLapsed) })

	sw.Heal()
	waitLapsed(t, lapser, 10*shortTTL, "the records live again", func(err error) bool { return err == nil })
	// Its records are live again: its next change reaches the other
	// member, export and endpoints whole.
	put(t, reg, web, spec(80), endpoints("10.0.0.2"))
	waitRecords(t, rec, "a's change after the cut", rid("a", web), spec(80), endpoints("10.0.0.2"))
}

// waitLapsed waits up to d for a signal on l.Lapses after which l.Lapsed
// satisfies ok.
func waitLapsed(t *testing.T, l registry.Lapser, d time.Duration, what string, ok func(error) bool) {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case <-l.Lapses():
			if err := l.Lapsed(); ok(err) {
				return
			}
		case <-timer.C:
			t.Fatalf("no signal on Lapses for %s within %s; Lapsed() = %v", what, d, l.Lapsed())
		}
	}
}
