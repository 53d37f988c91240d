package framework

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/cloudmap"
	"github.com/mcsd-io/mcsd/pkg/registry/cloudmap/mototest"
)

// Moto is a local Cloud Map emulator (moto) for the e2e packages that run
// mcsd on the Cloud Map registry backend.
type Moto struct {
	*mototest.Server
}

// StartMoto starts moto; Stop stops it.
func StartMoto(ctx context.Context) (*Moto, error) {
	s, err := mototest.Run(ctx)
	if err != nil {
		return nil, fmt.Errorf("start moto (needs python3; see hack/moto): %w", err)
	}
	return &Moto{Server: s}, nil
}

// Options are the Cloud Map backend's options for cluster id on moto, with
// a short TTL and a quick poll, for tests.
func (m *Moto) Options(id registry.Identity) cloudmap.Options {
	return cloudmap.Options{
		Identity:      id,
		Region:        mototest.Region,
		Endpoint:      m.URL,
		Credentials:   mototest.Credentials,
		TTL:           10 * time.Second,
		PollInterval:  300 * time.Millisecond,
		SweepInterval: 30 * time.Second,
	}
}

// Open opens the Cloud Map backend for id on moto: Options.OpenRegistry.
func (m *Moto) Open(ctx context.Context, id registry.Identity) (registry.Registry, error) {
	return cloudmap.New(ctx, m.Options(id))
}

// MainOnMoto is Main with Cloud Map on moto as the registry: it starts moto
// (StartMoto), runs Main with opts.OpenRegistry opening it, and stops moto.
// moto, when not nil, is set to the running emulator for the tests.
func MainOnMoto(m *testing.M, opts Options, ready func(context.Context, *Env) error, moto **Moto) int {
	mo, err := StartMoto(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer mo.Stop()
	if moto != nil {
		*moto = mo
	}
	opts.OpenRegistry = mo.Open
	return Main(m, opts, ready)
}
