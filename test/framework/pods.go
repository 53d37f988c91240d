package framework

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
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcsd-io/mcsd/internal/testutil/poll"
)

// podTimeout bounds the wait for pods to become ready.
const podTimeout = 60 * time.Second

// StartPod runs a pod of one container in cluster id, named after the
// container, and waits until it is ready (on the data plane: running, with
// its addresses).
func (e *Env) StartPod(t testing.TB, id, ns string, c corev1.Container) string {
	t.Helper()
	cl := e.Client(t, id)
	EnsureNamespace(t, cl, ns)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: c.Name, Namespace: ns},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{c}},
	}
	if err := cl.Create(context.Background(), pod); err != nil {
		t.Fatalf("create pod %s: %v", c.Name, err)
	}
	e.WaitPodsReady(t, id, ns, map[string]string{}, 1, func(p corev1.Pod) bool { return p.Name == c.Name })
	return c.Name
}

// WaitPodsReady waits until n pods of the namespace that match labels (and
// keep) are ready with both their addresses, and returns their names.
func (e *Env) WaitPodsReady(t testing.TB, id, ns string, labels map[string]string, n int, keep func(corev1.Pod) bool) []string {
	t.Helper()
	cl := e.Client(t, id)
	var names []string
	poll.Until(t, podTimeout, fmt.Sprintf("%d ready pods %v in %s/%s", n, labels, id, ns), func() (bool, string) {
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

// Shell runs a shell script in a pod of cluster id with kubectl exec and
// returns its output (stdout, then stderr) and exit code.
func (e *Env) Shell(t testing.TB, id, ns, pod, script string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	out, stderr, err := e.TB.Cluster(id).Exec(ctx, ns, pod, "", nil, "sh", "-c", script)
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return out + stderr, ee.ExitCode()
	case err != nil:
		t.Fatalf("kubectl exec in %s %s/%s: %v: %s", id, ns, pod, err, stderr)
	}
	return out, 0
}

// Lines splits s into its non-blank lines, trimmed.
func Lines(s string) []string {
	var out []string
	for l := range strings.SplitSeq(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// Origins tells, for each reply (a pod's name), which cluster's pod sent it
// ("?" for one that is no pod's name), and counts them.
func Origins(replies []string, byCluster map[string][]string) map[string]int {
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

// AgnhostImage is the image of Agnhost's container.
const AgnhostImage = "registry.k8s.io/e2e-test-images/agnhost:2.53"

// Agnhost is a container that serves HTTP on 8080 (GET /hostname answers
// the pod's name) and UDP on 8081 (the message "hostname" answers the
// same).
func Agnhost() corev1.Container {
	return corev1.Container{
		Name:  "app",
		Image: AgnhostImage,
		Args:  []string{"netexec", "--http-port=8080", "--udp-port=8081"},
		Ports: []corev1.ContainerPort{
			{Name: "http", ContainerPort: 8080},
			{Name: "udp", ContainerPort: 8081, Protocol: corev1.ProtocolUDP},
		},
	}
}
