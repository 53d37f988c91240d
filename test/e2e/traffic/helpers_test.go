package traffic

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	fw "github.com/mcsd-io/mcsd/test/e2e/framework"
)

const timeout = 60 * time.Second

// agnhost serves HTTP on 8080 (GET /hostname answers the pod's host name)
// and UDP on 8081 (the message "hostname" answers the same).
func agnhost() corev1.Container {
	return corev1.Container{
		Name:  "app",
		Image: "registry.k8s.io/e2e-test-images/agnhost:2.53",
		Args:  []string{"netexec", "--http-port=8080", "--udp-port=8081"},
		Ports: []corev1.ContainerPort{
			{Name: "http", ContainerPort: 8080},
			{Name: "udp", ContainerPort: 8081, Protocol: corev1.ProtocolUDP},
		},
	}
}

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
	cl := env.Client(t, id)
	fw.EnsureNamespace(t, cl, ns)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: c.Name, Namespace: ns},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{c}},
	}
	if err := cl.Create(context.Background(), pod); err != nil {
		t.Fatalf("create pod %s: %v", c.Name, err)
	}
	waitPodsReady(t, id, ns, map[string]string{}, 1, func(p corev1.Pod) bool { return p.Name == c.Name })
	return c.Name
}

// waitPodsReady waits until n pods of the namespace that match labels (and
// keep) are ready, and returns their names.
func waitPodsReady(t *testing.T, id, ns string, labels map[string]string, n int, keep func(corev1.Pod) bool) []string {
	t.Helper()
	cl := env.Client(t, id)
	var names []string
	poll.Until(t, timeout, fmt.Sprintf("%d ready pods %v in %s/%s", n, labels, id, ns), func() (bool, string) {
		var pods corev1.PodList
		if err := cl.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels(labels)); err != nil {
			return false, err.Error()
		}
		names = nil
		var states []string
		for _, p := range pods.Items {
			if keep != nil && !keep(p) {
				continue
			}
			ready := p.DeletionTimestamp == nil && len(p.Status.PodIPs) == 2
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady {
					ready = ready && c.Status == corev1.ConditionTrue
					if c.Status != corev1.ConditionTrue {
						states = append(states, p.Name+": "+c.Message)
					}
				}
			}
			if ready {
				names = append(names, p.Name)
			}
		}
		return len(names) == n, fmt.Sprintf("ready %v; not ready: %v", names, states)
	})
	return names
}

// shell runs a shell script in the client pod with kubectl exec and returns
// its output and exit code.
func shell(t *testing.T, id, ns, pod, script string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	out, stderr, err := env.TB.Cluster(id).Exec(ctx, ns, pod, "", nil, "sh", "-c", script)
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return out + stderr, ee.ExitCode()
	case err != nil:
		t.Fatalf("kubectl exec in %s %s/%s: %v: %s", id, ns, pod, err, stderr)
	}
	return out, 0
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

func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

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

// origins tells, for each reply, which cluster's pod sent it ("?" for one
// that is no pod's name), and counts them.
func origins(replies []string, byCluster map[string][]string) map[string]int {
	out := map[string]int{}
	for _, r := range replies {
		from := "?"
		for id, names := range byCluster {
			if slices.Contains(names, r) {
				from = id
			}
		}
		out[from]++
	}
	return out
}
