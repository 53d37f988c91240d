package embedded

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{name: "defaults", cfg: Config{DataDir: "/tmp/x"}},
		{name: "port zero", cfg: Config{DataDir: "/tmp/x", ListenClientURL: "http://127.0.0.1:0", ListenPeerURL: "http://127.0.0.1:0"}},
		{name: "no data dir", cfg: Config{}, wantErr: "no data dir"},
		{name: "host name", cfg: Config{DataDir: "/tmp/x", ListenClientURL: "http://etcd:2379"}, wantErr: "IP address"},
		{name: "scheme", cfg: Config{DataDir: "/tmp/x", ListenClientURL: "unix://x:1"}, wantErr: "scheme"},
		{name: "https without cert", cfg: Config{DataDir: "/tmp/x", ListenClientURL: "https://127.0.0.1:2379"}, wantErr: "certificate"},
		{name: "cert without https", cfg: Config{DataDir: "/tmp/x", CertFile: "c", KeyFile: "k"}, wantErr: "https"},
		{name: "cert without key", cfg: Config{DataDir: "/tmp/x", ListenClientURL: "https://127.0.0.1:2379", CertFile: "c"}, wantErr: "together"},
		{name: "https peer without cert", cfg: Config{DataDir: "/tmp/x", ListenPeerURL: "https://127.0.0.1:2380"}, wantErr: "peer certificate"},
		{name: "peer cert without https", cfg: Config{DataDir: "/tmp/x", PeerCertFile: "c", PeerKeyFile: "k"}, wantErr: "https peer url"},
		{name: "peer cert without key", cfg: Config{DataDir: "/tmp/x", ListenPeerURL: "https://127.0.0.1:2380", PeerCertFile: "c"}, wantErr: "together"},
		{name: "plain peer on all addresses beside a secured registry", cfg: Config{DataDir: "/tmp/x", ListenClientURL: "https://0.0.0.0:2379",
			CertFile: "c", KeyFile: "k", TrustedCAFile: "ca", ListenPeerURL: "http://0.0.0.0:2380"}, wantErr: "plain http peer listener"},
		{name: "plain peer on loopback beside a secured registry", cfg: Config{DataDir: "/tmp/x", ListenClientURL: "https://0.0.0.0:2379",
			CertFile: "c", KeyFile: "k", TrustedCAFile: "ca", ListenPeerURL: "http://[::1]:2380"}},
		{name: "secured peer beside a secured registry", cfg: Config{DataDir: "/tmp/x", ListenClientURL: "https://0.0.0.0:2379",
			CertFile: "c", KeyFile: "k", TrustedCAFile: "ca", ListenPeerURL: "https://0.0.0.0:2380", PeerCertFile: "p", PeerKeyFile: "pk", PeerTrustedCAFile: "ca"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Default()
			err := tc.cfg.Validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("Validate() = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestRestartKeepsData starts two servers on free ports side by side, then
// restarts one on its data dir and client URL.
func TestRestartKeepsData(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "etcd")
	s := start(t, Config{DataDir: dir})
	other := start(t, Config{DataDir: filepath.Join(t.TempDir(), "etcd")})
	if s.ClientURL() == other.ClientURL() {
		t.Fatalf("two servers share client URL %s", s.ClientURL())
	}
	if !strings.HasPrefix(s.ClientURL(), "http://127.0.0.1:") || strings.HasSuffix(s.ClientURL(), ":0") {
		t.Fatalf("ClientURL() = %q, want a bound loopback port", s.ClientURL())
	}

	put(t, s.ClientURL(), "k", "v")
	url := s.ClientURL()
	s.Close()
	s.Close() // idempotent

	s2 := start(t, Config{DataDir: dir, ListenClientURL: url})
	if got := get(t, s2.ClientURL(), "k"); got != "v" {
		t.Fatalf("after restart k = %q, want %q", got, "v")
	}
}

func start(t *testing.T, cfg Config) *Server {
	t.Helper()
	if cfg.ListenClientURL == "" {
		cfg.ListenClientURL = "http://127.0.0.1:0"
	}
	cfg.ListenPeerURL = "http://127.0.0.1:0"
	cfg.UnsafeNoFsync = true
	s, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Start() = %v", err)
	}
	t.Cleanup(s.Close)
	readyCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.WaitReady(readyCtx); err != nil {
		t.Fatal(err)
	}
	return s
}

func client(t *testing.T, url string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("clientv3.New() = %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func put(t *testing.T, url, k, v string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := client(t, url).Put(ctx, k, v); err != nil {
		t.Fatalf("Put() = %v", err)
	}
}

func get(t *testing.T, url, k string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := client(t, url).Get(ctx, k)
	if err != nil {
		t.Fatalf("Get() = %v", err)
	}
	if len(resp.Kvs) == 0 {
		return ""
	}
	return string(resp.Kvs[0].Value)
}
