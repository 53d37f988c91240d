package testbed

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/mcsd-io/mcsd/test/testbed/agent"
	"github.com/mcsd-io/mcsd/test/testbed/netns"
)

// The data plane's addresses. Cluster i (1-based) has:
//   - pod ranges 10.i.0.0/16 and fd00:10:i::/48; node n gets 10.i.n.0/24 and
//     fd00:10:i:n::/64;
//   - service ranges 10.(100+i).0.0/16 and fd00:100:i::/108;
//   - one node network namespace, where kube-proxy and the cluster's DNS run
//     and every pod's link ends, holding node n's addresses 10.254.i.(n+1)
//     and fd00:254::i:(n+1) on a link to the testbed's backbone, a bridge
//     that joins the clusters' node namespaces (a flat pod network, as in
//     peered VPCs).
// Every address lives inside network namespaces the testbed creates; the
// host's own namespace has no route to any of them.

// PodCIDRsFor returns the pod ranges of cluster i (IPv4, IPv6).
func PodCIDRsFor(i int) []string {
	return []string{fmt.Sprintf("10.%d.0.0/16", i), fmt.Sprintf("fd00:10:%x::/48", i)}
}

// NodePodCIDRs returns the pod ranges of node n (0-based) of cluster i.
func NodePodCIDRs(i, n int) []string {
	return []string{fmt.Sprintf("10.%d.%d.0/24", i, n), fmt.Sprintf("fd00:10:%x:%x::/64", i, n)}
}

// NodeIPs returns the addresses of node n (0-based) of cluster i.
func NodeIPs(i, n int) []string {
	return []string{fmt.Sprintf("10.254.%d.%d", i, n+1), fmt.Sprintf("fd00:254::%x:%x", i, n+1)}
}

// DNSServiceIPs returns the cluster IPs of cluster i's kube-dns Service,
// the name server in every pod's resolv.conf.
func DNSServiceIPs(i int) []string {
	return []string{fmt.Sprintf("10.%d.0.10", 100+i), fmt.Sprintf("fd00:100:%x::a", i)}
}

// netnsPrefix is the prefix of every network namespace of the testbed.
func (tb *Testbed) netnsPrefix() string { return netns.Prefix(tb.dir) }

// backboneNetns is the namespace of the bridge that joins the clusters.
func (tb *Testbed) backboneNetns() string { return tb.netnsPrefix() + "-net" }

// NodeNetns is the cluster's node network namespace: kube-proxy's rules, the
// cluster's DNS server and the node side of every pod link are there.
func (c *Cluster) NodeNetns() string { return fmt.Sprintf("%s-%s", c.tb.netnsPrefix(), c.ID) }

// podNetnsPrefix starts the names of the cluster's pod namespaces.
func (c *Cluster) podNetnsPrefix() string { return c.NodeNetns() + "-p" }

// setupNetwork creates, or completes, the backbone and every cluster's node
// namespace with its link, addresses and routes. It is safe to run again.
func (tb *Testbed) setupNetwork(ctx context.Context) error {
	if err := tb.registerRuntime(); err != nil {
		return err
	}
	bb := tb.backboneNetns()
	if err := netns.Add(ctx, bb); err != nil {
		return fmt.Errorf("create backbone namespace: %w", err)
	}
	if !netns.LinkExists(ctx, bb, "br0") {
		if err := netns.IP(ctx, "-n", bb, "link", "add", "br0", "type", "bridge"); err != nil {
			return err
		}
	}
	if err := netns.IP(ctx, "-n", bb, "link", "set", "br0", "up"); err != nil {
		return err
	}
	for _, c := range tb.Clusters {
		if err := c.setupNodeNetns(ctx, bb); err != nil {
			return fmt.Errorf("network of %s: %w", c.ID, err)
		}
	}
	return nil
}

func (c *Cluster) setupNodeNetns(ctx context.Context, bb string) error {
	ns := c.NodeNetns()
	if err := netns.Add(ctx, ns); err != nil {
		return err
	}
	for key, value := range map[string]string{
		"net/ipv4/ip_forward":                "1",
		"net/ipv6/conf/all/forwarding":       "1",
		"net/ipv4/conf/all/rp_filter":        "0",
		"net/ipv4/conf/default/rp_filter":    "0",
		"net/ipv6/conf/default/accept_dad":   "0",
		"net/ipv4/conf/default/arp_ignore":   "0",
		"net/ipv4/conf/all/arp_announce":     "0",
		"net/ipv4/conf/default/arp_announce": "0",
	} {
		if err := netns.Sysctl(ctx, ns, key, value); err != nil {
			return err
		}
	}
	peer := c.ID // the backbone side of the link, named after the cluster
	if !netns.LinkExists(ctx, ns, "bb0") {
		if err := netns.IP(ctx, "-n", bb, "link", "add", peer, "type", "veth", "peer", "name", "bb0", "netns", ns); err != nil {
			return err
		}
	}
	if err := netns.IP(ctx, "-n", bb, "link", "set", peer, "master", "br0", "up"); err != nil {
		return err
	}
	for n := 0; n < c.tb.opts.NodesPerCluster; n++ {
		ips := NodeIPs(c.Index, n)
		if err := netns.IP(ctx, "-n", ns, "addr", "replace", ips[0]+"/16", "dev", "bb0"); err != nil {
			return err
		}
		if err := netns.IP(ctx, "-n", ns, "addr", "replace", ips[1]+"/64", "dev", "bb0", "nodad"); err != nil {
			return err
		}
	}
	if err := netns.IP(ctx, "-n", ns, "link", "set", "bb0", "up"); err != nil {
		return err
	}
	// The other clusters' pod ranges, through their node namespaces.
	for _, o := range c.tb.Clusters {
		if o == c {
			continue
		}
		gw := NodeIPs(o.Index, 0)
		cidrs := PodCIDRsFor(o.Index)
		if err := netns.IP(ctx, "-n", ns, "route", "replace", cidrs[0], "via", gw[0]); err != nil {
			return err
		}
		if err := netns.IP(ctx, "-n", ns, "-6", "route", "replace", cidrs[1], "via", gw[1]); err != nil {
			return err
		}
	}
	return nil
}

// runtimeRoot holds one file per testbed with a data plane, naming its state
// directory: how a later run finds the namespaces of a testbed whose state
// directory was removed without `down`.
const runtimeRoot = "/run/mcsd-testbed"

func (tb *Testbed) registerRuntime() error {
	if err := os.MkdirAll(runtimeRoot, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", runtimeRoot, err)
	}
	if err := os.WriteFile(filepath.Join(runtimeRoot, tb.netnsPrefix()), []byte(tb.dir), 0o644); err != nil {
		return fmt.Errorf("record the testbed's namespaces: %w", err)
	}
	return nil
}

// removeNetwork deletes every namespace of the testbed whose state is in dir.
func removeNetwork(ctx context.Context, dir string) error {
	prefix := netns.Prefix(dir)
	// The containers of image pods first (their cgroups and runc state).
	if runc, err := exec.LookPath("runc"); err == nil {
		socks, _ := filepath.Glob(filepath.Join(runtimeRoot, prefix+"-sock", "*"))
		for _, sock := range socks {
			agent.RuncCleanup(runc, agent.RuncRoot(sock))
		}
	}
	err := netns.DeleteAll(ctx, prefix+"-")
	if err == nil {
		_ = os.RemoveAll(filepath.Join(runtimeRoot, prefix+"-sock"))
		_ = os.Remove(filepath.Join(runtimeRoot, prefix))
	}
	return err
}

// removeOrphanNetworks deletes the namespaces of testbeds whose state
// directory is gone (removed by hand, or a crashed run's).
func removeOrphanNetworks(ctx context.Context, log func(format string, args ...any)) {
	entries, _ := os.ReadDir(runtimeRoot)
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(runtimeRoot, e.Name()))
		if err != nil {
			continue
		}
		dir := strings.TrimSpace(string(data))
		if _, err := os.Stat(dir); err == nil {
			continue
		}
		log("[testbed] removing the processes and network namespaces of %s (its state is gone)\n", dir)
		killUnder(dir, io.Discard)
		_ = removeNetwork(ctx, dir)
	}
}

// socketDir holds the cluster's Unix sockets (the agent's API relay, the
// relays of ExposeHost) and runc's state: a short path, for socket names.
func (c *Cluster) socketDir() string {
	return filepath.Join(runtimeRoot, c.tb.netnsPrefix()+"-sock", c.ID)
}
