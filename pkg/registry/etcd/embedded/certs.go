package embedded

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Files of the certificate directory WriteCerts fills.
const (
	CACertFile     = "ca.crt"
	CAKeyFile      = "ca.key"
	ServerCertFile = "server.crt"
	ServerKeyFile  = "server.key"
	PeerCertFile   = "peer.crt"
	PeerKeyFile    = "peer.key"
)

// PeerCommonName is the common name of the peer certificate WriteCerts
// makes: the one a secured peer listener lets in (Config.PeerAllowedCNs).
const PeerCommonName = "mcsd registry peer"

// certValidity is how long the certificates WriteCerts makes are valid.
const certValidity = 365 * 24 * time.Hour

// ClientCert is a client certificate to make: etcd takes the user from its
// common name.
type ClientCert struct {
	// Name names the files, Name.crt and Name.key.
	Name string
	// CommonName is the etcd user.
	CommonName string
}

// WriteCerts makes, in dir, a CA (ca.crt, ca.key), a server certificate
// for hosts (IP addresses or DNS names; server.crt, server.key), a peer
// certificate for the same hosts, for raft's peer listener (peer.crt,
// peer.key: server and client use) and the client certificates, all valid
// for a year. It is for trying mcsd out: a
// CA and certificates already in dir are kept, so that running it again
// adds only what is missing.
func WriteCerts(dir string, hosts []string, clients []ClientCert) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("certificate dir: %w", err)
	}
	ca, caKey, err := loadOrMakeCA(dir)
	if err != nil {
		return err
	}
	server := hostCert("mcsd registry", hosts, x509.ExtKeyUsageServerAuth)
	if err := writeSigned(dir, ServerCertFile, ServerKeyFile, server, ca, caKey); err != nil {
		return err
	}
	peer := hostCert(PeerCommonName, hosts, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	if err := writeSigned(dir, PeerCertFile, PeerKeyFile, peer, ca, caKey); err != nil {
		return err
	}
	for _, c := range clients {
		tmpl := &x509.Certificate{
			Subject:     pkix.Name{CommonName: c.CommonName},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}
		if err := writeSigned(dir, c.Name+".crt", c.Name+".key", tmpl, ca, caKey); err != nil {
			return err
		}
	}
	return nil
}

// hostCert is the template of a certificate for hosts (IP addresses or DNS
// names).
func hostCert(cn string, hosts []string, usage ...x509.ExtKeyUsage) *x509.Certificate {
	c := &x509.Certificate{Subject: pkix.Name{CommonName: cn}, ExtKeyUsage: usage}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			c.IPAddresses = append(c.IPAddresses, ip)
		} else {
			c.DNSNames = append(c.DNSNames, h)
		}
	}
	return c
}

func loadOrMakeCA(dir string) (*x509.Certificate, crypto.Signer, error) {
	certPEM, certErr := os.ReadFile(filepath.Join(dir, CACertFile))
	keyPEM, keyErr := os.ReadFile(filepath.Join(dir, CAKeyFile))
	if certErr == nil && keyErr == nil {
		return parseCA(certPEM, keyPEM)
	}
	if !errors.Is(certErr, fs.ErrNotExist) || !errors.Is(keyErr, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("read CA in %s: need both %s and %s: %w", dir, CACertFile, CAKeyFile, errors.Join(certErr, keyErr))
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "mcsd registry CA"},
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := sign(tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, err
	}
	if err := writePEM(dir, CACertFile, CAKeyFile, der, key); err != nil {
		return nil, nil, err
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("parse CA: %w", err)
	}
	return ca, key, nil
}

func parseCA(certPEM, keyPEM []byte) (*x509.Certificate, crypto.Signer, error) {
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, nil, errors.New("CA: no PEM block")
	}
	ca, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("parse CA: %w", err)
	}
	key, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("parse CA key: %w", err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, nil, errors.New("CA key cannot sign")
	}
	return ca, signer, nil
}

// writeSigned makes a certificate from tmpl signed by the CA, unless its
// file exists.
func writeSigned(dir, certFile, keyFile string, tmpl, ca *x509.Certificate, caKey crypto.Signer) error {
	if _, err := os.Stat(filepath.Join(dir, certFile)); err == nil {
		return nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("key for %s: %w", certFile, err)
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := sign(tmpl, ca, key.Public(), caKey)
	if err != nil {
		return err
	}
	return writePEM(dir, certFile, keyFile, der, key)
}

func sign(tmpl, parent *x509.Certificate, pub crypto.PublicKey, signer crypto.Signer) ([]byte, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("serial number: %w", err)
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(certValidity)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
	if err != nil {
		return nil, fmt.Errorf("certificate %s: %w", tmpl.Subject.CommonName, err)
	}
	return der, nil
}

func writePEM(dir, certFile, keyFile string, der []byte, key *ecdsa.PrivateKey) error {
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("key for %s: %w", certFile, err)
	}
	if err := os.WriteFile(filepath.Join(dir, keyFile), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return fmt.Errorf("write key: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, certFile), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return fmt.Errorf("write certificate: %w", err)
	}
	return nil
}
