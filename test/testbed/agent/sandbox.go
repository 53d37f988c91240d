package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strings"

	"github.com/mcsd-io/mcsd/test/testbed/netns"
)

// The node side of every pod link answers for these gateway addresses.
const (
	gatewayV4 = "169.254.1.1"
	gatewayV6 = "fe80::1"
)

// sandboxNames returns the pod's namespace name and the node side link's
// name for a pod uid.
func (a *Agent) sandboxNames(uid string) (ns, link string) {
	sum := sha256.Sum256([]byte(uid))
	h := hex.EncodeToString(sum[:])
	return a.cfg.PodNetnsPrefix + h[:10], "p" + h[:12]
}

// createSandbox makes the pod's network namespace with its addresses, routes
// and /etc files. Whatever an earlier try left is removed first.
func (a *Agent) createSandbox(ctx context.Context, sb *sandbox) error {
	node := a.cfg.NodeNetns
	_ = netns.Delete(ctx, sb.netns)
	_ = netns.IP(ctx, "-n", node, "link", "del", sb.link)
	if err := netns.Add(ctx, sb.netns); err != nil {
		return err
	}
	steps := [][]string{
		{"-n", node, "link", "add", sb.link, "type", "veth", "peer", "name", "eth0", "netns", sb.netns},
		{"-n", node, "addr", "add", gatewayV4 + "/32", "dev", sb.link},
		{"-n", node, "addr", "add", gatewayV6 + "/64", "dev", sb.link, "nodad"},
		{"-n", node, "link", "set", sb.link, "up"},
		{"-n", sb.netns, "link", "set", "eth0", "up"},
	}
	for _, ip := range sb.ips {
		addr := netip.MustParseAddr(ip)
		if addr.Is4() {
			steps = append(steps,
				[]string{"-n", sb.netns, "addr", "add", ip + "/32", "dev", "eth0"},
				[]string{"-n", node, "route", "replace", ip + "/32", "dev", sb.link},
			)
		} else {
			steps = append(steps,
				[]string{"-n", sb.netns, "addr", "add", ip + "/128", "dev", "eth0", "nodad"},
				[]string{"-n", node, "-6", "route", "replace", ip + "/128", "dev", sb.link},
			)
		}
	}
	steps = append(steps,
		[]string{"-n", sb.netns, "route", "add", gatewayV4, "dev", "eth0", "scope", "link"},
		[]string{"-n", sb.netns, "route", "add", "default", "via", gatewayV4, "dev", "eth0"},
		[]string{"-n", sb.netns, "-6", "route", "add", "default", "via", gatewayV6, "dev", "eth0"},
	)
	for _, s := range steps {
		if err := netns.IP(ctx, s...); err != nil {
			return fmt.Errorf("pod network: %w", err)
		}
	}
	if err := netns.WriteEtc(sb.netns, "resolv.conf", []byte(a.resolvConf(sb.namespace))); err != nil {
		return err
	}
	return netns.WriteEtc(sb.netns, "hosts", []byte(hostsFile(sb)))
}

// resolvConf is a pod's resolv.conf, as a kubelet writes it for the
// ClusterFirst DNS policy.
func (a *Agent) resolvConf(namespace string) string {
	var b strings.Builder
	for _, ip := range a.cfg.DNSServiceIPs[:1] {
		fmt.Fprintf(&b, "nameserver %s\n", ip)
	}
	fmt.Fprintf(&b, "search %s.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n", namespace)
	return b.String()
}

func hostsFile(sb *sandbox) string {
	var b strings.Builder
	b.WriteString("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
	for _, ip := range sb.ips {
		fmt.Fprintf(&b, "%s\t%s\n", ip, sb.hostname)
	}
	return b.String()
}

// deleteSandbox kills what runs in the pod's namespace and removes it with
// its link and routes.
func (a *Agent) deleteSandbox(ctx context.Context, sb *sandbox) error {
	err := netns.Delete(ctx, sb.netns)
	_ = netns.IP(ctx, "-n", a.cfg.NodeNetns, "link", "del", sb.link)
	return err
}
