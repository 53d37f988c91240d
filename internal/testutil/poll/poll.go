package poll

import (
	"testing"
	"time"
)

// Interval is how often Until checks its condition: fine enough to measure
// propagation in milliseconds, coarse enough to leave the CPU to the system
// under test.
const Interval = 10 * time.Millisecond

// Until calls cond every Interval until it returns true, and returns how long
// that took. When timeout passes first it fails t with what and the message
// cond last returned.
func Until(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	tick := time.NewTicker(Interval)
	defer tick.Stop()
	for {
		ok, msg := cond()
		if ok {
			took := time.Since(start)
			NearMiss(t, took, timeout, what)
			return took
		}
		if time.Since(start) > timeout {
			t.Fatalf("timed out after %s waiting for %s: %s", timeout, what, msg)
		}
		<-tick.C
	}
}

// NearMiss logs, in t, a wait for what that took more than half its bound:
// on a busier machine (a CI runner, the package's other tests beside it) the
// same wait may fail, and the log says which bound to look at before it does.
func NearMiss(t testing.TB, took, bound time.Duration, what string) {
	t.Helper()
	if bound > 0 && took > bound/2 {
		t.Logf("near miss: waited %s of %s for %s", took.Round(time.Millisecond), bound, what)
	}
}

// ThroughoutInterval is how often Throughout checks its condition, which is
// usually an API read that should not load the system under test.
const ThroughoutInterval = 200 * time.Millisecond

// Throughout calls cond every ThroughoutInterval for d and fails t with what
// and cond's message the first time it returns false: for what must not
// happen, such as a deletion during an outage.
func Throughout(t testing.TB, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(ThroughoutInterval)
	defer tick.Stop()
	for {
		if ok, msg := cond(); !ok {
			t.Fatalf("%s stopped holding: %s", what, msg)
			return
		}
		if !time.Now().Before(deadline) {
			return
		}
		<-tick.C
	}
}
