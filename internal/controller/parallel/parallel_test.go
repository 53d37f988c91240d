package parallel

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// TestBothRunAtTheSameTime: each function waits for the other to have
// started, which only ends if they run at the same time; both results and
// errors come back.
func TestBothRunAtTheSameTime(t *testing.T) {
	aStarted, bStarted := make(chan struct{}), make(chan struct{})
	wait := func(c chan struct{}) bool {
		select {
		case <-c:
			return true
		case <-time.After(10 * time.Second):
			return false
		}
	}
	errB := errors.New("b failed")
	a, ea, b, eb := Both(
		func() (string, error) {
			close(aStarted)
			if !wait(bStarted) {
				return "", errors.New("b never started while a ran")
			}
			return "a", nil
		},
		func() (int, error) {
			close(bStarted)
			if !wait(aStarted) {
				return 0, errors.New("a never started while b ran")
			}
			return 2, errB
		})
	if a != "a" || ea != nil || b != 2 || !errors.Is(eb, errB) {
		t.Errorf("Both = %q, %v, %d, %v", a, ea, b, eb)
	}
}

// TestEachRunsUpToLimitAtOnce: limit functions wait until limit of them
// have started, which only ends if they run at the same time; no more than
// limit run at once; results and errors come back in order.
func TestEachRunsUpToLimitAtOnce(t *testing.T) {
	const limit, n = 3, 7
	var running, most, started atomic.Int32
	allIn := make(chan struct{})
	errOdd := errors.New("odd")
	fns := make([]func() (int, error), n)
	for i := range fns {
		fns[i] = func() (int, error) {
			now := running.Add(1)
			defer running.Add(-1)
			for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
			}
			if started.Add(1) == limit {
				close(allIn)
			}
			if i < limit {
				select {
				case <-allIn:
				case <-time.After(10 * time.Second):
					return 0, errors.New("the first ones never ran at the same time")
				}
			}
			if i%2 == 1 {
				return i, errOdd
			}
			return i * 10, nil
		}
	}
	out, errs := Each(limit, fns)
	for i := range n {
		want, wantErr := i*10, error(nil)
		if i%2 == 1 {
			want, wantErr = i, errOdd
		}
		if out[i] != want || !errors.Is(errs[i], wantErr) || (wantErr == nil && errs[i] != nil) {
			t.Errorf("result %d = %d, %v; want %d, %v", i, out[i], errs[i], want, wantErr)
		}
	}
	if m := most.Load(); m != limit {
		t.Errorf("at most %d ran at once, want %d", m, limit)
	}
}
