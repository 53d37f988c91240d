package traffic

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/controller/imports"
	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	"github.com/mcsd-io/mcsd/internal/topology"
	fw "github.com/mcsd-io/mcsd/test/framework"
)

var localityClusters = []string{"c1", "c2", "c3"}

// deployZone runs one agnhost pod of app "web" on node n (zone-a for 0,
// zone-b for 1; the testbed's zones are shared by every cluster) as
// Deployment web-<zone>.
func deployZone(t *testing.T, id, ns string, n int) {
	t.Helper()
	cl := env.Client(t, id)
	zone := env.TB.Cluster(id).Zone(n)
	labels := map[string]string{"app": "web", "zone": zone}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-" + zone},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{corev1.LabelHostname: env.TB.Cluster(id).NodeName(n)},
					Containers:   []corev1.Container{agnhost()},
				},
			},
		},
	}
	if err := cl.Create(context.Background(), d); err != nil {
		t.Fatalf("create %s in %s: %v", d.Name, id, err)
	}
}

// deployWeb runs web in cluster id, one pod on each of its first n nodes
// (deployZone), behind Service web (port 80), and exports it.
func deployWeb(t *testing.T, id, ns string, n int) {
	t.Helper()
	cl := env.Client(t, id)
	fw.EnsureNamespace(t, cl, ns)
	for i := range n {
		deployZone(t, id, ns, i)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
	if err := cl.Create(context.Background(), svc); err != nil {
		t.Fatalf("create service in %s: %v", id, err)
	}
	waitPodsReady(t, id, ns, map[string]string{"app": "web"}, n, nil)
	fw.Export(t, cl, ns, "web")
}

// localityPods maps every running web pod's name to "<cluster>/<zone>".
func localityPods(t *testing.T, ns string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, id := range localityClusters {
		var pods corev1.PodList
		if err := env.Client(t, id).List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{"app": "web"}); err != nil {
			t.Fatalf("list pods: %v", err)
		}
		for _, p := range pods.Items {
			out[p.Name] = id + "/" + p.Labels["zone"]
		}
	}
	return out
}

// tally sends n requests from the client pod and counts the answers by
// "<cluster>/<zone>" ("failed" for a request without an answer, "?" for an
// answer from no known pod).
func tally(t *testing.T, ns, pod, url string, n int) map[string]int {
	t.Helper()
	pods := localityPods(t, ns)
	script := fmt.Sprintf(`for i in $(seq %d); do curl -s -m 2 %q || printf failed; echo; done`, n, url)
	out, _ := shell(t, "c2", ns, pod, script)
	got := map[string]int{}
	for _, l := range lines(out) {
		switch where, ok := pods[l]; {
		case l == "failed":
			got["failed"]++
		case ok:
			got[where]++
		default:
			got["?"]++
		}
	}
	return got
}

// only reports whether every answer of got came from a key keep accepts,
// and how many answers failed.
func only(got map[string]int, keep func(string) bool) bool {
	for k, n := range got {
		if n > 0 && (k == "failed" || k == "?" || !keep(k)) {
			return false
		}
	}
	return len(got) > 0
}

// switchTo sends requests until n in a row are answered only from where
// keep accepts, and returns how many failed before that: the requests lost
// while the traffic moved.
func switchTo(t *testing.T, what, ns, pod, url string, n int, keep func(string) bool) int {
	t.Helper()
	failed := 0
	poll.Until(t, timeout, what, func() (bool, string) {
		got := tally(t, ns, pod, url, n)
		if only(got, keep) {
			return true, ""
		}
		failed += got["failed"]
		return false, fmt.Sprint(got)
	})
	t.Logf("%s: %d requests failed while switching", what, failed)
	return failed
}

// flipReadiness turns the web pods that flipped accepts (by
// "<cluster>/<zone>"), named who, not ready and waits until the traffic
// goes only where instead accepts; then it turns them ready again and waits
// until the traffic is theirs alone again. A request lost on either switch
// fails t.
func flipReadiness(t *testing.T, ns, pod, url, who string, flipped, instead func(string) bool) {
	t.Helper()
	setReady := func(ready bool) {
		for name, where := range localityPods(t, ns) {
			if flipped(where) {
				id, _, _ := strings.Cut(where, "/")
				fw.SetPodReady(t, env.Client(t, id), ns, name, ready)
			}
		}
	}
	setReady(false)
	if n := switchTo(t, who+" not ready: the other pods", ns, pod, url, 20, instead); n > 0 {
		t.Errorf("%d requests failed when %s turned not ready", n, who)
	}
	setReady(true)
	if n := switchTo(t, who+" ready again: "+who, ns, pod, url, 20, flipped); n > 0 {
		t.Errorf("%d requests failed when %s turned ready", n, who)
	}
}

// TestLocality exports web from three clusters, one pod in zone-a and one in
// zone-b each, and checks from a client pod in c2 (the testbed routes every
// pod of a cluster as its node 0 would, in zone-a) where requests land:
// everywhere without a preference; zone-a's pods of every cluster with
// trafficDistribution PreferSameZone, the others while every zone-a pod is
// not ready; c2's pods with the same-cluster preference, the other
// clusters' while c2's are not ready or scaled to zero, and c2's again once
// back. Readiness changes lose no request.
func TestLocality(t *testing.T) {
	const ns = "locality"
	for _, id := range localityClusters {
		deployWeb(t, id, ns, 2)
	}
	pod := startClient(t, "c2", ns)
	// A subtest that fails says how c2's kube-proxy routed the import then.
	report := func(t *testing.T) {
		t.Cleanup(func() {
			if t.Failed() {
				t.Log(env.TB.Cluster("c2").ProxyReport(context.Background(), ns, imports.DerivedServiceName("web")))
			}
		})
	}
	if z := env.TB.Cluster("c2").Zone(0); z != "zone-a" {
		t.Fatalf("c2's node 0 is in %s: the testbed's zones are not shared", z)
	}
	url := "http://web." + ns + ".svc.clusterset.local/hostname"
	inZoneA := func(k string) bool { return strings.HasSuffix(k, "/zone-a") }
	inZoneB := func(k string) bool { return strings.HasSuffix(k, "/zone-b") }
	fromC2 := func(k string) bool { return strings.HasPrefix(k, "c2/") }
	notC2 := func(k string) bool { return !fromC2(k) }

	t.Run("no preference: every cluster answers", func(t *testing.T) {
		report(t)
		poll.Until(t, timeout, "replies from c1, c2 and c3", func() (bool, string) {
			got := tally(t, ns, pod, url, 30)
			seen := map[string]bool{}
			for k := range got {
				seen[strings.Split(k, "/")[0]] = true
			}
			return seen["c1"] && seen["c2"] && seen["c3"] && got["failed"] == 0 && got["?"] == 0, fmt.Sprint(got)
		})
	})

	t.Run("PreferSameZone: zone-a's pods of every cluster answer, the others when none is ready", func(t *testing.T) {
		report(t)
		for _, id := range localityClusters {
			setService(t, id, ns, func(s *corev1.Service) {
				s.Spec.TrafficDistribution = ptr.To(corev1.ServiceTrafficDistributionPreferSameZone)
			})
		}
		waitHints(t, ns, metav1.ConditionTrue, topology.ReasonHinted)
		switchTo(t, "zone-a's pods only", ns, pod, url, 20, inZoneA)
		got := tally(t, ns, pod, url, 30)
		if n := len(slices.DeleteFunc(slices.Collect(maps.Keys(got)), func(k string) bool { return !inZoneA(k) })); n < 2 {
			t.Errorf("replies %v: want zone-a pods of several clusters", got)
		}

		flipReadiness(t, ns, pod, url, "zone-a's pods", inZoneA, inZoneB)
	})

	t.Run("same-cluster preference: c2's pods, the others while c2 has none", func(t *testing.T) {
		report(t)
		for _, id := range localityClusters {
			setService(t, id, ns, func(s *corev1.Service) { s.Spec.TrafficDistribution = nil })
			setExport(t, id, ns, func(se *mcsv1beta1.ServiceExport) {
				se.Spec.ExportedAnnotations = map[string]string{topology.AnnotationPreference: topology.PreferSameCluster}
			})
		}
		poll.Until(t, timeout, "c2's import says it prefers c2", func() (bool, string) {
			si := fw.GetImport(t, env.Client(t, "c2"), ns, "web")
			c := fw.Condition(si.Status.Conditions, topology.ConditionHints)
			return si.Spec.TrafficDistribution == nil && si.Annotations[topology.AnnotationPreference] == topology.PreferSameCluster &&
					c != nil && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, "this cluster's endpoints") && !strings.Contains(c.Message, "zone"),
				fw.CondString(si.Status.Conditions)
		})
		switchTo(t, "c2's pods only", ns, pod, url, 20, fromC2)
		if got := tally(t, ns, pod, url, 20); got["c2/zone-a"] == 0 || got["c2/zone-b"] == 0 {
			t.Errorf("replies %v: want both of c2's pods", got)
		}

		flipReadiness(t, ns, pod, url, "c2's pods", fromC2, notC2)
		for _, z := range []string{"zone-a", "zone-b"} {
			fw.Scale(t, env.Client(t, "c2"), ns, "web-"+z, 0)
		}
		switchTo(t, "c2 scaled to zero: c1's and c3's pods", ns, pod, url, 20, notC2)
		for _, z := range []string{"zone-a", "zone-b"} {
			fw.Scale(t, env.Client(t, "c2"), ns, "web-"+z, 1)
		}
		switchTo(t, "c2 scaled up again: c2's pods", ns, pod, url, 20, fromC2)

		// With PreferSameZone too: c2's pod in the client's zone.
		for _, id := range localityClusters {
			setService(t, id, ns, func(s *corev1.Service) {
				s.Spec.TrafficDistribution = ptr.To(corev1.ServiceTrafficDistributionPreferSameZone)
			})
		}
		switchTo(t, "same cluster and zone: c2's zone-a pod", ns, pod, url, 20, func(k string) bool { return k == "c2/zone-a" })
	})

	// kube-proxy picks per port: while a port rolls out, a zone whose pods
	// do not serve it yet is served by this cluster's pods that do.
	t.Run("a port rolling out: c2's pod that serves it, from any zone", func(t *testing.T) {
		report(t)
		for _, id := range localityClusters {
			setService(t, id, ns, func(s *corev1.Service) {
				s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "admin", Port: 81, TargetPort: intstr.FromString("admin")})
			})
			// Only zone-b's pods name the port.
			fw.Patch(t, env.Client(t, id), &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-" + env.TB.Cluster(id).Zone(1)}},
				func(d *appsv1.Deployment) {
					c := &d.Spec.Template.Spec.Containers[0]
					c.Ports = append(c.Ports, corev1.ContainerPort{Name: "admin", ContainerPort: 8080})
				})
		}
		admin := "http://web." + ns + ".svc.clusterset.local:81/hostname"
		switchTo(t, "admin: c2's zone-b pod, the one of c2 that serves it", ns, pod, admin, 20, func(k string) bool { return k == "c2/zone-b" })
		if got := tally(t, ns, pod, url, 20); !only(got, func(k string) bool { return k == "c2/zone-a" }) {
			t.Errorf("replies on port 80 %v: want c2's zone-a pod alone", got)
		}
	})
}

func setService(t *testing.T, id, ns string, change func(*corev1.Service)) {
	t.Helper()
	fw.Patch(t, env.Client(t, id), &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}}, change)
}

func setExport(t *testing.T, id, ns string, change func(*mcsv1beta1.ServiceExport)) {
	t.Helper()
	fw.Patch(t, env.Client(t, id), &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}}, change)
}

// waitHints waits for c2's import's TopologyHints condition.
func waitHints(t *testing.T, ns string, status metav1.ConditionStatus, reason string) {
	t.Helper()
	poll.Until(t, timeout, "TopologyHints "+reason+" on c2's import", func() (bool, string) {
		si := fw.GetImport(t, env.Client(t, "c2"), ns, "web")
		if si == nil {
			return false, "no import"
		}
		c := fw.Condition(si.Status.Conditions, topology.ConditionHints)
		return c != nil && c.Status == status && c.Reason == reason, fw.CondString(si.Status.Conditions)
	})
}
