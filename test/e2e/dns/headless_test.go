package dns

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"

	fw "github.com/mcsd-io/mcsd/test/framework"
)

// A headless StatefulSet exported from c1 and c2 resolves in every cluster to
// the ready pods of both: the name to every ready address, each
// <hostname>.<clusterid> name to its one pod, SRV to one record per endpoint.
// DNS follows readiness within seconds, is NXDOMAIN with no ready endpoint,
// and once the export is withdrawn everywhere.
func TestHeadless(t *testing.T) {
	const ns, name = "dns-headless", "db"
	svcName := setUpTest(t, ns, name)
	exporters := []string{"c1", "c2"}
	// ips[cluster][hostname] is the pod's IP; a StatefulSet pod's hostname is its name.
	ips := map[string]map[string]string{}
	for _, id := range exporters {
		cl := env.Client(t, id)
		fw.Deploy(t, cl, fw.App{Namespace: ns, Name: name, Replicas: 2, Headless: true, StatefulSet: true})
		ips[id] = map[string]string{}
		for podName, p := range runningPods(t, cl, ns, name, 2) {
			ips[id][podName] = p.Status.PodIP
		}
	}
	// ready lists the addresses DNS should answer, given the pods not ready.
	ready := func(notReady ...string) []string {
		var out []string
		for _, id := range exporters {
			for host, ip := range ips[id] {
				if !slices.Contains(notReady, id+"/"+host) {
					out = append(out, ip)
				}
			}
		}
		return out
	}
	srvRecords := func(port string, clusters ...string) []string {
		var out []string
		for _, id := range clusters {
			for host := range ips[id] {
				out = append(out, fmt.Sprintf("%s %s.%s.%s.", port, host, id, svcName))
			}
		}
		return out
	}

	exported := time.Now()
	for _, id := range exporters {
		fw.Export(t, env.Client(t, id), ns, name)
	}
	all := ready()
	eventuallyDNS(t, timeout, "c3", svcName, dns.TypeA, answers(all...))
	report(t, "export → first complete clusterset.local A answer in another cluster (Headless, 2 exporting clusters)", time.Since(exported))

	for _, id := range env.ClusterIDs() {
		eventuallyDNS(t, timeout, id, svcName, dns.TypeA, answers(all...))
		expectDNS(t, id, svcName, dns.TypeAAAA, func(r reply) bool { return r.rcode == dns.RcodeSuccess && len(r.addrs) == 0 })
		for _, src := range exporters {
			for _, host := range slices.Sorted(maps.Keys(ips[src])) {
				expectDNS(t, id, host+"."+src+"."+svcName, dns.TypeA, answers(ips[src][host]))
			}
			// The cluster id alone names nothing.
			expectDNS(t, id, src+"."+svcName, dns.TypeA, nxdomain)
		}
		expectDNS(t, id, "c3."+svcName, dns.TypeA, nxdomain)
		expectDNS(t, id, "db-0.c3."+svcName, dns.TypeA, nxdomain)
		// SRV: one record per endpoint, the endpoint's port, its own name.
		expectDNS(t, id, "_http._tcp."+svcName, dns.TypeSRV, srvAnswer(srvRecords("8080", exporters...)...))
		expectDNS(t, id, svcName, dns.TypeSRV, srvAnswer(srvRecords("8080", exporters...)...))
		expectDNS(t, id, "_http._udp."+svcName, dns.TypeSRV, nxdomain)

		// cluster.local: the local headless Service's pods only.
		localName := name + "." + ns + ".svc.cluster.local"
		if local, ok := ips[id]; ok {
			expectDNS(t, id, localName, dns.TypeA, answers(slices.Collect(maps.Values(local))...))
		} else {
			expectDNS(t, id, localName, dns.TypeA, nxdomain)
		}
	}

	// An endpoint turning not ready leaves the answer everywhere.
	c2 := env.Client(t, "c2")
	changed := time.Now()
	fw.SetPodReady(t, c2, ns, "db-1", false)
	left := ready("c2/db-1")
	var slowest time.Duration
	for _, id := range env.ClusterIDs() {
		eventuallyDNS(t, followTimeout, id, svcName, dns.TypeA, answers(left...))
		slowest = time.Since(changed)
	}
	report(t, "pod turns not ready → gone from the headless answer in every cluster", slowest)
	for _, id := range env.ClusterIDs() {
		expectDNS(t, id, "db-1.c2."+svcName, dns.TypeA, nxdomain)
		expectDNS(t, id, "db-0.c2."+svcName, dns.TypeA, answers(ips["c2"]["db-0"]))
		expectDNS(t, id, "_http._tcp."+svcName, dns.TypeSRV, func(r reply) bool { return r.rcode == dns.RcodeSuccess && len(r.srvs) == 3 })
	}
	changed = time.Now()
	fw.SetPodReady(t, c2, ns, "db-1", true)
	for _, id := range env.ClusterIDs() {
		eventuallyDNS(t, followTimeout, id, svcName, dns.TypeA, answers(all...))
	}
	report(t, "pod ready again → back in the headless answer in every cluster", time.Since(changed))

	// No ready endpoint anywhere: NXDOMAIN, while the import stays.
	for _, id := range exporters {
		for host := range ips[id] {
			fw.SetPodReady(t, env.Client(t, id), ns, host, false)
		}
	}
	for _, id := range env.ClusterIDs() {
		eventuallyDNS(t, followTimeout, id, svcName, dns.TypeA, nxdomain)
		expectDNS(t, id, svcName, dns.TypeSRV, nxdomain)
		expectDNS(t, id, "db-0.c1."+svcName, dns.TypeA, nxdomain)
		if fw.GetImport(t, env.Client(t, id), ns, name) == nil {
			t.Errorf("%s: the import went away with the ready endpoints", id)
		}
	}
	for _, id := range exporters {
		for host := range ips[id] {
			fw.SetPodReady(t, env.Client(t, id), ns, host, true)
		}
	}
	for _, id := range env.ClusterIDs() {
		eventuallyDNS(t, followTimeout, id, svcName, dns.TypeA, answers(all...))
	}

	// c1 withdraws: only c2's pods are left; then nothing.
	fw.Unexport(t, env.Client(t, "c1"), ns, name)
	for _, id := range env.ClusterIDs() {
		eventuallyDNS(t, timeout, id, svcName, dns.TypeA, answers(slices.Collect(maps.Values(ips["c2"]))...))
		expectDNS(t, id, "db-0.c1."+svcName, dns.TypeA, nxdomain)
		expectDNS(t, id, "_http._tcp."+svcName, dns.TypeSRV, srvAnswer(srvRecords("8080", "c2")...))
	}
	unexported := time.Now()
	fw.Unexport(t, c2, ns, name)
	eventuallyDNS(t, timeout, "c3", svcName, dns.TypeA, nxdomain)
	report(t, "unexport everywhere → NXDOMAIN in another cluster (Headless)", time.Since(unexported))
	for _, id := range env.ClusterIDs() {
		eventuallyDNS(t, timeout, id, svcName, dns.TypeA, nxdomain)
		expectDNS(t, id, "db-0.c2."+svcName, dns.TypeA, nxdomain)
		expectDNS(t, id, svcName, dns.TypeSRV, nxdomain)
	}
}
