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
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			t.Fatalf("timed out after %s waiting for %s: %s", timeout, what, msg)
		}
		<-tick.C
	}
}
