package manager

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// health serves /healthz and /readyz for the whole life of Run, so that a
// replica waiting for its cluster identity or for leadership answers its
// probes too. /healthz answers while the process runs; /readyz answers what
// the current phase says.
type health struct {
	mu    sync.Mutex
	ready func() error
}

// set makes /readyz answer with check's result from now on.
func (h *health) set(check func() error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ready = check
}

// notReady makes /readyz fail with a fixed reason.
func (h *health) notReady(reason string) {
	err := errors.New(reason)
	h.set(func() error { return err })
}

func (h *health) check() error {
	h.mu.Lock()
	check := h.ready
	h.mu.Unlock()
	if check == nil {
		return errors.New("starting")
	}
	return check()
}

func (h *health) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := h.check(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	return mux
}

// serve listens on addr (or serves l, when set) until ctx ends. "0"
// serves nothing.
func (h *health) serve(ctx context.Context, addr string, l net.Listener) (func(), error) {
	if l == nil {
		if addr == "0" {
			return func() {}, nil
		}
		var err error
		if l, err = net.Listen("tcp", addr); err != nil {
			return nil, fmt.Errorf("listen for health probes on %s: %w", addr, err)
		}
	}
	srv := &http.Server{Handler: h.handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logr.FromContextOrDiscard(ctx).Error(err, "health probe server stopped")
		}
	}()
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}, nil
}
