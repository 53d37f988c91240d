// Package embeddedtest starts the embedded etcd for tests: one call that
// starts it, waits until it serves clients and closes it when the test ends.
package embeddedtest

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcsd-io/mcsd/pkg/registry/etcd/embedded"
)

// ReadyTimeout is how long Start waits for the server to serve clients.
const ReadyTimeout = 30 * time.Second

// Start starts an embedded etcd of cfg, which gets, where unset, a data
// directory under t.TempDir(), client and peer URLs on free ports of
// 127.0.0.1 (plain http) and no fsync. It fails t unless the server serves
// clients within ReadyTimeout, and closes it when the test ends.
func Start(t testing.TB, cfg embedded.Config) *embedded.Server {
	t.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = filepath.Join(t.TempDir(), "etcd")
	}
	if cfg.ListenClientURL == "" {
		cfg.ListenClientURL = "http://127.0.0.1:0"
	}
	if cfg.ListenPeerURL == "" {
		cfg.ListenPeerURL = "http://127.0.0.1:0"
	}
	cfg.UnsafeNoFsync = true
	srv, err := embedded.Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("start embedded etcd: %v", err)
	}
	t.Cleanup(srv.Close)
	WaitReady(t, srv)
	return srv
}

// WaitReady fails t unless srv serves clients within ReadyTimeout.
func WaitReady(t testing.TB, srv *embedded.Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), ReadyTimeout)
	defer cancel()
	if err := srv.WaitReady(ctx); err != nil {
		t.Fatalf("embedded etcd not ready: %v", err)
	}
}
