package agent

import (
	"context"
	"fmt"
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
		// Its proxier's log of the node's topology labels (zoneKeeper).
		"--vmodule=proxier=4",
	}
	a.zone = newZoneKeeper(a.log.WithValues("cluster", a.cfg.Cluster), a.proxyLog(), func() { a.children.restart("kube-proxy") })
	a.children.run(ctx, "kube-proxy", a.proxyLog(), func() *exec.Cmd {
		return exec.Command("ip", args...)
	}, a.zone.started)
	return nil
}

// nodeZoned reports whether node 0 has a zone label.
func (a *Agent) nodeZoned(ctx context.Context) (bool, error) {
	node, err := a.cs.CoreV1().Nodes().Get(ctx, a.cfg.Nodes[0].Name, metav1.GetOptions{})
	if err != nil {
		return false, fmt.Errorf("read node %s: %w", a.cfg.Nodes[0].Name, err)
	}
	_, ok := node.Labels[corev1.LabelTopologyZone]
	return ok, nil
}

// proxyLog is kube-proxy's log.
func (a *Agent) proxyLog() string { return filepath.Join(a.cfg.StateDir, "kube-proxy.log") }

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
	}, nil)
	return nil
}

// waitServing waits until kube-proxy reports healthy and the DNS server
// answers, both checked from inside the node namespace.
func (a *Agent) waitServing(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	proxyHealthy := []string{"probe", "-http", "http://" + kubeProxyHealthz + "/healthz"}
	checks := [][]string{
		proxyHealthy,
		{"probe", "-dns", net.JoinHostPort(a.dnsAddrs()[0], "53")},
		{"probe", "-http", "http://127.0.0.1:8181/ready"},
	}
	for _, c := range checks {
		if err := a.probe(ctx, c); err != nil {
			return err
		}
	}
	if err := a.zone.Ready(ctx); err != nil {
		return fmt.Errorf("wait for kube-proxy of %s to learn its node's zone: %w", a.cfg.Cluster, err)
	}
	// Healthy again: the start that has the zone may be a later one than
	// the start probed above.
	return a.probe(ctx, proxyHealthy)
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
