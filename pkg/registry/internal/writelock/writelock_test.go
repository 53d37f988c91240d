package writelock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

func TestLock(t *testing.T) {
	closed := make(chan struct{})
	l := New(closed)
	if err := l.Lock(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Held: a second Lock waits for its context.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := l.Lock(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second Lock = %v, want deadline exceeded", err)
	}
	// Closing wakes a waiter with ErrClosed.
	done := make(chan error)
	go func() { done <- l.Lock(context.Background()) }()
	close(closed)
	if err := <-done; !errors.Is(err, registry.ErrClosed) {
		t.Fatalf("Lock while closing = %v, want ErrClosed", err)
	}
	l.Unlock()
	if err := l.Lock(context.Background()); !errors.Is(err, registry.ErrClosed) {
		t.Fatalf("Lock after close = %v, want ErrClosed", err)
	}
}
