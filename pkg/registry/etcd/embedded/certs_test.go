package embedded

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
)

// TestWriteCerts: the certificates verify against the CA for their use, and
// a second run keeps what exists and adds what is missing.
func TestWriteCerts(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	if err := WriteCerts(dir, []string{"127.0.0.1", "etcd.example"}, []ClientCert{{Name: "east", CommonName: "mcsd:prod:east"}}); err != nil {
		t.Fatal(err)
	}
	ca := readCert(t, filepath.Join(dir, CACertFile))
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	server := readCert(t, filepath.Join(dir, ServerCertFile))
	for _, host := range []string{"127.0.0.1", "etcd.example"} {
		if _, err := server.Verify(x509.VerifyOptions{Roots: roots, DNSName: host}); err != nil {
			t.Errorf("server certificate for %s: %v", host, err)
		}
	}
	east := readCert(t, filepath.Join(dir, "east.crt"))
	if _, err := east.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil || east.Subject.CommonName != "mcsd:prod:east" {
		t.Errorf("client certificate %q: %v", east.Subject.CommonName, err)
	}
	if info, err := os.Stat(filepath.Join(dir, "east.key")); err != nil {
		t.Error(err)
	} else if info.Mode().Perm() != 0o600 {
		t.Errorf("east.key mode %v, want 0600", info.Mode().Perm())
	}

	if err := WriteCerts(dir, nil, []ClientCert{{Name: "east", CommonName: "other"}, {Name: "west", CommonName: "mcsd:prod:west"}}); err != nil {
		t.Fatal(err)
	}
	if !readCert(t, filepath.Join(dir, CACertFile)).Equal(ca) || !readCert(t, filepath.Join(dir, "east.crt")).Equal(east) {
		t.Error("a second run replaced the CA or a certificate")
	}
	if _, err := readCert(t, filepath.Join(dir, "west.crt")).Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("west's certificate from the kept CA: %v", err)
	}
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatalf("%s: no PEM", path)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
