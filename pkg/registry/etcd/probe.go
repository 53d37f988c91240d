package etcd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

// probeTimeout bounds each step of probing one endpoint.
const probeTimeout = 2 * time.Second

// probe checks, before the client's first request, that the endpoints can
// be reached the way opts says, and turns the causes that retrying cannot
// fix into an error at once, naming the address and what to change: a host
// that does not resolve, a refused connection, TLS on one side only, a
// server certificate the client does not trust or that names another host,
// a client certificate the server wants or refuses. It returns nil as soon
// as one endpoint looks right, and also when it cannot tell (a timeout, a
// reset): those are left to the client's retries. The error wraps
// registry.ErrMisconfigured.
//
// A refused connection or a name that does not resolve can also be a
// registry on its way (etcd restarting, a Service whose pods are not ready
// yet): those are looked at again for up to settle before they count.
func probe(ctx context.Context, endpoints []string, tlsConfig *tls.Config, settle time.Duration) error {
	deadline := time.Now().Add(settle)
	for delay := 100 * time.Millisecond; ; delay = min(2*delay, time.Second) {
		var errs []error
		transient := false
		for _, ep := range endpoints {
			err := probeEndpoint(ctx, ep, tlsConfig)
			if err == nil {
				return nil
			}
			var pe *probeError
			transient = transient || (errors.As(err, &pe) && pe.transient)
			errs = append(errs, err)
		}
		err := fmt.Errorf("%w: %w", registry.ErrMisconfigured, errors.Join(errs...))
		if !transient || time.Now().Add(delay).After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(delay):
		}
	}
}

// probeError is a cause probeEndpoint found; transient for one that a
// registry on its way also shows.
type probeError struct {
	msg       string
	transient bool
}

func (e *probeError) Error() string { return e.msg }

// probeEndpoint returns nil when endpoint looks reachable as configured or
// the cause is unclear, else the cause with a hint.
func probeEndpoint(ctx context.Context, endpoint string, tlsConfig *tls.Config) error {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return nil // the client reports a malformed endpoint itself
	}
	addr := u.Host
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%s: %s", addr, fmt.Sprintf(format, args...))
	}
	waiting := func(format string, args ...any) error {
		return &probeError{msg: fmt.Sprintf("%s: %s", addr, fmt.Sprintf(format, args...)), transient: true}
	}
	d := &net.Dialer{Timeout: probeTimeout}
	conn, err := d.DialContext(ctx, "tcp", addr)
	var dnsErr *net.DNSError
	switch {
	case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
		return waiting("host %q does not resolve: check the host name in the registry URL", dnsErr.Name)
	case errors.Is(err, syscall.ECONNREFUSED):
		return waiting("connection refused: nothing listens there; check the address and port in the registry URL, and that etcd runs")
	case err != nil:
		return nil
	}
	_ = conn.Close()

	if u.Scheme != "https" {
		// Plain HTTP asked for: does the server speak TLS instead?
		if speaksTLS(ctx, d, addr) {
			return fail("the registry speaks TLS: use etcds:// (with --registry-ca for its CA, and a client certificate if it asks for one)")
		}
		return nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if tlsConfig != nil {
		cfg = tlsConfig.Clone()
	}
	if cfg.ServerName == "" {
		cfg.ServerName = u.Hostname()
	}
	tconn, err := (&tls.Dialer{NetDialer: d, Config: cfg}).DialContext(ctx, "tcp", addr)
	if err == nil {
		// TLS 1.3 servers judge the client's certificate after the
		// handshake: their alert is the first thing read. The HTTP/2
		// preface makes etcd's gRPC server answer at once (its SETTINGS)
		// when it accepted the certificate.
		c := tconn.(*tls.Conn)
		_ = c.SetDeadline(time.Now().Add(time.Second))
		if _, err = c.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")); err == nil {
			_, err = c.Read(make([]byte, 1))
		}
		_ = c.Close()
		var ne net.Error
		if err == nil || (errors.As(err, &ne) && ne.Timeout()) {
			return nil
		}
	}
	return classifyTLS(addr, err, tlsConfig)
}

// classifyTLS names the cause of a failed TLS connection to addr, or nil
// when it is not one retrying cannot fix.
func classifyTLS(addr string, err error, tlsConfig *tls.Config) error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%s: %s", addr, fmt.Sprintf(format, args...))
	}
	var (
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		header   tls.RecordHeaderError
		alert    tls.AlertError
	)
	hasCert := tlsConfig != nil && (len(tlsConfig.Certificates) > 0 || tlsConfig.GetClientCertificate != nil)
	msg := err.Error()
	switch {
	case errors.As(err, &header):
		return fail("the registry does not speak TLS: use etcd://, or turn on TLS in etcd")
	case errors.As(err, &unknown):
		return fail("its certificate is signed by an authority this client does not trust: pass the registry's CA with --registry-ca")
	case errors.As(err, &hostname):
		return fail("its certificate is not valid for this address (%v): connect by a name or address it is issued for", hostname.Error())
	case errors.As(err, &invalid):
		return fail("its certificate is invalid: %v", invalid.Error())
	case strings.Contains(msg, "certificate required") || (errors.As(err, &alert) && alert == 116):
		return fail("the registry requires a client certificate: pass --registry-cert and --registry-key")
	case strings.Contains(msg, "bad certificate") || strings.Contains(msg, "unknown certificate authority") ||
		strings.Contains(msg, "certificate unknown") || strings.Contains(msg, "expired certificate"):
		if !hasCert {
			return fail("the registry requires a client certificate: pass --registry-cert and --registry-key")
		}
		return fail("the registry refused this client certificate (%s): it must be signed by the CA etcd trusts (--trusted-ca-file) and valid", msg)
	}
	return nil
}

// speaksTLS reports whether a TLS handshake with addr succeeds, whatever
// the certificate.
func speaksTLS(ctx context.Context, d *net.Dialer, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	c, err := (&tls.Dialer{NetDialer: d, Config: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}}).DialContext(ctx, "tcp", addr) //nolint:gosec // only asks whether the server speaks TLS; nothing is sent
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}
