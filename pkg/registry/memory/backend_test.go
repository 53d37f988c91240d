package memory_test

import (
	"errors"
	"testing"
	"time"

	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/memory"
	"github.com/mcsd-io/mcsd/pkg/registry/registrytest"
)

func TestConformance(t *testing.T) {
	store := memory.NewStore()
	factory := func(t *testing.T, id registry.Identity, ttl time.Duration) registry.Registry {
		r, err := store.Open(memory.Options{Identity: id, TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Close() })
		return r
	}
	registrytest.Run(t, factory)
	registrytest.RunReadOnly(t, factory, func(t *testing.T, id registry.Identity) registry.Watcher {
		w := store.Watcher(id.ClusterSet)
		t.Cleanup(func() { _ = w.Close() })
		return w
	})
	t.Run("PublishTogether", func(t *testing.T) { registrytest.RunPublishTogether(t, factory) })
	registrytest.RunInstances(t, func(t *testing.T, id registry.Identity, ttl time.Duration) (registry.Registry, error) {
		r, err := store.Open(memory.Options{Identity: id, TTL: ttl})
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() { _ = r.Close() })
		return r, nil
	})
}

// events is a registry.Handler that passes each call on a channel.
type events chan registrytest.Event

func (ev events) OnUpdate(u registry.Update) { ev <- registrytest.Event{Update: &u} }

func (ev events) OnConnection(connected bool, err error) {
	ev <- registrytest.Event{Connected: connected, Err: err}
}

func (ev events) next(t *testing.T) registrytest.Event {
	t.Helper()
	select {
	case e := <-ev:
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("no event from the watch")
		return registrytest.Event{}
	}
}

// TestOutageAndStamp covers what tests of the controllers use: a watcher
// cut off hears nothing until it is read again in full, and Stamp stamps the
// endpoints.
func TestOutageAndStamp(t *testing.T) {
	store := memory.NewStore()
	at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	reg, err := store.Open(memory.Options{Identity: registry.Identity{ClusterSet: "set", Cluster: "east"}, Stamp: func() time.Time { return at }})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = reg.Close() }()
	w := store.Watcher("set")
	defer func() { _ = w.Close() }()
	ev := make(events, 10)
	go func() { _ = w.Watch(t.Context(), ev) }()
	if e := ev.next(t); e.Update == nil || !e.Update.Full {
		t.Fatalf("first event %v, want a full update", e)
	}
	if e := ev.next(t); e.Update != nil || !e.Connected {
		t.Fatalf("second event %v, want connected", e)
	}

	down := errors.New("cut")
	w.Disconnect(down)
	if e := ev.next(t); e.Update != nil || e.Connected || !errors.Is(e.Err, down) {
		t.Fatalf("event %v, want disconnected with %v", e, down)
	}
	key := registry.ServiceKey{Namespace: "ns", Name: "web"}
	if err := reg.PutExport(t.Context(), key, registry.ServiceSpec{Type: registry.ClusterSetIP}); err != nil {
		t.Fatal(err)
	}
	if err := reg.PutEndpoints(t.Context(), key, []registry.EndpointGroup{{AddressType: "IPv4"}}); err != nil {
		t.Fatal(err)
	}
	w.Reconnect()
	e := ev.next(t)
	if e.Update == nil || !e.Update.Full || len(e.Update.Exports) != 1 || len(e.Update.Endpoints) != 1 {
		t.Fatalf("event after reconnecting %v, want a full update with the writes made meanwhile", e)
	}
	if got := e.Update.Endpoints[0].Updated; !got.Equal(at) {
		t.Errorf("endpoints stamped %v, want %v", got, at)
	}
	if e := ev.next(t); e.Update != nil || !e.Connected {
		t.Fatalf("event %v, want connected", e)
	}
}
