package connstate

import (
	"errors"
	"slices"
	"testing"

	"github.com/go-logr/logr"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

// handler records the connection states it hears of.
type handler []bool

func (h *handler) OnUpdate(registry.Update) {}

func (h *handler) OnConnection(connected bool, _ error) { *h = append(*h, connected) }

func TestReportChangesOnly(t *testing.T) {
	var s State
	var h handler
	if s.Connected() {
		t.Fatal("connected before any report")
	}
	down := errors.New("down")
	for _, c := range []bool{false, false, true, true, false, true} {
		var err error
		if !c {
			err = down
		}
		s.Report(logr.Discard(), &h, c, err)
		if s.Connected() != c {
			t.Errorf("Connected() = %t after reporting %t", s.Connected(), c)
		}
	}
	if want := (handler{false, true, false, true}); !slices.Equal(h, want) {
		t.Errorf("handler heard %v, want %v", h, want)
	}
}
