package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// kube-proxy's health endpoint, inside the node namespace.
const kubeProxyHealthz = "127.0.0.1:10256"

// startKubeProxy runs Kubernetes' kube-proxy in nftables mode in the node
// namespace, as node 0 of the cluster. Its conntrack settings are zero so
// that it leaves the host's (global) conntrack sysctls alone.
func (a *Agent) startKubeProxy(ctx context.Context) error {
	args := []string{
		"netns", "exec", a.cfg.NodeNetns, a.cfg.KubeProxy,
		"--kubeconfig=" + a.cfg.Kubeconfig,
		"--proxy-mode=nftables",
		"--hostname-override=" + a.cfg.Nodes[0].Name,
		"--cluster-cidr=" + strings.Join(a.cfg.ClusterCIDRs, ","),
		"--healthz-bind-address=" + kubeProxyHealthz,
		"--metrics-bind-address=127.0.0.1:10249",
		"--conntrack-max-per-core=0",
		"--conntrack-tcp-timeout-established=0",
		"--conntrack-tcp-timeout-close-wait=0",
		"--v=2",
		// Its proxier's log of the node's topology labels (waitTopology).
		"--vmodule=proxier=4",
	}
	a.proxyLogFrom = fileSize(a.proxyLog())
	a.children.run(ctx, "kube-proxy", a.proxyLog(), func() *exec.Cmd {
		return exec.Command("ip", args...)
	})
	return nil
}

// proxyLog is kube-proxy's log.
func (a *Agent) proxyLog() string { return filepath.Join(a.cfg.StateDir, "kube-proxy.log") }

// topologyLogged is what kube-proxy's proxier logs (at -v=4) when it is
// given its node's topology labels.
const topologyLogged = "Updated proxier node topology labels"

// waitTopology waits until kube-proxy's proxier has its node's zone, and
// starts kube-proxy again when it does not get it (at most twice).
// kube-proxy 1.35 adds the handler that reads the node's labels to a node
// informer already running, and names the proxier as that handler's
// receiver only after: when the handler's replay of the node comes first,
// the proxier never hears of the zone and ignores every topology hint, for
// as long as the zone does not change.
func (a *Agent) waitTopology(ctx context.Context) error {
	node, err := a.cs.CoreV1().Nodes().Get(ctx, a.cfg.Nodes[0].Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("read node %s: %w", a.cfg.Nodes[0].Name, err)
	}
	if _, ok := node.Labels[corev1.LabelTopologyZone]; !ok {
		return nil // no zone to learn: kube-proxy logs nothing
	}
	for try := 0; ; try++ {
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			ok, err := zoneLogged(a.proxyLog(), a.proxyLogFrom)
			if err != nil {
				return err
			}
			if ok {
				return nil
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("wait for kube-proxy of %s to learn its node's zone: %w", a.cfg.Cluster, ctx.Err())
			case <-time.After(200 * time.Millisecond):
			}
		}
		if try == 2 {
			return fmt.Errorf("kube-proxy of %s did not learn its node's zone in %d starts (no %q in %s)", a.cfg.Cluster, try+1, topologyLogged, a.proxyLog())
		}
		a.log.Info("kube-proxy did not learn its node's zone; starting it again", "cluster", a.cfg.Cluster)
		a.proxyLogFrom = fileSize(a.proxyLog())
		a.children.restart("kube-proxy")
		if err := a.probe(ctx, []string{"probe", "-http", "http://" + kubeProxyHealthz + "/healthz"}); err != nil {
			return err
		}
	}
}

// zoneLogged reports whether the log at path, from offset from, has
// kube-proxy's line for topology labels that include a zone.
func zoneLogged(path string, from int64) (bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read kube-proxy log: %w", err)
	}
	defer func() { _ = f.Close() }()
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		return false, fmt.Errorf("read kube-proxy log: %w", err)
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
	for sc.Scan() {
		if line := sc.Text(); strings.Contains(line, topologyLogged) && strings.Contains(line, corev1.LabelTopologyZone) {
			return true, nil
		}
	}
	if err := sc.Err(); err != nil {
		return false, fmt.Errorf("read kube-proxy log: %w", err)
	}
	return false, nil
}

// fileSize is the size of the file at path, 0 if there is none.
func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// dnsAddrs are where the cluster's DNS server listens: node 0's addresses,
// the endpoints of the kube-dns Service.
func (a *Agent) dnsAddrs() []string { return a.cfg.Nodes[0].IPs }

// startDNS runs a stock CoreDNS in the node namespace, with the Corefile
// the testbed wrote (cluster.local and clusterset.local, as config/coredns
// sets them up).
func (a *Agent) startDNS(ctx context.Context) error {
	path := filepath.Join(a.cfg.StateDir, "Corefile")
	if err := os.WriteFile(path, []byte(a.cfg.Corefile), 0o644); err != nil {
		return fmt.Errorf("write Corefile: %w", err)
	}
	a.children.run(ctx, "coredns", filepath.Join(a.cfg.StateDir, "coredns.log"), func() *exec.Cmd {
		cmd := exec.Command("ip", "netns", "exec", a.cfg.NodeNetns, a.cfg.CoreDNS, "-conf", path)
		cmd.Dir = a.cfg.StateDir
		return cmd
	})
	return nil
}

// waitServing waits until kube-proxy reports healthy and the DNS server
// answers, both checked from inside the node namespace.
func (a *Agent) waitServing(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	checks := [][]string{
		{"probe", "-http", "http://" + kubeProxyHealthz + "/healthz"},
		{"probe", "-dns", net.JoinHostPort(a.dnsAddrs()[0], "53")},
		{"probe", "-http", "http://127.0.0.1:8181/ready"},
	}
	for _, c := range checks {
		if err := a.probe(ctx, c); err != nil {
			return err
		}
	}
	return a.waitTopology(ctx)
}

// probe runs the agent's probe command c in the node namespace until it
// succeeds.
func (a *Agent) probe(ctx context.Context, c []string) error {
	var last error
	for {
		out, err := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", a.cfg.NodeNetns, a.progs.Self}, c...)...).CombinedOutput()
		if err == nil {
			return nil
		}
		last = fmt.Errorf("%s: %w: %s", strings.Join(c, " "), err, strings.TrimSpace(string(out)))
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for kube-proxy and DNS of %s: %w (last: %w)", a.cfg.Cluster, ctx.Err(), last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Probe checks, once, an HTTP URL (status 200) or a DNS server (it answers
// dns-version.clusterset.local, as the multicluster option serves it).
func Probe(httpURL, dnsServer string) error {
	if httpURL != "" {
		c := &http.Client{Timeout: 2 * time.Second}
		resp, err := c.Get(httpURL)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", httpURL, resp.Status)
		}
	}
	if dnsServer != "" {
		m := new(dns.Msg)
		m.SetQuestion("dns-version.clusterset.local.", dns.TypeTXT)
		r, _, err := (&dns.Client{Timeout: 2 * time.Second}).Exchange(m, dnsServer)
		if err != nil {
			return err
		}
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 {
			return fmt.Errorf("dns-version.clusterset.local: %s", dns.RcodeToString[r.Rcode])
		}
	}
	return nil
}
