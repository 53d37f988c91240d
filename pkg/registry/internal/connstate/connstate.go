package connstate

import (
	"github.com/go-logr/logr"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

// State is the connection state last reported to a handler. Its zero value
// has reported nothing yet.
type State struct {
	// reported is nil until the first report.
	reported *bool
}

// Connected reports whether the state last reported is connected.
func (s *State) Connected() bool {
	return s.reported != nil && *s.reported
}

// Report logs connected and passes it, with err, to h, unless it is the
// state reported last.
func (s *State) Report(log logr.Logger, h registry.Handler, connected bool, err error) {
	if s.reported != nil && *s.reported == connected {
		return
	}
	s.reported = &connected
	if connected {
		log.Info("registry connected")
	} else {
		log.Error(err, "registry disconnected")
	}
	h.OnConnection(connected, err)
}
