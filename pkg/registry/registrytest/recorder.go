package registrytest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	"github.com/mcsd-io/mcsd/pkg/registry"
)

// Event is one Handler call.
type Event struct {
	// Update is set for OnUpdate.
	Update *registry.Update
	// Connected and Err are the arguments of OnConnection.
	Connected bool
	Err       error
}

func (e Event) String() string {
	if e.Update == nil {
		return fmt.Sprintf("OnConnection(%t, %v)", e.Connected, e.Err)
	}
	return fmt.Sprintf("OnUpdate(%+v)", *e.Update)
}

// View is the state a sequence of updates builds.
type View struct {
	Exports   map[registry.RecordID]registry.Export
	Endpoints map[registry.RecordID]registry.Endpoints
	Clusters  map[string]registry.Cluster
	// Connected is the last connection state reported, true until a
	// disconnection is.
	Connected bool
}

func newView() *View {
	return &View{
		Exports:   map[registry.RecordID]registry.Export{},
		Endpoints: map[registry.RecordID]registry.Endpoints{},
		Clusters:  map[string]registry.Cluster{},
		Connected: true,
	}
}

func (v *View) apply(e Event) {
	if e.Update == nil {
		v.Connected = e.Connected
		return
	}
	u := e.Update
	if u.Full {
		clear(v.Exports)
		clear(v.Endpoints)
		clear(v.Clusters)
	}
	for _, id := range u.DeletedExports {
		delete(v.Exports, id)
	}
	for _, id := range u.DeletedEndpoints {
		delete(v.Endpoints, id)
	}
	for _, c := range u.DeletedClusters {
		delete(v.Clusters, c)
	}
	for _, x := range u.Exports {
		v.Exports[registry.RecordID{Cluster: x.Cluster, Service: x.Service}] = x
	}
	for _, x := range u.Endpoints {
		v.Endpoints[registry.RecordID{Cluster: x.Cluster, Service: x.Service}] = x
	}
	for _, c := range u.Clusters {
		v.Clusters[c.ID] = c
	}
}

// Recorder is a registry.Handler that queues the calls it receives; a test
// consumes them with Next, WaitFor and Quiet, which apply them to View.
type Recorder struct {
	events  chan Event
	view    *View
	updates int
	// inCall and overlapped detect concurrent Handler calls.
	inCall     atomic.Bool
	overlapped atomic.Bool
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder {
	return &Recorder{events: make(chan Event, 4096), view: newView()}
}

// OnUpdate implements registry.Handler.
func (r *Recorder) OnUpdate(u registry.Update) {
	r.enter()
	defer r.inCall.Store(false)
	r.events <- Event{Update: &u}
}

// OnConnection implements registry.Handler.
func (r *Recorder) OnConnection(connected bool, err error) {
	r.enter()
	defer r.inCall.Store(false)
	r.events <- Event{Connected: connected, Err: err}
}

func (r *Recorder) enter() {
	if !r.inCall.CompareAndSwap(false, true) {
		r.overlapped.Store(true)
	}
}

// View is the state built from the events consumed so far.
func (r *Recorder) View() *View { return r.view }

// Updates counts the updates consumed so far.
func (r *Recorder) Updates() int { return r.updates }

// Next consumes the next event, failing t after timeout.
func (r *Recorder) Next(t testing.TB, timeout time.Duration) Event {
	t.Helper()
	e, ok := r.next(timeout)
	if !ok {
		t.Fatalf("no handler call within %s", timeout)
	}
	return e
}

func (r *Recorder) next(timeout time.Duration) (Event, bool) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case e := <-r.events:
		r.view.apply(e)
		if e.Update != nil {
			r.updates++
		}
		return e, true
	case <-timer.C:
		return Event{}, false
	}
}

// WaitFor consumes events until cond, called after each event is applied to
// the view, holds; it returns the events consumed, the last one included.
// It fails t if cond does not hold within timeout, and logs a wait that took
// more than half of it (NearMiss), which a busier machine would fail.
func (r *Recorder) WaitFor(t testing.TB, timeout time.Duration, what string, cond func(e Event, v *View) bool) []Event {
	t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	var seen []Event
	for {
		e, ok := r.next(time.Until(deadline))
		if !ok {
			t.Fatalf("waited %s for %s; got:\n%s", timeout, what, eventList(seen))
		}
		seen = append(seen, e)
		if cond(e, r.view) {
			poll.NearMiss(t, time.Since(start), timeout, what)
			return seen
		}
	}
}

// Quiet consumes events for d and fails t if any is bad.
func (r *Recorder) Quiet(t testing.TB, d time.Duration, what string, bad func(e Event) bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return
		}
		e, ok := r.next(left)
		if !ok {
			return
		}
		if bad(e) {
			t.Fatalf("%s: %s", what, e)
		}
	}
}

func eventList(events []Event) string {
	if len(events) == 0 {
		return "  (nothing)"
	}
	var b strings.Builder
	for _, e := range events {
		fmt.Fprintf(&b, "  %s\n", e)
	}
	return b.String()
}

// StartWatch runs reg.Watch with a new Recorder until the end of the test,
// and checks then that Watch returned as it should and that the handler was
// never called concurrently.
func StartWatch(t testing.TB, reg registry.Watcher) *Recorder {
	t.Helper()
	r := NewRecorder()
	startWatch(t, reg, r, r)
	return r
}

// ScopedRecorder is a Recorder that needs the namespaces given to Need
// only (registry.Scoped).
type ScopedRecorder struct {
	*Recorder
	registry.Needed
}

// StartScopedWatch is StartWatch with a ScopedRecorder that needs
// namespaces.
func StartScopedWatch(t testing.TB, reg registry.Watcher, namespaces ...string) *ScopedRecorder {
	t.Helper()
	r := &ScopedRecorder{Recorder: NewRecorder()}
	r.Need(namespaces...)
	startWatch(t, reg, r.Recorder, r)
	return r
}

// startWatch runs reg.Watch with h, which hands its calls to r, until the
// end of the test (StartWatch).
func startWatch(t testing.TB, reg registry.Watcher, r *Recorder, h registry.Handler) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- reg.Watch(ctx, h) }()
	t.Cleanup(func() {
		cancel()
		timeout := time.After(10 * time.Second)
	wait:
		for {
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) && !errors.Is(err, registry.ErrClosed) {
					t.Errorf("Watch() = %v, want context.Canceled or registry.ErrClosed", err)
				}
				break wait
			case <-r.events:
				// Unblock a handler call stuck on a full queue.
			case <-timeout:
				t.Errorf("Watch did not return within 10s of its context being canceled")
				break wait
			}
		}
		if r.overlapped.Load() {
			t.Errorf("handler called concurrently")
		}
	})
}
