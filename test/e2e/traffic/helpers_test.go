package traffic

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fw "github.com/mcsd-io/mcsd/test/framework"
)

const timeout = 60 * time.Second

// agnhost serves HTTP on 8080 (GET /hostname answers the pod's host name)
// and UDP on 8081 (the message "hostname" answers the same).
func agnhost() corev1.Container { return fw.Agnhost() }

func httpPort(name string, port int32) corev1.ServicePort {
	return corev1.ServicePort{Name: name, Port: port, TargetPort: intstr.FromInt32(8080)}
}

func udpPort() corev1.ServicePort {
	return corev1.ServicePort{Name: "udp", Port: 8081, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(8081)}
}

// startClient runs a pause pod in the cluster to exec commands in, and
// waits until it is ready.
func startClient(t *testing.T, id, ns string) string {
	t.Helper()
	return startPod(t, id, ns, corev1.Container{Name: "client", Image: "registry.k8s.io/pause:3.10"})
}

// startPod runs a pod of one container, named after it, and waits until it
// is ready.
func startPod(t *testing.T, id, ns string, c corev1.Container) string {
	t.Helper()
	return env.StartPod(t, id, ns, c)
}

// waitPodsReady waits until n pods of the namespace that match labels (and
// keep) are ready, and returns their names.
func waitPodsReady(t *testing.T, id, ns string, labels map[string]string, n int, keep func(corev1.Pod) bool) []string {
	t.Helper()
	return env.WaitPodsReady(t, id, ns, labels, n, keep)
}

// shell runs a shell script in the client pod with kubectl exec and returns
// its output and exit code.
func shell(t *testing.T, id, ns, pod, script string) (string, int) {
	t.Helper()
	return env.Shell(t, id, ns, pod, script)
}

// replies sends n requests with curl (extra flags, then the URL) from the
// client pod, one after the other, and returns the non-empty answers.
func replies(t *testing.T, id, ns, pod, flags, url string, n int) []string {
	t.Helper()
	script := fmt.Sprintf(`for i in $(seq %d); do curl -s -m 2 %s %q; echo; done`, n, flags, url)
	out, _ := shell(t, id, ns, pod, script)
	return lines(out)
}

// udpReplies sends n UDP "hostname" requests with nc and returns the answers.
func udpReplies(t *testing.T, id, ns, pod, host string, port, n int) []string {
	t.Helper()
	// nc waits a second for more after the reply: the requests go at once.
	// Each answer is printed whole, in one write, so that answers do not mix.
	script := fmt.Sprintf(`for i in $(seq %d); do (r=$(echo hostname | nc -u -w 1 %s %d); echo "$r") & done; wait`, n, host, port)
	out, _ := shell(t, id, ns, pod, script)
	return lines(out)
}

func lines(s string) []string { return fw.Lines(s) }

// podNames lists the pods of an app in a cluster.
func podNames(t *testing.T, id, ns, app string) []string {
	t.Helper()
	var pods corev1.PodList
	if err := env.Client(t, id).List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{"app": app}); err != nil {
		t.Fatalf("list pods: %v", err)
	}
	var names []string
	for _, p := range pods.Items {
		names = append(names, p.Name)
	}
	return names
}

func origins(replies []string, byCluster map[string][]string) map[string]int {
	return fw.Origins(replies, byCluster)
}
