package manager

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcsd-io/mcsd/internal/testutil/poll"
)

func TestHealthFollowsPhases(t *testing.T) {
	h := &health{}
	srv := httptest.NewServer(h.handler())
	defer srv.Close()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		var b strings.Builder
		buf := make([]byte, 512)
		n, _ := resp.Body.Read(buf)
		b.Write(buf[:n])
		return resp.StatusCode, b.String()
	}
	if code, _ := get("/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("before any phase: /readyz = %d, want 503", code)
	}
	h.notReady("waiting for the cluster identity")
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "cluster identity") {
		t.Fatalf("waiting: /readyz = %d %q", code, body)
	}
	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz = %d while waiting, want 200", code)
	}
	synced := false
	h.set(func() error {
		if !synced {
			return errors.New("registry not synced yet")
		}
		return nil
	})
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "registry not synced") {
		t.Fatalf("unsynced: /readyz = %d %q", code, body)
	}
	synced = true
	if code, _ := get("/readyz"); code != http.StatusOK {
		t.Fatalf("synced: /readyz = %d, want 200", code)
	}
}

// failingReader fails every read, counting them.
type failingReader struct {
	client.Reader
	reads atomic.Int32
}

func (f *failingReader) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	f.reads.Add(1)
	return errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
}

func (f *failingReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	f.reads.Add(1)
	return errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
}

// TestIdentityWaitSaysWhy: while the identity cannot be read, /readyz says
// why, and the log says it once, not at every try.
func TestIdentityWaitSaysWhy(t *testing.T) {
	var logged atomic.Int32
	log := funcr.New(func(string, string) { logged.Add(1) }, funcr.Options{})
	ctx, cancel := context.WithCancel(logr.NewContext(t.Context(), log))
	r := &failingReader{}
	h := &health{}
	done := make(chan error, 1)
	go func() {
		_, err := waitForIdentity(ctx, r, time.Millisecond, h)
		done <- err
	}()
	poll.Until(t, 10*time.Second, "ten tries", func() (bool, string) { return r.reads.Load() >= 10, "" })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("waitForIdentity = %v, want context.Canceled", err)
	}
	if err := h.check(); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("/readyz says %v, want why the identity cannot be read", err)
	}
	if n := logged.Load(); n != 1 {
		t.Errorf("%d log lines for one failure repeated, want 1", n)
	}
}
