package core

import (
	"fmt"
	"maps"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	fw "github.com/mcsd-io/mcsd/test/framework"
)

// Endpoints turning not ready and back, and scaling up and down, in the
// exporting cluster show in the imported slices of every cluster.
func TestReadinessAndScaling(t *testing.T) {
	ns, c1 := setUpTest(t, "readiness")
	ips := deployExported(t, c1, fw.App{Namespace: ns, Name: "web", Replicas: 2})

	expect := func(what string, want map[string]string) {
		t.Helper()
		inEveryCluster(t, what, func(id string, cl client.Client) (bool, string) {
			got := endpointStates(importedSlices(t, cl, ns, "web")["c1"])
			return maps.Equal(got, want), fmt.Sprintf("endpoints from c1 %v, want %v", got, want)
		})
	}
	expect("all endpoints ready", allReady(ips))

	pods := runningPods(t, c1, ns, "web")
	name := slices.Sorted(maps.Keys(pods))[0]
	pod := pods[name]
	fw.SetPodReady(t, c1, pod.Namespace, pod.Name, false)
	notReady := allReady(ips)
	notReady[pod.Status.PodIP] = "not-ready"
	expect("pod "+name+" not ready", notReady)
	// kwok did not make the pod ready again behind the test's back.
	if p := runningPods(t, c1, ns, "web")[name]; !slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
		return c.Type == corev1.PodReady && c.Status == corev1.ConditionFalse
	}) {
		t.Fatalf("pod %s is ready again: %+v", name, p.Status.Conditions)
	}

	fw.SetPodReady(t, c1, ns, name, true)
	expect("pod "+name+" ready again", allReady(ips))

	fw.Scale(t, c1, ns, "web", 3)
	ips = waitPods(t, c1, ns, "web", 3)
	expect("three endpoints", allReady(ips))

	fw.Scale(t, c1, ns, "web", 1)
	ips = waitPods(t, c1, ns, "web", 1)
	expect("one endpoint", allReady(ips))

	// No endpoints at all: the import stays, without endpoints from c1.
	fw.Scale(t, c1, ns, "web", 0)
	waitPods(t, c1, ns, "web", 0)
	expect("no endpoints", map[string]string{})
	inEveryCluster(t, "import without endpoints", func(id string, cl client.Client) (bool, string) {
		si := fw.GetImport(t, cl, ns, "web")
		return si != nil && len(si.Spec.IPs) == 1, fmt.Sprintf("import %v", si)
	})
	// kubectl get says so, without -o yaml.
	wantGet(t, "c2", ns, "serviceimport", `\[{"cluster":"c1"}\] +True +False`, "ClustersWithoutReadyEndpoints")
	wantGet(t, "c1", ns, "serviceexport", `web +True +True +False`, "Exported")

	fw.Scale(t, c1, ns, "web", 2)
	ips = waitPods(t, c1, ns, "web", 2)
	expect("endpoints back", allReady(ips))
	wantGet(t, "c2", ns, "serviceimport", `\[{"cluster":"c1"}\] +True +True`, "AllClustersReady")
}

// wantGet waits until `kubectl get KIND -o wide` in cluster id shows a line
// matching row (a regular expression) and holding wide, and that its header
// has the printer columns of the kind.
func wantGet(t *testing.T, id, ns, kind, row, wide string) {
	t.Helper()
	header := map[string]string{
		"serviceimport": "NAME +TYPE +IPS +CLUSTERS +READY +ENDPOINTSREADY +ENDPOINTSREADY REASON +AGE",
		"serviceexport": "NAME +VALID +READY +CONFLICT +READY REASON +CONFLICT REASON +AGE",
	}[kind]
	re := regexp.MustCompile(row)
	poll.Until(t, timeout, "kubectl get "+kind+" in "+id, func() (bool, string) {
		out, err := exec.CommandContext(t.Context(), env.TB.Binaries().Kubectl, "--kubeconfig", env.TB.Cluster(id).Kubeconfig,
			"get", kind, "-n", ns, "-o", "wide").CombinedOutput()
		if err != nil {
			return false, fmt.Sprintf("%v: %s", err, out)
		}
		lines := strings.Split(string(out), "\n")
		ok := regexp.MustCompile(header).MatchString(lines[0]) && slices.ContainsFunc(lines[1:], func(l string) bool {
			return re.MatchString(l) && strings.Contains(l, wide)
		})
		return ok, string(out)
	})
}
