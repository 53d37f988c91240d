package dns

import (
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	fw "github.com/mcsd-io/mcsd/test/framework"
)

// A dual-stack Service exported from c1 and c2 resolves in every cluster, c3
// included, to that cluster's own ServiceImport IPs: A and AAAA, SRV per
// named port, and nothing under the cluster id. cluster.local keeps
// answering the local Service only. Withdrawn everywhere, the name is gone.
func TestClusterSetIP(t *testing.T) {
	const ns, name = "dns-vip", "web"
	svcName := setUpTest(t, ns, name)
	ports := []corev1.ServicePort{
		{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP},
		{Name: "metrics", Port: 9090, TargetPort: intstr.FromInt32(9090), Protocol: corev1.ProtocolTCP},
		{Name: "syslog", Port: 514, TargetPort: intstr.FromInt32(5514), Protocol: corev1.ProtocolUDP},
	}
	local := map[string]*corev1.Service{}
	for _, id := range []string{"c1", "c2"} {
		cl := env.Client(t, id)
		fw.Deploy(t, cl, fw.App{Namespace: ns, Name: name, Replicas: 1, Ports: ports})
		local[id] = makeDualStack(t, cl, ns, name)
	}
	// A single unnamed port: no SRV name can exist for it.
	c1 := env.Client(t, "c1")
	fw.Deploy(t, c1, fw.App{Namespace: ns, Name: "solo", Replicas: 1,
		Ports: []corev1.ServicePort{{Port: 8080, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}}})

	c3 := env.Client(t, "c3")
	exported := time.Now()
	fw.Export(t, c1, ns, name)
	fw.Export(t, env.Client(t, "c2"), ns, name)
	fw.Export(t, c1, ns, "solo")

	// Export → first correct answer in c3, which exports nothing: the A
	// record equals c3's own ServiceImport IPv4.
	var latency time.Duration
	poll.Until(t, timeout, "first correct A answer in c3", func() (bool, string) {
		r, err := query("c3", svcName, dns.TypeA)
		if err != nil {
			return false, err.Error()
		}
		if r.rcode != dns.RcodeSuccess || len(r.addrs) == 0 {
			return false, r.String()
		}
		latency = time.Since(exported)
		si := fw.GetImport(t, c3, ns, name)
		if si == nil {
			return false, "DNS answers " + r.String() + " but c3 has no ServiceImport"
		}
		v4, _ := byFamily(si.Spec.IPs)
		return r.answers(v4...), fmt.Sprintf("DNS %s, import IPs %v", r, si.Spec.IPs)
	})
	report(t, "export → first correct clusterset.local A answer in another cluster (ClusterSetIP)", latency)

	importIPs := map[string][]string{}
	for i, id := range env.ClusterIDs() {
		cl := env.Client(t, id)
		var si *mcsv1beta1.ServiceImport
		poll.Until(t, timeout, "dual-stack import with both clusters in "+id, func() (bool, string) {
			si = fw.GetImport(t, cl, ns, name)
			if si == nil {
				return false, "no ServiceImport"
			}
			ok := len(si.Status.Clusters) == 2 && len(si.Spec.IPs) == 2 &&
				slices.Equal(si.Spec.IPFamilies, []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol})
			return ok, fmt.Sprintf("ips %v families %v clusters %v conditions %s",
				si.Spec.IPs, si.Spec.IPFamilies, si.Status.Clusters, fw.CondString(si.Status.Conditions))
		})
		importIPs[id] = si.Spec.IPs
		v4, v6 := byFamily(si.Spec.IPs)
		// Each cluster's own IPs, from its own service ranges.
		c := env.TB.Clusters[i]
		for j, ip := range si.Spec.IPs {
			if _, cidr, _ := net.ParseCIDR(c.ServiceCIDRs[j]); !cidr.Contains(net.ParseIP(ip)) {
				t.Errorf("%s: import IP %s outside the cluster's range %s", id, ip, c.ServiceCIDRs[j])
			}
		}
		eventuallyDNS(t, timeout, id, svcName, dns.TypeA, answers(v4...))
		eventuallyDNS(t, timeout, id, svcName, dns.TypeAAAA, answers(v6...))

		target := svcName + "."
		expectDNS(t, id, "_http._tcp."+svcName, dns.TypeSRV, srvAnswer("80 "+target))
		expectDNS(t, id, "_metrics._tcp."+svcName, dns.TypeSRV, srvAnswer("9090 "+target))
		expectDNS(t, id, "_syslog._udp."+svcName, dns.TypeSRV, srvAnswer("514 "+target))
		// The SRV target's addresses come along in the additional section.
		expectDNS(t, id, "_http._tcp."+svcName, dns.TypeSRV, func(r reply) bool {
			want := slices.Clone(si.Spec.IPs)
			slices.Sort(want)
			return slices.Equal(r.extra, want)
		})
		expectDNS(t, id, "_http._udp."+svcName, dns.TypeSRV, nxdomain)
		expectDNS(t, id, "_nope._tcp."+svcName, dns.TypeSRV, nxdomain)
		expectDNS(t, id, svcName, dns.TypeSRV, srvAnswer("80 "+target, "9090 "+target, "514 "+target))

		// No name under a cluster id.
		for _, src := range []string{"c1", "c2", "c3"} {
			expectDNS(t, id, src+"."+svcName, dns.TypeA, nxdomain)
		}
		expectDNS(t, id, "dns-version.clusterset.local", dns.TypeTXT, func(r reply) bool { return len(r.txt) == 1 })

		// cluster.local: the local Service only; none in c3.
		localName := name + "." + ns + ".svc.cluster.local"
		if svc := local[id]; svc != nil {
			lv4, lv6 := byFamily(svc.Spec.ClusterIPs)
			expectDNS(t, id, localName, dns.TypeA, answers(lv4...))
			expectDNS(t, id, localName, dns.TypeAAAA, answers(lv6...))
			if slices.Equal(lv4, v4) {
				t.Errorf("%s: local Service and import share IP %v", id, v4)
			}
		} else {
			expectDNS(t, id, localName, dns.TypeA, nxdomain)
		}

		// The unnamed port: the name resolves, no _<port>._<proto> name does.
		// (A bare-name SRV query is not part of the KEP's schema; CoreDNS
		// answers it with every port, named or not, in cluster.local too.)
		soloName := clusterSetName(ns, "solo")
		var solo *mcsv1beta1.ServiceImport
		poll.Until(t, timeout, "import of solo in "+id, func() (bool, string) {
			solo = fw.GetImport(t, cl, ns, "solo")
			return solo != nil && len(solo.Spec.IPs) == 1, fmt.Sprintf("%+v", solo)
		})
		eventuallyDNS(t, timeout, id, soloName, dns.TypeA, answers(solo.Spec.IPs...))
		expectDNS(t, id, "_8080._tcp."+soloName, dns.TypeSRV, nxdomain)
		expectDNS(t, id, "_http._tcp."+soloName, dns.TypeSRV, nxdomain)
	}
	// c1 withdraws: c2 still exports, the name keeps its IPs.
	fw.Unexport(t, c1, ns, name)
	for _, id := range env.ClusterIDs() {
		cl := env.Client(t, id)
		poll.Until(t, timeout, "import from c2 alone in "+id, func() (bool, string) {
			si := fw.GetImport(t, cl, ns, name)
			return si != nil && len(si.Status.Clusters) == 1, fmt.Sprintf("%+v", si)
		})
		v4, v6 := byFamily(importIPs[id])
		poll.Throughout(t, time.Second, "stable answer in "+id, func() (bool, string) {
			for qt, want := range map[uint16][]string{dns.TypeA: v4, dns.TypeAAAA: v6} {
				r, err := query(id, svcName, qt)
				if err != nil {
					return false, err.Error()
				}
				if !r.answers(want...) {
					return false, r.String()
				}
			}
			return true, ""
		})
	}

	// Withdrawn everywhere: NXDOMAIN for every form of the name.
	unexported := time.Now()
	fw.Unexport(t, env.Client(t, "c2"), ns, name)
	eventuallyDNS(t, timeout, "c3", svcName, dns.TypeA, nxdomain)
	report(t, "unexport everywhere → NXDOMAIN in another cluster (ClusterSetIP)", time.Since(unexported))
	for _, id := range env.ClusterIDs() {
		eventuallyDNS(t, timeout, id, svcName, dns.TypeA, nxdomain)
		expectDNS(t, id, svcName, dns.TypeAAAA, nxdomain)
		expectDNS(t, id, svcName, dns.TypeSRV, nxdomain)
		expectDNS(t, id, "_http._tcp."+svcName, dns.TypeSRV, nxdomain)
	}
	// cluster.local is unaffected by the withdrawal.
	lv4, _ := byFamily(local["c1"].Spec.ClusterIPs)
	expectDNS(t, "c1", name+"."+ns+".svc.cluster.local", dns.TypeA, answers(lv4...))
}
