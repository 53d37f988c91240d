package traffic

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	fw "github.com/mcsd-io/mcsd/test/framework"
)

// TestClusterSetTraffic exports one app from both clusters and checks, from
// a client pod in c2, what a person would: curl by name reaches pods of both
// clusters, over IPv4 and IPv6, TCP and UDP; a port only c1 serves reaches
// only c1; ClientIP affinity sticks; c1 scaled to zero leaves c2's pods;
// unexported, the name is gone.
func TestClusterSetTraffic(t *testing.T) {
	const ns = "traffic"
	for _, id := range []string{"c1", "c2"} {
		ports := []corev1.ServicePort{httpPort("http", 80), udpPort()}
		if id == "c1" {
			ports = append(ports, httpPort("only-c1", 9000))
		}
		fw.Deploy(t, env.Client(t, id), fw.App{Namespace: ns, Name: "web", Ports: ports,
			Containers: []corev1.Container{agnhost()}, IPFamilyPolicy: corev1.IPFamilyPolicyPreferDualStack})
		fw.Deploy(t, env.Client(t, id), fw.App{Namespace: ns, Name: "sticky", Ports: []corev1.ServicePort{httpPort("http", 80)},
			Containers: []corev1.Container{agnhost()}, SessionAffinity: corev1.ServiceAffinityClientIP})
	}
	byCluster := map[string][]string{}
	for _, id := range []string{"c1", "c2"} {
		byCluster[id] = waitPodsReady(t, id, ns, map[string]string{"app": "web"}, 2, nil)
		waitPodsReady(t, id, ns, map[string]string{"app": "sticky"}, 2, nil)
		fw.Export(t, env.Client(t, id), ns, "web")
		fw.Export(t, env.Client(t, id), ns, "sticky")
	}
	client := startClient(t, "c2", ns)
	web := "http://web." + ns + ".svc.clusterset.local"

	t.Run("curl by name reaches pods of both clusters", func(t *testing.T) {
		poll.Until(t, timeout, "replies from c1 and c2", func() (bool, string) {
			got := origins(replies(t, "c2", ns, client, "", web+"/hostname", 30), byCluster)
			return got["c1"] > 0 && got["c2"] > 0 && got["?"] == 0, fmt.Sprint(got)
		})
	})
	t.Run("over IPv6", func(t *testing.T) {
		out, code := shell(t, "c2", ns, client, "dig +short AAAA web."+ns+".svc.clusterset.local")
		if code != 0 || !strings.Contains(out, ":") {
			t.Fatalf("AAAA web: %q (exit %d)", out, code)
		}
		poll.Until(t, timeout, "IPv6 replies from c1 and c2", func() (bool, string) {
			got := origins(replies(t, "c2", ns, client, "-6", web+"/hostname", 30), byCluster)
			return got["c1"] > 0 && got["c2"] > 0 && got["?"] == 0, fmt.Sprint(got)
		})
	})
	t.Run("UDP reaches both clusters", func(t *testing.T) {
		poll.Until(t, timeout, "UDP replies from c1 and c2", func() (bool, string) {
			got := origins(udpReplies(t, "c2", ns, client, "web."+ns+".svc.clusterset.local", 8081, 30), byCluster)
			return got["c1"] > 0 && got["c2"] > 0 && got["?"] == 0, fmt.Sprint(got)
		})
	})
	t.Run("a port only c1 serves reaches only c1", func(t *testing.T) {
		got := origins(replies(t, "c2", ns, client, "", web+":9000/hostname", 30), byCluster)
		if got["c1"] == 0 || len(got) != 1 {
			t.Fatalf("replies on port 9000: %v, want c1's pods only", got)
		}
		// The port sets differ: both exports say so, and traffic flows.
		for _, id := range []string{"c1", "c2"} {
			poll.Until(t, timeout, "PortConflict on "+id+"'s export", func() (bool, string) {
				se := &mcsv1beta1.ServiceExport{}
				if err := env.Client(t, id).Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "web"}, se); err != nil {
					return false, err.Error()
				}
				c := fw.Condition(se.Status.Conditions, "Conflict")
				return c != nil && c.Reason == "PortConflict" && strings.Contains(c.Message, `"only-c1" TCP/9000`), fw.CondString(se.Status.Conditions)
			})
		}
	})
	t.Run("ClientIP affinity keeps the client on one backend", func(t *testing.T) {
		sticky := map[string][]string{}
		for _, id := range []string{"c1", "c2"} {
			sticky[id] = podNames(t, id, ns, "sticky")
		}
		poll.Until(t, timeout, "sticky import routed", func() (bool, string) {
			got := replies(t, "c2", ns, client, "", "http://sticky."+ns+".svc.clusterset.local/hostname", 20)
			distinct := slices.Compact(slices.Sorted(slices.Values(got)))
			o := origins(got, sticky)
			return len(got) == 20 && len(distinct) == 1 && o["?"] == 0, fmt.Sprintf("%d replies from %v", len(got), distinct)
		})
	})
	t.Run("c1 scaled to zero leaves c2's pods", func(t *testing.T) {
		fw.Scale(t, env.Client(t, "c1"), ns, "web", 0)
		poll.Until(t, timeout, "replies from c2 only", func() (bool, string) {
			got := origins(replies(t, "c2", ns, client, "", web+"/hostname", 20), byCluster)
			return got["c2"] == 20, fmt.Sprint(got)
		})
	})
	t.Run("unexported everywhere, the name is gone and nothing answers", func(t *testing.T) {
		for _, id := range []string{"c1", "c2"} {
			fw.Unexport(t, env.Client(t, id), ns, "web")
		}
		poll.Until(t, timeout, "web no longer resolves", func() (bool, string) {
			out, code := shell(t, "c2", ns, client, "curl -s -m 2 "+web+"/hostname")
			return code == 6, fmt.Sprintf("curl exit %d: %q", code, out) // 6: could not resolve host
		})
	})
}

// TestHeadlessPerPodNames exports a headless StatefulSet from c1: from c2,
// <pod>.c1.<svc>.<ns>.svc.clusterset.local answers A and AAAA and reaches
// that pod over both families.
func TestHeadlessPerPodNames(t *testing.T) {
	const ns = "traffic-headless"
	fw.Deploy(t, env.Client(t, "c1"), fw.App{Namespace: ns, Name: "db", Headless: true, StatefulSet: true,
		Ports: []corev1.ServicePort{httpPort("http", 8080)}, Containers: []corev1.Container{agnhost()},
		IPFamilyPolicy: corev1.IPFamilyPolicyPreferDualStack})
	waitPodsReady(t, "c1", ns, map[string]string{"app": "db"}, 2, nil)
	fw.Export(t, env.Client(t, "c1"), ns, "db")
	client := startClient(t, "c2", ns)
	for _, pod := range []string{"db-0", "db-1"} {
		name := pod + ".c1.db." + ns + ".svc.clusterset.local"
		poll.Until(t, timeout, name+" answers A and AAAA", func() (bool, string) {
			out, _ := shell(t, "c2", ns, client, "dig +short A "+name+"; dig +short AAAA "+name)
			l := lines(out)
			return len(l) == 2 && strings.Contains(l[1], ":"), fmt.Sprint(l)
		})
		for _, family := range []string{"-4", "-6"} {
			got := replies(t, "c2", ns, client, family, "http://"+name+":8080/hostname", 3)
			if len(got) != 3 || slices.ContainsFunc(got, func(s string) bool { return s != pod }) {
				t.Fatalf("curl %s %s: %q, want %s three times", family, name, got, pod)
			}
		}
	}
}

// TestSocatAndNetcat is the flow of the upstream guides: a pod whose
// container runs sh -c with socat listeners in c1, reached from a pod in c2
// with nc through the ClusterSetIP.
func TestSocatAndNetcat(t *testing.T) {
	const ns = "traffic-socat"
	c := corev1.Container{
		Name:    "echo",
		Image:   "docker.io/library/alpine:3",
		Command: []string{"sh", "-c"},
		Args: []string{`socat TCP-LISTEN:7000,fork,reuseaddr SYSTEM:'echo pong from $HOSTNAME' &
socat UDP-LISTEN:7001,fork,reuseaddr SYSTEM:'echo pong from $HOSTNAME' &
wait`},
		Ports: []corev1.ContainerPort{{ContainerPort: 7000}, {ContainerPort: 7001, Protocol: corev1.ProtocolUDP}},
	}
	fw.Deploy(t, env.Client(t, "c1"), fw.App{Namespace: ns, Name: "echo", Replicas: 1, Containers: []corev1.Container{c},
		Ports: []corev1.ServicePort{
			{Name: "tcp", Port: 7000, TargetPort: intstr.FromInt32(7000)},
			{Name: "udp", Port: 7001, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(7001)},
		}})
	pods := waitPodsReady(t, "c1", ns, map[string]string{"app": "echo"}, 1, nil)
	fw.Export(t, env.Client(t, "c1"), ns, "echo")
	client := startClient(t, "c2", ns)
	host := "echo." + ns + ".svc.clusterset.local"
	poll.Until(t, timeout, "nc over TCP", func() (bool, string) {
		out, _ := shell(t, "c2", ns, client, "nc -w 2 "+host+" 7000 </dev/null")
		return strings.TrimSpace(out) == "pong from "+pods[0], out
	})
	poll.Until(t, timeout, "nc over UDP", func() (bool, string) {
		out, _ := shell(t, "c2", ns, client, "echo ping | nc -u -w 1 "+host+" 7001")
		return strings.TrimSpace(out) == "pong from "+pods[0], out
	})
}
