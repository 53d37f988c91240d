package parallel

import (
	"errors"
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
