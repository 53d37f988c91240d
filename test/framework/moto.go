package framework

import (
	"context"
	"fmt"
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
