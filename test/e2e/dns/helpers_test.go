package dns

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	"github.com/mcsd-io/mcsd/test/testbed"
)

const (
	// timeout bounds convergence after a change.
	timeout = 30 * time.Second
	// followTimeout bounds how long DNS may take to follow an endpoint
	// turning not ready: "within a few seconds".
	followTimeout = 10 * time.Second
)

// clusterSetName is the clusterset.local DNS name of Service ns/name.
func clusterSetName(ns, name string) string { return name + "." + ns + ".svc.clusterset.local" }

// setUpTest begins a DNS test of Service ns/name: it runs t in parallel
// with the others, creates ns, the test's own namespace, in every cluster
// and returns the Service's clusterset.local name.
func setUpTest(t *testing.T, ns, name string) string {
	t.Helper()
	t.Parallel()
	env.EnsureNamespaceEverywhere(t, ns)
	return clusterSetName(ns, name)
}

// reply is a DNS answer reduced to what the tests compare.
type reply struct {
	rcode int
	// addrs are the A and AAAA addresses of the answer section, sorted.
	addrs []string
	// srvs are the answer's SRV records as "port target", sorted.
	srvs []string
	// extra are the addresses of the additional section, sorted.
	extra []string
	txt   []string
}

func (r reply) String() string {
	s := dns.RcodeToString[r.rcode]
	if len(r.addrs) > 0 {
		s += fmt.Sprintf(" addrs=%v", r.addrs)
	}
	if len(r.srvs) > 0 {
		s += fmt.Sprintf(" srv=%v", r.srvs)
	}
	if len(r.extra) > 0 {
		s += fmt.Sprintf(" extra=%v", r.extra)
	}
	if len(r.txt) > 0 {
		s += fmt.Sprintf(" txt=%v", r.txt)
	}
	return s
}

// nxdomain says whether the reply is NXDOMAIN.
func (r reply) nxdomain() bool { return r.rcode == dns.RcodeNameError }

// answers says whether the reply is NOERROR with exactly these addresses.
func (r reply) answers(addrs ...string) bool {
	want := slices.Clone(addrs)
	slices.Sort(want)
	return r.rcode == dns.RcodeSuccess && len(want) > 0 && slices.Equal(r.addrs, want)
}

// query asks cluster id's CoreDNS.
func query(id, name string, qtype uint16) (reply, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, err := testbed.Query(ctx, servers[id].Addr(), name, qtype)
	if err != nil {
		return reply{}, err
	}
	r := reply{rcode: m.Rcode}
	for _, rr := range m.Answer {
		if a, ok := address(rr); ok {
			r.addrs = append(r.addrs, a)
			continue
		}
		switch rr := rr.(type) {
		case *dns.SRV:
			r.srvs = append(r.srvs, fmt.Sprintf("%d %s", rr.Port, rr.Target))
		case *dns.TXT:
			r.txt = append(r.txt, strings.Join(rr.Txt, ""))
		}
	}
	for _, rr := range m.Extra {
		if a, ok := address(rr); ok {
			r.extra = append(r.extra, a)
		}
	}
	slices.Sort(r.addrs)
	slices.Sort(r.srvs)
	slices.Sort(r.extra)
	return r, nil
}

// address returns the address of an A or AAAA record.
func address(rr dns.RR) (string, bool) {
	switch rr := rr.(type) {
	case *dns.A:
		return rr.A.String(), true
	case *dns.AAAA:
		return rr.AAAA.String(), true
	}
	return "", false
}

// eventuallyDNS waits until the reply of cluster id's CoreDNS to name
// satisfies ok, and returns how long that took.
func eventuallyDNS(t *testing.T, d time.Duration, id, name string, qtype uint16, ok func(reply) bool) time.Duration {
	t.Helper()
	what := fmt.Sprintf("%s %s in %s", name, dns.TypeToString[qtype], id)
	return poll.Until(t, d, what, func() (bool, string) {
		r, err := query(id, name, qtype)
		if err != nil {
			return false, err.Error()
		}
		return ok(r), r.String()
	})
}

// expectDNS fails unless the reply of cluster id's CoreDNS to name satisfies ok.
func expectDNS(t *testing.T, id, name string, qtype uint16, ok func(reply) bool) {
	t.Helper()
	r, err := query(id, name, qtype)
	if err != nil {
		t.Errorf("%s %s in %s: %v", name, dns.TypeToString[qtype], id, err)
		return
	}
	if !ok(r) {
		t.Errorf("%s %s in %s: unexpected reply %s", name, dns.TypeToString[qtype], id, r)
	}
}

func nxdomain(r reply) bool { return r.nxdomain() }

func answers(addrs ...string) func(reply) bool {
	return func(r reply) bool { return r.answers(addrs...) }
}

func srvAnswer(records ...string) func(reply) bool {
	want := slices.Clone(records)
	slices.Sort(want)
	return func(r reply) bool { return r.rcode == dns.RcodeSuccess && slices.Equal(r.srvs, want) }
}

// report records a measured latency in the test log and on stdout.
func report(t *testing.T, what string, d time.Duration) {
	t.Helper()
	t.Logf("measured: %s: %s", what, d.Round(time.Millisecond))
	fmt.Printf("DNS latency: %s: %s\n", what, d.Round(time.Millisecond))
}

// byFamily splits IPs into IPv4 and IPv6.
func byFamily(ips []string) (v4, v6 []string) {
	for _, ip := range ips {
		if net.ParseIP(ip).To4() != nil {
			v4 = append(v4, ip)
		} else {
			v6 = append(v6, ip)
		}
	}
	return v4, v6
}

// makeDualStack turns a Service into a RequireDualStack one (IPv4 first).
func makeDualStack(t *testing.T, cl client.Client, ns, name string) *corev1.Service {
	t.Helper()
	ctx := context.Background()
	svc := &corev1.Service{}
	if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, svc); err != nil {
		t.Fatal(err)
	}
	base := svc.DeepCopy()
	policy := corev1.IPFamilyPolicyRequireDualStack
	svc.Spec.IPFamilyPolicy = &policy
	svc.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	if err := cl.Patch(ctx, svc, client.MergeFrom(base)); err != nil {
		t.Fatalf("make %s/%s dual-stack: %v", ns, name, err)
	}
	if len(svc.Spec.ClusterIPs) != 2 {
		t.Fatalf("%s/%s: cluster IPs %v after asking for dual-stack", ns, name, svc.Spec.ClusterIPs)
	}
	return svc
}

// runningPods waits for n running pods of app with IPs and returns them by name.
func runningPods(t *testing.T, cl client.Client, ns, app string, n int) map[string]corev1.Pod {
	t.Helper()
	var out map[string]corev1.Pod
	poll.Until(t, timeout, fmt.Sprintf("%d pods of %s/%s running", n, ns, app), func() (bool, string) {
		var pods corev1.PodList
		if err := cl.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{"app": app}); err != nil {
			return false, err.Error()
		}
		out = map[string]corev1.Pod{}
		for _, p := range pods.Items {
			if p.Status.PodIP != "" && p.Status.Phase == corev1.PodRunning && podReady(p) {
				out[p.Name] = p
			}
		}
		return len(out) == n, fmt.Sprintf("%d running and ready", len(out))
	})
	return out
}

func podReady(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
