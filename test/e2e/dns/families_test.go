package dns

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"

	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	fw "github.com/mcsd-io/mcsd/test/framework"
)

// A headless import has the IP families of its oldest export. c1 exports
// a single-stack IPv4 headless Service first, c2 the same Service
// dual-stack, which conflicts with nothing (it has every family of the
// import): A answers with both clusters' pods, and AAAA with none, rather
// than with c2's pods alone.
func TestHeadlessImportAnswersItsFamiliesOnly(t *testing.T) {
	const ns, name = "dns-headless-families", "db"
	svcName := setUpTest(t, ns, name)
	var v4 []string
	v6 := 0
	for _, tc := range []struct {
		id     string
		policy corev1.IPFamilyPolicy
	}{{"c1", corev1.IPFamilyPolicySingleStack}, {"c2", corev1.IPFamilyPolicyPreferDualStack}} {
		cl := env.Client(t, tc.id)
		fw.Deploy(t, cl, fw.App{Namespace: ns, Name: name, Replicas: 1, Headless: true, IPFamilyPolicy: tc.policy})
		for _, p := range runningPods(t, cl, ns, name, 1) {
			for _, ip := range p.Status.PodIPs {
				if a, err := netip.ParseAddr(ip.IP); err == nil && a.Is4() {
					v4 = append(v4, ip.IP)
				} else if err == nil && tc.id == "c2" {
					v6++
				}
			}
		}
		fw.Export(t, cl, ns, name)
		poll.Until(t, timeout, "the import of "+tc.id+"'s export in "+tc.id, func() (bool, string) {
			si := fw.GetImport(t, cl, ns, name)
			if si == nil {
				return false, "no ServiceImport"
			}
			for _, c := range si.Status.Clusters {
				if c.Cluster == tc.id {
					return true, ""
				}
			}
			return false, fmt.Sprintf("%v", si)
		})
	}
	if len(v4) != 2 || v6 == 0 {
		t.Fatalf("pods' IPv4 addresses %v, c2's IPv6 ones %d: want one IPv4 address each, and IPv6 in c2", v4, v6)
	}
	for _, id := range env.ClusterIDs() {
		eventuallyDNS(t, timeout, id, svcName, dns.TypeA, answers(v4...))
		expectDNS(t, id, svcName, dns.TypeAAAA, func(r reply) bool { return r.rcode == dns.RcodeSuccess && len(r.addrs) == 0 })
	}
	for _, id := range []string{"c1", "c2"} {
		fw.Unexport(t, env.Client(t, id), ns, name)
	}
	for _, id := range env.ClusterIDs() {
		eventuallyDNS(t, timeout, id, svcName, dns.TypeA, nxdomain)
	}
}
