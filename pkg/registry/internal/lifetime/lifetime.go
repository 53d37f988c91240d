package lifetime

import (
	"context"
	"time"

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

// Ended is what a call bound by Bind returns once it is over, given the
// context Bind returned and the backend's: registry.ErrClosed when the
// backend is closed, or else ctx's error.
func Ended(ctx, backend context.Context) error {
	if backend.Err() != nil {
		return registry.ErrClosed
	}
	return ctx.Err()
}

// Sleep waits d, and reports false if ctx ends first.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
