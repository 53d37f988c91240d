package writelock

import (
	"context"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

// Lock is a mutex whose Lock honours a context and the backend's life.
type Lock struct {
	sem    chan struct{}
	closed <-chan struct{}
}

// New returns a lock for a backend that is closed when closed is.
func New(closed <-chan struct{}) *Lock {
	return &Lock{sem: make(chan struct{}, 1), closed: closed}
}

// Lock takes the lock. It returns ctx.Err() when ctx ends first, and
// registry.ErrClosed when the backend is closed.
func (l *Lock) Lock(ctx context.Context) error {
	select {
	case <-l.closed:
		return registry.ErrClosed
	default:
	}
	select {
	case l.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-l.closed:
		return registry.ErrClosed
	}
	select {
	case <-l.closed:
		l.Unlock()
		return registry.ErrClosed
	default:
	}
	return nil
}

// Unlock releases the lock.
func (l *Lock) Unlock() { <-l.sem }

// Drain waits until the lock is free and keeps it: a backend's Close, once
// the backend is closed (no Lock succeeds), waits so for the write under
// way.
func (l *Lock) Drain() { l.sem <- struct{}{} }
