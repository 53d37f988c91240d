package metrics

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

// fakeRegistry fails its Publisher calls with err, and its Watch plays
// calls to the handler.
type fakeRegistry struct {
	err   error
	watch func(h registry.Handler)
}

func (f *fakeRegistry) PutExport(context.Context, registry.ServiceKey, registry.ServiceSpec) error {
	return f.err
}

func (f *fakeRegistry) PutEndpoints(context.Context, registry.ServiceKey, []registry.EndpointGroup) error {
	return f.err
}

func (f *fakeRegistry) Publish(context.Context, registry.ServiceKey, registry.ServiceSpec, []registry.EndpointGroup) error {
	return f.err
}

func (f *fakeRegistry) DeleteExport(context.Context, registry.ServiceKey) error { return f.err }

func (f *fakeRegistry) Exported(context.Context) ([]registry.ServiceKey, error) {
	return []registry.ServiceKey{registryKey}, f.err
}

func (f *fakeRegistry) Watch(ctx context.Context, h registry.Handler) error {
	f.watch(h)
	<-ctx.Done()
	return ctx.Err()
}

func (f *fakeRegistry) Close() error { return nil }

func (f *fakeRegistry) Backend() string { return "fake" }

// recordingHandler remembers what it was given.
type recordingHandler struct {
	updates   []registry.Update
	connected []bool
}

func (h *recordingHandler) OnUpdate(u registry.Update) { h.updates = append(h.updates, u) }
func (h *recordingHandler) OnConnection(connected bool, _ error) {
	h.connected = append(h.connected, connected)
}

func TestInstrumentRegistryPublisher(t *testing.T) {
	c := newCollectors()
	f := &fakeRegistry{}
	reg := instrumentRegistry(c, f, "east")
	ctx := context.Background()
	if err := reg.PutExport(ctx, registryKey, registry.ServiceSpec{}); err != nil {
		t.Fatal(err)
	}
	if err := reg.Publish(ctx, registryKey, registry.ServiceSpec{}, nil); err != nil {
		t.Fatal(err)
	}
	if keys, err := reg.Exported(ctx); err != nil || len(keys) != 1 {
		t.Fatalf("Exported = %v, %v", keys, err)
	}
	f.err = errors.New("etcd unavailable")
	if err := reg.PutEndpoints(ctx, registryKey, nil); !errors.Is(err, f.err) {
		t.Fatalf("PutEndpoints error = %v, want the backend's", err)
	}
	_ = reg.DeleteExport(ctx, registryKey)
	// A call whose context has ended is the controller stopping, not a
	// registry error.
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	_ = reg.DeleteExport(canceled, registryKey)

	want := `
# HELP mcsd_registry_operation_errors_total Registry operations that failed; for operation Watch, the times the watch lost the registry or stopped with an error.
# TYPE mcsd_registry_operation_errors_total counter
mcsd_registry_operation_errors_total{backend="fake",cluster="east",operation="DeleteExport"} 1
mcsd_registry_operation_errors_total{backend="fake",cluster="east",operation="Exported"} 0
mcsd_registry_operation_errors_total{backend="fake",cluster="east",operation="Publish"} 0
mcsd_registry_operation_errors_total{backend="fake",cluster="east",operation="PutEndpoints"} 1
mcsd_registry_operation_errors_total{backend="fake",cluster="east",operation="PutExport"} 0
mcsd_registry_operation_errors_total{backend="fake",cluster="east",operation="Watch"} 0
# HELP mcsd_registry_operations_total Registry operations: PutExport, PutEndpoints, Publish, DeleteExport, Exported, and the updates the watch delivered (WatchUpdate; WatchResync for a full state).
# TYPE mcsd_registry_operations_total counter
mcsd_registry_operations_total{backend="fake",cluster="east",operation="DeleteExport"} 2
mcsd_registry_operations_total{backend="fake",cluster="east",operation="Exported"} 1
mcsd_registry_operations_total{backend="fake",cluster="east",operation="Publish"} 1
mcsd_registry_operations_total{backend="fake",cluster="east",operation="PutEndpoints"} 1
mcsd_registry_operations_total{backend="fake",cluster="east",operation="PutExport"} 1
mcsd_registry_operations_total{backend="fake",cluster="east",operation="WatchResync"} 0
mcsd_registry_operations_total{backend="fake",cluster="east",operation="WatchUpdate"} 0
`
	if err := testutil.CollectAndCompare(registryOf(c), strings.NewReader(want),
		"mcsd_registry_operations_total", "mcsd_registry_operation_errors_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(c.registryDuration); n != 5 {
		t.Errorf("%d latency series, want 5 (one per Publisher operation called)", n)
	}
}

func TestInstrumentRegistryWatch(t *testing.T) {
	c := newCollectors()
	connected := func() float64 { return testutil.ToFloat64(c.registryConnected.WithLabelValues("east", "fake")) }
	ctx, cancel := context.WithCancel(context.Background())
	var during []float64
	f := &fakeRegistry{watch: func(h registry.Handler) {
		h.OnUpdate(registry.Update{Full: true})
		h.OnConnection(true, nil)
		during = append(during, connected())
		h.OnUpdate(registry.Update{Exports: []registry.Export{{Cluster: "west", Service: registryKey}}})
		// Lost, reported twice, found again, lost again.
		h.OnConnection(false, errors.New("timeout"))
		h.OnConnection(false, errors.New("timeout"))
		during = append(during, connected())
		h.OnConnection(true, nil)
		h.OnUpdate(registry.Update{Full: true})
		h.OnConnection(false, errors.New("timeout"))
		h.OnConnection(true, nil)
		cancel()
	}}
	h := &recordingHandler{}
	if err := instrumentRegistry(c, f, "east").Watch(ctx, h); !errors.Is(err, context.Canceled) {
		t.Fatalf("Watch = %v", err)
	}
	if len(h.updates) != 3 || len(h.connected) != 6 {
		t.Errorf("handler got %d updates and %d connection reports, want 3 and 6", len(h.updates), len(h.connected))
	}
	if want := []float64{1, 0}; during[0] != want[0] || during[1] != want[1] {
		t.Errorf("mcsd_registry_connected while watching = %v, want %v", during, want)
	}
	if got := connected(); got != 0 {
		t.Errorf("mcsd_registry_connected after the watch ended = %v, want 0", got)
	}
	for op, want := range map[string]float64{opWatchResync: 2, opWatchUpdate: 1} {
		if got := testutil.ToFloat64(c.registryOps.WithLabelValues("east", "fake", op)); got != want {
			t.Errorf("operations %s = %v, want %v", op, got, want)
		}
	}
	if got := testutil.ToFloat64(c.registryErrors.WithLabelValues("east", "fake", opWatch)); got != 2 {
		t.Errorf("Watch errors = %v, want 2 (two losses; the end of the context is none)", got)
	}
}
