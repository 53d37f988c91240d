package etcd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"

	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/etcd/embedded"
)

// TestProbe runs the probe against real listeners on the loopback: each
// misconfiguration is named at once with what to change; reachable
// registries, and causes retrying may fix, pass.
func TestProbe(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	clients := []embedded.ClientCert{{Name: "client", CommonName: "mcsd:prod:east"}}
	if err := embedded.WriteCerts(dir, []string{"127.0.0.1"}, clients); err != nil {
		t.Fatal(err)
	}
	if err := embedded.WriteCerts(other, []string{"127.0.0.1"}, clients); err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	ca, err := os.ReadFile(filepath.Join(dir, embedded.CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	pool.AppendCertsFromPEM(ca)
	serverCert, err := tls.LoadX509KeyPair(filepath.Join(dir, embedded.ServerCertFile), filepath.Join(dir, embedded.ServerKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	tlsServer := func(clientAuth tls.ClientAuthType) string {
		s := httptest.NewUnstartedServer(http.NotFoundHandler())
		s.Config.ErrorLog = log.New(io.Discard, "", 0)
		s.TLS = &tls.Config{Certificates: []tls.Certificate{serverCert}, ClientAuth: clientAuth, ClientCAs: pool, MinVersion: tls.VersionTLS12}
		s.StartTLS()
		t.Cleanup(s.Close)
		return strings.TrimPrefix(s.URL, "https://")
	}
	plain := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(plain.Close)
	plainAddr := strings.TrimPrefix(plain.URL, "http://")
	tlsOpen, tlsMTLS := tlsServer(tls.NoClientCert), tlsServer(tls.RequireAndVerifyClientCert)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	_ = ln.Close()

	clientTLS := func(caDir, certDir string) *tls.Config {
		info := transport.TLSInfo{}
		if caDir != "" {
			info.TrustedCAFile = filepath.Join(caDir, embedded.CACertFile)
		}
		if certDir != "" {
			info.CertFile, info.KeyFile = filepath.Join(certDir, "client.crt"), filepath.Join(certDir, "client.key")
		}
		cfg, err := info.ClientConfig()
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	tests := []struct {
		name     string
		endpoint string
		tls      *tls.Config
		want     string // "" for no error
	}{
		{"plain registry, etcd://", "http://" + plainAddr, nil, ""},
		{"TLS registry, etcds:// with its CA", "https://" + tlsOpen, clientTLS(dir, ""), ""},
		{"mutual TLS with a certificate of its CA", "https://" + tlsMTLS, clientTLS(dir, dir), ""},
		{"nothing listens", "http://" + closed, nil, "connection refused"},
		{"TLS registry, etcd://", "http://" + tlsOpen, nil, "use etcds://"},
		{"plain registry, etcds://", "https://" + plainAddr, clientTLS(dir, ""), "use etcd://"},
		{"etcds:// without the registry's CA", "https://" + tlsOpen, &tls.Config{MinVersion: tls.VersionTLS12}, "--registry-ca"},
		{"a name the certificate does not have", "https://localhost:" + strings.Split(tlsOpen, ":")[1], clientTLS(dir, ""), "not valid for this address"},
		{"client certificate required, none given", "https://" + tlsMTLS, clientTLS(dir, ""), "--registry-cert and --registry-key"},
		{"client certificate of another CA", "https://" + tlsMTLS, clientTLS(dir, other), "refused this client certificate"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := probe(context.Background(), []string{tc.endpoint}, tc.tls, 0)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("probe: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, registry.ErrMisconfigured) {
				t.Fatalf("probe: %v, want ErrMisconfigured saying %q", err, tc.want)
			}
			host := strings.TrimPrefix(strings.TrimPrefix(tc.endpoint, "http://"), "https://")
			if !strings.Contains(err.Error(), host) {
				t.Errorf("%q does not name the address %s", err, host)
			}
		})
	}
	t.Run("one endpoint right is enough", func(t *testing.T) {
		if err := probe(context.Background(), []string{"http://" + closed, "http://" + plainAddr}, nil, 0); err != nil {
			t.Fatal(err)
		}
	})
}

// TestProbeWaitsForARegistryOnItsWay: a refused connection is looked at
// again for a while; a registry that starts listening meanwhile passes.
func TestProbeWaitsForARegistryOnItsWay(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	started := make(chan struct{})
	go func() {
		time.Sleep(300 * time.Millisecond) // the registry comes up while the probe waits
		l, err := net.Listen("tcp", addr)
		if err == nil {
			t.Cleanup(func() { _ = l.Close() })
		}
		close(started)
	}()
	err = probe(context.Background(), []string{"http://" + addr}, nil, 10*time.Second)
	<-started
	if err != nil {
		t.Fatalf("probe of a registry that came up: %v", err)
	}
}
