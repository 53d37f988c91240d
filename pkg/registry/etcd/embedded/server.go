package embedded

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Defaults of Config.
const (
	DefaultName                = "mcsd"
	DefaultListenClientURL     = "http://127.0.0.1:2379"
	DefaultListenPeerURL       = "http://127.0.0.1:2380"
	DefaultCompactionRetention = time.Hour
)

// Config configures a single-node etcd.
type Config struct {
	// Name is the member name. Default "mcsd".
	Name string
	// DataDir holds the data; required. A server started again on the same
	// DataDir has the same data, leases included.
	DataDir string
	// ListenClientURL is where clients connect, "http://host:port" or
	// "https://host:port". The host must be an IP address or localhost; port
	// 0 picks a free port (ClientURL reports it). Default
	// "http://127.0.0.1:2379".
	ListenClientURL string
	// ListenPeerURL is the raft peer URL, unused by a single node but
	// required by etcd, which trusts whatever reaches it. Port 0 picks a
	// free port. Default "http://127.0.0.1:2380". With a secured client URL
	// (TrustedCAFile set), a plain http peer URL must be on a loopback
	// address; an https one needs PeerCertFile and PeerKeyFile.
	ListenPeerURL string
	// PeerCertFile and PeerKeyFile are the peer certificate and key for an
	// https ListenPeerURL; PeerTrustedCAFile, when set, makes peers present
	// a certificate signed by it, and PeerAllowedCNs, when set, one with
	// one of these common names (a CA that also signs clients' certificates
	// would otherwise let every client in as a peer).
	PeerCertFile      string
	PeerKeyFile       string
	PeerTrustedCAFile string
	PeerAllowedCNs    []string
	// CertFile and KeyFile are the server certificate and key for an https
	// ListenClientURL.
	CertFile string
	KeyFile  string
	// TrustedCAFile, when set, makes clients present a certificate signed
	// by it; etcd takes the user from its common name.
	TrustedCAFile string
	// CompactionRetention is how much history etcd keeps; watchers that fall
	// further behind read everything again. Default 1h.
	CompactionRetention time.Duration
	// LogLevel is etcd's log level ("debug", "info", "warn", "error"), logged
	// to stderr. Empty means no logs.
	LogLevel string
	// UnsafeNoFsync skips fsync: faster, and data can be lost in a crash.
	// For tests.
	UnsafeNoFsync bool
}

// Default fills the unset fields with their defaults.
func (c *Config) Default() {
	if c.Name == "" {
		c.Name = DefaultName
	}
	if c.ListenClientURL == "" {
		c.ListenClientURL = DefaultListenClientURL
	}
	if c.ListenPeerURL == "" {
		c.ListenPeerURL = DefaultListenPeerURL
	}
	if c.CompactionRetention == 0 {
		c.CompactionRetention = DefaultCompactionRetention
	}
}

// Validate reports whether the server can start with c.
func (c *Config) Validate() error {
	if c.Name == "" {
		return errors.New("empty member name")
	}
	if c.DataDir == "" {
		return errors.New("no data dir")
	}
	client, err := parseURL(c.ListenClientURL)
	if err != nil {
		return fmt.Errorf("listen client url: %w", err)
	}
	peer, err := parseURL(c.ListenPeerURL)
	if err != nil {
		return fmt.Errorf("listen peer url: %w", err)
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return errors.New("certificate and key files must be set together")
	}
	if client.Scheme == "https" && c.CertFile == "" {
		return errors.New("https client url needs a certificate and key")
	}
	if client.Scheme == "http" && (c.CertFile != "" || c.TrustedCAFile != "") {
		return errors.New("tls files need an https client url")
	}
	if (c.PeerCertFile == "") != (c.PeerKeyFile == "") {
		return errors.New("peer certificate and key files must be set together")
	}
	if peer.Scheme == "https" && c.PeerCertFile == "" {
		return errors.New("https peer url needs a peer certificate and key")
	}
	if peer.Scheme == "http" && (c.PeerCertFile != "" || c.PeerTrustedCAFile != "") {
		return errors.New("peer tls files need an https peer url")
	}
	if c.TrustedCAFile != "" && peer.Scheme == "http" && !isLoopback(peer.Hostname()) {
		return fmt.Errorf("listen peer url %s: a plain http peer listener on a non-loopback address beside a registry "+
			"that requires client certificates would let anyone reach etcd as a trusted peer; "+
			"listen on 127.0.0.1, or use https with a peer certificate", c.ListenPeerURL)
	}
	if c.CompactionRetention < 0 {
		return errors.New("negative compaction retention")
	}
	return nil
}

// isLoopback reports whether host is localhost or a loopback address.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func parseURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("%q: scheme must be http or https", s)
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		return nil, fmt.Errorf("%q: %w", s, err)
	}
	if host != "localhost" && net.ParseIP(host) == nil {
		return nil, fmt.Errorf("%q: host must be an IP address or localhost", s)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return nil, fmt.Errorf("%q: bad port", s)
	}
	if u.Path != "" && u.Path != "/" {
		return nil, fmt.Errorf("%q: unexpected path", s)
	}
	return u, nil
}

// Server is a running single-node etcd.
type Server struct {
	etcd      *embed.Etcd
	clientURL string
	peerURL   string
	closeOnce sync.Once
}

// Start starts etcd with cfg and returns once it listens; wait on
// ReadyNotify before serving clients. It takes its logger from ctx; the
// server runs until Close.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	cfg.Default()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("embedded etcd config: %w", err)
	}
	client, _ := parseURL(cfg.ListenClientURL)
	peer, _ := parseURL(cfg.ListenPeerURL)

	ec := embed.NewConfig()
	ec.Name = cfg.Name
	ec.Dir = cfg.DataDir
	ec.ListenClientUrls = []url.URL{*client}
	ec.AdvertiseClientUrls = []url.URL{advertised(*client)}
	ec.ListenPeerUrls = []url.URL{*peer}
	ec.AdvertisePeerUrls = []url.URL{advertised(*peer)}
	ec.InitialCluster = ec.InitialClusterFromName(ec.Name)
	ec.ClientTLSInfo = transport.TLSInfo{
		CertFile:       cfg.CertFile,
		KeyFile:        cfg.KeyFile,
		TrustedCAFile:  cfg.TrustedCAFile,
		ClientCertAuth: cfg.TrustedCAFile != "",
	}
	ec.PeerTLSInfo = transport.TLSInfo{
		CertFile:       cfg.PeerCertFile,
		KeyFile:        cfg.PeerKeyFile,
		TrustedCAFile:  cfg.PeerTrustedCAFile,
		ClientCertAuth: cfg.PeerTrustedCAFile != "",
		AllowedCNs:     cfg.PeerAllowedCNs,
	}
	ec.AutoCompactionMode = embed.CompactorModePeriodic
	ec.AutoCompactionRetention = cfg.CompactionRetention.String()
	ec.UnsafeNoFsync = cfg.UnsafeNoFsync
	if cfg.LogLevel == "" {
		ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	} else {
		ec.LogLevel = cfg.LogLevel
		ec.LogOutputs = []string{embed.StdErrLogOutput}
	}

	e, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, fmt.Errorf("start embedded etcd: %w", err)
	}
	addr := e.Clients[0].Addr().(*net.TCPAddr)
	u := advertised(*client)
	u.Host = net.JoinHostPort(u.Hostname(), strconv.Itoa(addr.Port))
	paddr := e.Peers[0].Addr().(*net.TCPAddr)
	pu := advertised(*peer)
	pu.Host = net.JoinHostPort(pu.Hostname(), strconv.Itoa(paddr.Port))
	s := &Server{etcd: e, clientURL: u.String(), peerURL: pu.String()}
	logr.FromContextOrDiscard(ctx).Info("embedded etcd started", "clientURL", s.clientURL, "dataDir", cfg.DataDir)
	return s, nil
}

// advertised is u with an unspecified host replaced by the loopback address.
func advertised(u url.URL) url.URL {
	if ip := net.ParseIP(u.Hostname()); ip != nil && ip.IsUnspecified() {
		u.Host = net.JoinHostPort("127.0.0.1", u.Port())
	}
	u.Path = ""
	return u
}

// ReadyNotify is closed when the server is ready to serve clients.
func (s *Server) ReadyNotify() <-chan struct{} { return s.etcd.Server.ReadyNotify() }

// Err reports errors that stop the server; it is closed once the server has
// stopped.
func (s *Server) Err() <-chan error { return s.etcd.Err() }

// WaitReady waits until the server is ready to serve clients; it fails if
// the server stops first, or with ctx's error when ctx ends first.
func (s *Server) WaitReady(ctx context.Context) error {
	select {
	case <-s.ReadyNotify():
		return nil
	case err := <-s.Err():
		return fmt.Errorf("etcd stopped before it was ready: %w", err)
	case <-ctx.Done():
		return fmt.Errorf("wait for etcd to be ready: %w", ctx.Err())
	}
}

// ClientURL is the URL clients connect to, with the port the server bound.
func (s *Server) ClientURL() string { return s.clientURL }

// PeerURL is the raft peer URL, with the port the server bound.
func (s *Server) PeerURL() string { return s.peerURL }

// Close stops the server, letting client requests finish for a few seconds.
func (s *Server) Close() {
	s.closeOnce.Do(s.etcd.Close)
}
