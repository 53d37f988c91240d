package embedded

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSecurePeerListener starts a server whose peer listener uses TLS with
// peer certificates of the registry's CA: a request without a certificate
// gets no answer from raft's peer API, plain HTTP neither; one with the peer
// certificate does.
func TestSecurePeerListener(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := WriteCerts(dir, []string{"127.0.0.1"}, []ClientCert{{Name: "client", CommonName: "mcsd:prod:east"}}); err != nil {
		t.Fatal(err)
	}
	s, err := Start(context.Background(), Config{
		DataDir:         filepath.Join(dir, "etcd"),
		ListenClientURL: "https://127.0.0.1:0", CertFile: filepath.Join(dir, ServerCertFile), KeyFile: filepath.Join(dir, ServerKeyFile),
		TrustedCAFile: filepath.Join(dir, CACertFile),
		ListenPeerURL: "https://127.0.0.1:0", PeerCertFile: filepath.Join(dir, PeerCertFile), PeerKeyFile: filepath.Join(dir, PeerKeyFile),
		PeerTrustedCAFile: filepath.Join(dir, CACertFile), PeerAllowedCNs: []string{PeerCommonName},
		UnsafeNoFsync: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(s.PeerURL(), "https://127.0.0.1:") {
		t.Fatalf("PeerURL() = %q", s.PeerURL())
	}

	caPEM, err := os.ReadFile(filepath.Join(dir, CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	get := func(cfg *tls.Config, url string) (string, error) {
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
		resp, err := c.Get(url)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return string(b), &httpError{resp.StatusCode}
		}
		return string(b), err
	}
	members := s.PeerURL() + "/members"
	if out, err := get(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, members); err == nil {
		t.Errorf("/members answered without a client certificate: %s", out)
	}
	if out, err := get(nil, "http://"+strings.TrimPrefix(s.PeerURL(), "https://")+"/version"); err == nil {
		t.Errorf("/version answered over plain http: %s", out)
	}
	// A client's certificate of the same CA is no peer's.
	client, err := tls.LoadX509KeyPair(filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key"))
	if err != nil {
		t.Fatal(err)
	}
	if out, err := get(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{client}, MinVersion: tls.VersionTLS12}, members); err == nil {
		t.Errorf("/members answered a cluster's client certificate: %s", out)
	}
	peer, err := tls.LoadX509KeyPair(filepath.Join(dir, PeerCertFile), filepath.Join(dir, PeerKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	out, err := get(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{peer}, MinVersion: tls.VersionTLS12}, members)
	if err != nil || !strings.Contains(out, `"name":"mcsd"`) {
		t.Errorf("/members with the peer certificate: %q, %v", out, err)
	}
}

type httpError struct{ code int }

func (e *httpError) Error() string { return http.StatusText(e.code) }
