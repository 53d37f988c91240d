package testbed

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ProxyReport keeps the last lines of kube-proxy's log that speak of
// topology (hints ignored and why, node labels), errors and restarts, and
// apart from them the last lines on its syncs (whether they run, and how
// long they take): these would crowd the others out.
var (
	proxyLogWorth = regexp.MustCompile(`(?i)topology|hint|^[EW]\d{4}|error|fail|starting|sync params`)
	proxyLogSyncs = regexp.MustCompile(`SyncProxyRules complete|Syncing nftables rules|Not syncing`)
)

const (
	proxyLogLines     = 30
	proxyLogSyncLines = 6
)

// ProxyReport says how the cluster routes Service ns/name, for a test that
// failed waiting for traffic to go somewhere: node 0's zone label (the
// node kube-proxy runs as), every EndpointSlice of the Service (each
// endpoint's address, readiness and hints), kube-proxy's nftables chains
// for the Service and the last lines of kube-proxy's log that speak of
// topology, errors or syncs. Whatever cannot be read is said in its place.
func (c *Cluster) ProxyReport(ctx context.Context, ns, name string) string {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var b strings.Builder
	fmt.Fprintf(&b, "--- %s: how kube-proxy routes %s/%s\n", c.ID, ns, name)
	cl, err := c.Client()
	if err != nil {
		fmt.Fprintf(&b, "client: %v\n", err)
	} else {
		c.reportNode(ctx, &b, cl)
		reportSlices(ctx, &b, cl, ns, name)
	}
	c.reportChains(ctx, &b, ns+"/"+name+"/")
	c.reportProxyLog(&b)
	return b.String()
}

func (c *Cluster) reportNode(ctx context.Context, b *strings.Builder, cl client.Client) {
	var node corev1.Node
	if err := cl.Get(ctx, client.ObjectKey{Name: c.NodeName(0)}, &node); err != nil {
		fmt.Fprintf(b, "node %s: %v\n", c.NodeName(0), err)
		return
	}
	fmt.Fprintf(b, "node %s: zone %q\n", node.Name, node.Labels[corev1.LabelTopologyZone])
}

func reportSlices(ctx context.Context, b *strings.Builder, cl client.Client, ns, name string) {
	var list discoveryv1.EndpointSliceList
	if err := cl.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: name}); err != nil {
		fmt.Fprintf(b, "endpointslices: %v\n", err)
		return
	}
	for _, s := range list.Items {
		fmt.Fprintf(b, "endpointslice %s (managed by %s, resourceVersion %s):\n", s.Name, s.Labels[discoveryv1.LabelManagedBy], s.ResourceVersion)
		for _, ep := range s.Endpoints {
			var zones, nodes []string
			if ep.Hints != nil {
				for _, z := range ep.Hints.ForZones {
					zones = append(zones, z.Name)
				}
				for _, n := range ep.Hints.ForNodes {
					nodes = append(nodes, n.Name)
				}
			}
			fmt.Fprintf(b, "  %v ready=%t zone=%s forZones=%v forNodes=%v\n",
				ep.Addresses, ptr.Deref(ep.Conditions.Ready, true), ptr.Deref(ep.Zone, ""), zones, nodes)
		}
	}
}

// reportChains writes kube-proxy's nftables chains whose name holds key
// ("ns/name/"), from both families' tables in the node namespace.
func (c *Cluster) reportChains(ctx context.Context, b *strings.Builder, key string) {
	for _, family := range []string{"ip", "ip6"} {
		out, err := exec.CommandContext(ctx, "ip", "netns", "exec", c.NodeNetns(), "nft", "list", "table", family, "kube-proxy").CombinedOutput()
		if err != nil {
			fmt.Fprintf(b, "nft list table %s kube-proxy: %v: %s\n", family, err, tail(out))
			continue
		}
		in := false
		for _, l := range strings.Split(string(out), "\n") {
			t := strings.TrimSpace(l)
			if strings.HasPrefix(t, "chain ") {
				in = strings.Contains(t, key)
			}
			if in && t != "" {
				fmt.Fprintf(b, "%s %s\n", family, t)
			}
			if t == "}" {
				in = false // the chain's end
			}
		}
	}
}

// reportProxyLog writes the last lines of kube-proxy's log that
// proxyLogWorth picks, then the last that proxyLogSyncs picks.
func (c *Cluster) reportProxyLog(b *strings.Builder) {
	path := filepath.Join(c.agentDir(), "kube-proxy.log")
	f, err := os.Open(path)
	if err != nil {
		fmt.Fprintf(b, "kube-proxy log: %v\n", err)
		return
	}
	defer func() { _ = f.Close() }()
	worth, syncs := lastLines{n: proxyLogLines}, lastLines{n: proxyLogSyncLines}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		switch l := sc.Text(); {
		case strings.Contains(l, "FLAG:"): // its command line, one flag a line
		case proxyLogSyncs.MatchString(l):
			syncs.add(l)
		case proxyLogWorth.MatchString(l):
			worth.add(l)
		}
	}
	fmt.Fprintf(b, "kube-proxy log (%s), on topology, errors and restarts:\n", path)
	worth.write(b)
	b.WriteString("kube-proxy log, on syncs:\n")
	syncs.write(b)
}

// lastLines keeps the last n lines added.
type lastLines struct {
	n     int
	lines []string
}

func (l *lastLines) add(s string) {
	l.lines = append(l.lines, s)
	if len(l.lines) >= 2*l.n {
		l.lines = append(l.lines[:0], l.lines[len(l.lines)-l.n:]...)
	}
}

func (l *lastLines) write(b *strings.Builder) {
	lines := l.lines
	if len(lines) > l.n {
		lines = lines[len(lines)-l.n:]
	}
	for _, s := range lines {
		fmt.Fprintf(b, "  %s\n", s)
	}
}
