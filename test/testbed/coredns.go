package testbed

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/miekg/dns"
)

// CoreDNS is a stock CoreDNS process answering for one cluster of the
// testbed: cluster.local from the cluster's Services, and clusterset.local
// from its ServiceImports and their EndpointSlices, through the kubernetes
// plugin's multicluster option (see config/coredns). It runs from a link in
// the testbed's state directory, so closing or deleting the testbed kills it
// even when this process is gone.
type CoreDNS struct {
	cluster *Cluster
	dir     string
	addr    string
	cmd     *exec.Cmd
	exited  chan struct{}
	once    sync.Once
}

// Corefile returns the Corefile of a CoreDNS that serves DNS on addr, the
// ready plugin on readyAddr, and reads the cluster through context
// kubeContext of kubeconfig. Its kubernetes block is config/coredns's, less
// what only matters inside a cluster; it has no fallthrough and nothing after
// the kubernetes plugin, so a name the cluster does not have is NXDOMAIN.
func Corefile(addr, readyAddr, kubeconfig, kubeContext string) string {
	return corefile(port(addr), []string{host(addr)}, readyAddr, kubeconfig, kubeContext)
}

// corefile is Corefile for a server on port of every address in binds.
func corefile(port string, binds []string, readyAddr, kubeconfig, kubeContext string) string {
	return fmt.Sprintf(`.:%s {
    bind %s
    errors
    ready %s
    kubernetes cluster.local clusterset.local {
        kubeconfig %s %s
        multicluster clusterset.local
        ttl 5
    }
}
`, port, strings.Join(binds, " "), readyAddr, kubeconfig, kubeContext)
}

func host(addr string) string { h, _, _ := net.SplitHostPort(addr); return h }
func port(addr string) string { _, p, _ := net.SplitHostPort(addr); return p }

// CoreDNSOptions change the CoreDNS that StartCoreDNSWith runs.
type CoreDNSOptions struct {
	// Kubeconfig and Context reach the cluster. Default: the testbed's
	// admin kubeconfig and the cluster's context.
	Kubeconfig, Context string
	// Corefile returns the Corefile to run. It must serve DNS on addr and
	// the ready plugin on readyAddr. Default: the package's Corefile.
	Corefile func(addr, readyAddr, kubeconfig, kubeContext string) string
}

// StartCoreDNS starts a CoreDNS for the cluster on a free port of 127.0.0.1
// and returns once it answers for clusterset.local. The process outlives ctx;
// Close, Testbed.Close or Delete stop it.
func (c *Cluster) StartCoreDNS(ctx context.Context) (*CoreDNS, error) {
	return c.StartCoreDNSWith(ctx, CoreDNSOptions{})
}

// StartCoreDNSWith is StartCoreDNS with options.
func (c *Cluster) StartCoreDNSWith(ctx context.Context, opts CoreDNSOptions) (*CoreDNS, error) {
	if opts.Kubeconfig == "" {
		if c.tb.Kubeconfig == "" {
			return nil, errors.New("start CoreDNS: the testbed has no kubeconfig")
		}
		opts.Kubeconfig, opts.Context = c.tb.Kubeconfig, c.ID
	}
	if opts.Corefile == nil {
		opts.Corefile = Corefile
	}
	if c.tb.bin.CoreDNS == "" {
		return nil, errors.New("start CoreDNS: no CoreDNS binary")
	}
	// The port is free for TCP a moment ago; CoreDNS also needs it for UDP,
	// and another process may take it meanwhile: try again if CoreDNS exits.
	var errs []error
	for range 3 {
		d, err := c.startCoreDNS(ctx, opts)
		if err == nil {
			return d, nil
		}
		errs = append(errs, err)
		if !errors.Is(err, errCoreDNSExited) || ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("start CoreDNS for %s: %w", c.ID, errors.Join(errs...))
}

var errCoreDNSExited = errors.New("CoreDNS exited")

func (c *Cluster) startCoreDNS(ctx context.Context, opts CoreDNSOptions) (*CoreDNS, error) {
	ports, err := FreePorts(2)
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
	readyAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))
	dir := filepath.Join(c.tb.dir, fmt.Sprintf("coredns-%s-%d", c.ID, ports[0]))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create CoreDNS state: %w", err)
	}
	// Run through a link under the testbed directory: killUnder finds it there.
	bin := filepath.Join(dir, "coredns")
	if err := os.Symlink(c.tb.bin.CoreDNS, bin); err != nil && !os.IsExist(err) {
		return nil, fmt.Errorf("link CoreDNS binary: %w", err)
	}
	corefile := filepath.Join(dir, "Corefile")
	if err := os.WriteFile(corefile, []byte(opts.Corefile(addr, readyAddr, opts.Kubeconfig, opts.Context)), 0o644); err != nil {
		return nil, fmt.Errorf("write Corefile: %w", err)
	}
	logFile, err := os.Create(filepath.Join(dir, "coredns.log"))
	if err != nil {
		return nil, fmt.Errorf("create CoreDNS log: %w", err)
	}
	defer func() { _ = logFile.Close() }()

	cmd := exec.Command(bin, "-conf", corefile)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own process group: a Ctrl-C meant for a caller that has finished
	// (the demo) does not reach it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("run CoreDNS: %w", err)
	}
	d := &CoreDNS{cluster: c, dir: dir, addr: addr, cmd: cmd, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(d.exited)
	}()
	if err := d.waitReady(ctx, readyAddr); err != nil {
		_ = d.Close()
		return nil, fmt.Errorf("%w; CoreDNS log (%s): %s", err, logFile.Name(), d.logTail())
	}
	fmt.Fprintf(c.tb.opts.Log, "[testbed] %s: CoreDNS answers on %s\n", c.ID, addr)
	return d, nil
}

// waitReady waits until the kubernetes plugin has synced (the ready plugin
// says so) and the server answers a clusterset.local query.
func (d *CoreDNS) waitReady(ctx context.Context, readyAddr string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	hc := &http.Client{Timeout: time.Second}
	var last error
	for {
		if last = d.ready(ctx, hc, readyAddr); last == nil {
			return nil
		}
		select {
		case <-d.exited:
			return fmt.Errorf("%w: %s", errCoreDNSExited, d.cmd.ProcessState)
		case <-ctx.Done():
			return fmt.Errorf("wait for CoreDNS of %s to answer: %w (last error: %w)", d.cluster.ID, ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (d *CoreDNS) ready(ctx context.Context, hc *http.Client, readyAddr string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+readyAddr+"/ready", nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("ready: %s", resp.Status)
	}
	m, err := Query(ctx, d.addr, "dns-version.clusterset.local", dns.TypeTXT)
	if err != nil {
		return err
	}
	if m.Rcode != dns.RcodeSuccess || len(m.Answer) == 0 {
		return fmt.Errorf("dns-version.clusterset.local: %s", dns.RcodeToString[m.Rcode])
	}
	return nil
}

func (d *CoreDNS) logTail() string {
	out, _ := os.ReadFile(filepath.Join(d.dir, "coredns.log"))
	return tail(out)
}

// Addr is the host:port CoreDNS answers on, over UDP and TCP.
func (d *CoreDNS) Addr() string { return d.addr }

// Pid is the CoreDNS process id.
func (d *CoreDNS) Pid() int { return d.cmd.Process.Pid }

// Dir holds the Corefile and the log (coredns.log).
func (d *CoreDNS) Dir() string { return d.dir }

// Close stops CoreDNS.
func (d *CoreDNS) Close() error {
	d.once.Do(func() {
		_ = d.cmd.Process.Kill()
		select {
		case <-d.exited:
		case <-time.After(10 * time.Second):
		}
	})
	return nil
}

// Query sends one DNS query for name (made fully qualified) to server and
// returns the reply, asking again over TCP when the UDP reply is truncated.
func Query(ctx context.Context, server, name string, qtype uint16) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	m.SetEdns0(4096, false)
	c := &dns.Client{Net: "udp", Timeout: 2 * time.Second}
	r, _, err := c.ExchangeContext(ctx, m, server)
	if err == nil && r.Truncated {
		c.Net = "tcp"
		r, _, err = c.ExchangeContext(ctx, m, server)
	}
	if err != nil {
		return nil, fmt.Errorf("query %s %s at %s: %w", name, dns.TypeToString[qtype], server, err)
	}
	return r, nil
}
