package lifetime

import (
	"context"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

// Bind returns a context that is done when ctx is or when backend (the
// backend's own context, cancelled by Close) is, and the function that
// releases it. It fails with registry.ErrClosed when the backend is closed
// already.
func Bind(ctx, backend context.Context) (context.Context, context.CancelFunc, error) {
	if backend.Err() != nil {
		return nil, nil, registry.ErrClosed
	}
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(backend, cancel)
	return ctx, func() {
		stop()
		cancel()
	}, nil
}
