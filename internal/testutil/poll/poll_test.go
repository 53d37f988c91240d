package poll_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/mcsd-io/mcsd/internal/testutil/poll"
)

func TestUntilReturnsOnceTheConditionHolds(t *testing.T) {
	calls := 0
	poll.Until(t, time.Minute, "the third call", func() (bool, string) {
		calls++
		return calls == 3, fmt.Sprintf("%d calls", calls)
	})
	if calls != 3 {
		t.Errorf("cond called %d times, want 3", calls)
	}
}

// fakeT records a failure instead of ending the test.
type fakeT struct {
	testing.TB
	failed string
}

func (f *fakeT) Helper() {}

func (f *fakeT) Fatalf(format string, args ...any) { f.failed = fmt.Sprintf(format, args...) }

func TestUntilFailsWithTheLastMessage(t *testing.T) {
	ft := &fakeT{TB: t}
	poll.Until(ft, 0, "nothing", func() (bool, string) {
		if ft.failed != "" {
			return true, "" // after the failure, so that Until returns
		}
		return false, "still not"
	})
	if want := "timed out after 0s waiting for nothing: still not"; ft.failed != want {
		t.Errorf("failure %q, want %q", ft.failed, want)
	}
}

func TestThroughoutChecksUntilTheEnd(t *testing.T) {
	calls := 0
	poll.Throughout(t, 3*poll.ThroughoutInterval, "the condition", func() (bool, string) {
		calls++
		return true, ""
	})
	if calls < 2 {
		t.Errorf("cond called %d times over three intervals, want at least 2", calls)
	}
	ft := &fakeT{TB: t}
	poll.Throughout(ft, time.Minute, "the condition", func() (bool, string) { return false, "broken" })
	if want := "the condition stopped holding: broken"; ft.failed != want {
		t.Errorf("failure %q, want %q", ft.failed, want)
	}
}
