package lifetime

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

func TestBind(t *testing.T) {
	t.Run("backend closed first", func(t *testing.T) {
		backend, closeBackend := context.WithCancel(context.Background())
		ctx, release, err := Bind(context.Background(), backend)
		if err != nil {
			t.Fatal(err)
		}
		defer release()
		closeBackend()
		<-ctx.Done()
	})
	t.Run("call ends first", func(t *testing.T) {
		backend, closeBackend := context.WithCancel(context.Background())
		defer closeBackend()
		parent, end := context.WithCancel(context.Background())
		ctx, release, err := Bind(parent, backend)
		if err != nil {
			t.Fatal(err)
		}
		defer release()
		end()
		<-ctx.Done()
		if backend.Err() != nil {
			t.Error("ending the call closed the backend")
		}
	})
	t.Run("released", func(t *testing.T) {
		ctx, release, err := Bind(context.Background(), context.Background())
		if err != nil {
			t.Fatal(err)
		}
		release()
		if ctx.Err() == nil {
			t.Error("context not done after release")
		}
	})
	t.Run("backend already closed", func(t *testing.T) {
		backend, closeBackend := context.WithCancel(context.Background())
		closeBackend()
		if _, _, err := Bind(context.Background(), backend); !errors.Is(err, registry.ErrClosed) {
			t.Errorf("Bind on a closed backend: %v, want ErrClosed", err)
		}
	})
}

func TestSleep(t *testing.T) {
	if !Sleep(context.Background(), time.Millisecond) {
		t.Error("Sleep of a live context reported it done")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Sleep(ctx, time.Hour) {
		t.Error("Sleep of a done context waited its whole duration")
	}
}

func TestEnded(t *testing.T) {
	backend, closeBackend := context.WithCancel(context.Background())
	ctx, end := context.WithCancel(context.Background())
	end()
	if err := Ended(ctx, backend); !errors.Is(err, context.Canceled) {
		t.Errorf("Ended after the call's context ended: %v, want context.Canceled", err)
	}
	closeBackend()
	if err := Ended(ctx, backend); !errors.Is(err, registry.ErrClosed) {
		t.Errorf("Ended after the backend closed: %v, want ErrClosed", err)
	}
}
