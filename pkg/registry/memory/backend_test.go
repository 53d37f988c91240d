package memory_test

import (
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
}
