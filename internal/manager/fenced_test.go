package manager

import (
	"errors"
	"testing"
	"time"

	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/memory"
)

// fencedRegistry is a backend that another cluster fenced off its id.
type fencedRegistry struct {
	registry.Registry
	err error
}

func (f fencedRegistry) Fenced() error { return f.err }

// TestFencedCheck: the controllers are not ready while the backend says
// another cluster took the cluster id; a backend that cannot tell is no
// reason.
func TestFencedCheck(t *testing.T) {
	inUse := registry.Identity{ClusterSet: "set", Cluster: "c1", Instance: "uid-1"}.InUseBy("uid-2", time.Time{})
	if err := fencedCheck(fencedRegistry{err: inUse})(); !errors.Is(err, registry.ErrClusterIDInUse) {
		t.Errorf("fenced backend: %v, want ErrClusterIDInUse", err)
	}
	if err := fencedCheck(fencedRegistry{})(); err != nil {
		t.Errorf("backend not fenced: %v, want nil", err)
	}
	reg, err := memory.NewStore().Open(memory.Options{Identity: registry.Identity{ClusterSet: "set", Cluster: "c1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = reg.Close() }()
	if err := fencedCheck(reg)(); err != nil {
		t.Errorf("a backend without Fenced: %v, want nil", err)
	}
}
