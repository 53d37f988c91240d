package standing

import (
	"errors"
	"testing"
)

func TestState(t *testing.T) {
	s := New()
	signalled := func() bool {
		select {
		case <-s.Changes():
			return true
		default:
			return false
		}
	}
	if s.Lapsed() != nil || signalled() {
		t.Fatal("a new State lapsed, or signalled")
	}
	s.Set(nil)
	if signalled() {
		t.Error("live set again signalled")
	}
	expired := errors.New("expired")
	s.Set(expired)
	s.Set(errors.New("expired"))
	if !errors.Is(s.Lapsed(), expired) {
		t.Errorf("Lapsed() = %v, want the first of two equal reasons", s.Lapsed())
	}
	if !signalled() || signalled() {
		t.Error("a lapse, set twice, not one signal")
	}
	fenced := errors.New("fenced")
	s.Set(fenced)
	s.Set(nil)
	if s.Lapsed() != nil || !signalled() || signalled() {
		t.Errorf("another reason, then live, unseen between: Lapsed() = %v, want nil, and one signal", s.Lapsed())
	}
}
