package standing

import "sync"

// State is whether the records may have lapsed: nil while they are live,
// why while they may not be. Its zero value is not usable: use New.
type State struct {
	mu     sync.Mutex
	lapsed error
	ch     chan struct{}
}

// New returns a State whose records are live.
func New() *State { return &State{ch: make(chan struct{}, 1)} }

// Set records why the records may have lapsed (nil: they are live again),
// and signals on Changes when that differs from what was set before: from
// nil or to nil, or another reason. It never blocks.
func (s *State) Set(why error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if same(s.lapsed, why) {
		return
	}
	s.lapsed = why
	select {
	case s.ch <- struct{}{}:
	default: // a signal is pending already
	}
}

// Lapsed returns what was set last.
func (s *State) Lapsed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lapsed
}

// Changes receives after changes of what Lapsed returns; the changes a
// receiver missed while it did not receive are one signal.
func (s *State) Changes() <-chan struct{} { return s.ch }

// same reports whether a and b say the same: both nil, or the same message.
func same(a, b error) bool {
	if a == nil || b == nil {
		return (a == nil) == (b == nil)
	}
	return a.Error() == b.Error()
}
