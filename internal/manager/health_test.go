package manager

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
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
