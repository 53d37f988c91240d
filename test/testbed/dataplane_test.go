package testbed_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	"github.com/mcsd-io/mcsd/test/testbed"
	"github.com/mcsd-io/mcsd/test/testbed/netns"
)

func createPod(t *testing.T, id, ns string, pod *corev1.Pod) {
	t.Helper()
	cl := clientFor(t, id)
	_ = cl.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	pod.Namespace = ns
	if err := cl.Create(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
}

func readyCondition(t *testing.T, id, ns, name string) (*corev1.Pod, *corev1.PodCondition) {
	t.Helper()
	var p corev1.Pod
	if err := clientFor(t, id).Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &p); err != nil {
		return nil, nil
	}
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == corev1.PodReady {
			return &p, &p.Status.Conditions[i]
		}
	}
	return &p, nil
}

// A pod runs its command in a network namespace of its own, with its host
// name and resolv.conf, and kubectl exec reaches it: output, exit code, stdin.
func TestPodRunsAndExecWorks(t *testing.T) {
	const ns = "exec"
	createPod(t, "c1", ns, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "box"},
		Spec: corev1.PodSpec{Hostname: "box-host", Containers: []corev1.Container{{
			Name: "main", Image: "busybox", Command: []string{"sh", "-c", "echo started; exec sleep 3600"},
			Env: []corev1.EnvVar{{Name: "MY_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}}},
		}}},
	})
	var pod *corev1.Pod
	poll.Until(t, time.Minute, "pod box ready", func() (bool, string) {
		p, c := readyCondition(t, "c1", ns, "box")
		pod = p
		return c != nil && c.Status == corev1.ConditionTrue, "not yet"
	})
	c := tb.Cluster("c1")
	ctx := context.Background()
	out, _, err := c.Exec(ctx, ns, "box", "", nil, "sh", "-c", `hostname; echo "$MY_IP"; grep -c svc.cluster.local /etc/resolv.conf; ip -o addr show eth0 | grep -c global`)
	if err != nil {
		t.Fatalf("exec: %v", err)
	}
	want := strings.Join([]string{"box-host", pod.Status.PodIP, "1", "2"}, "\n") + "\n"
	if out != want {
		t.Errorf("exec printed %q, want %q", out, want)
	}
	_, _, err = c.Exec(ctx, ns, "box", "", nil, "sh", "-c", "exit 7")
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 7 {
		t.Errorf("exit 7: got %v", err)
	}
	out, _, err = c.Exec(ctx, ns, "box", "", strings.NewReader("from stdin"), "cat")
	if err != nil || out != "from stdin" {
		t.Errorf("stdin: %q, %v", out, err)
	}
	// kubectl logs shows what the container wrote.
	poll.Until(t, time.Minute, "kubectl logs box", func() (bool, string) {
		logs, err := exec.CommandContext(ctx, tb.Binaries().Kubectl, "--kubeconfig", c.Kubeconfig, "logs", "-n", ns, "box").CombinedOutput()
		return err == nil && string(logs) == "started\n", string(logs)
	})
	// A command that leaves a process behind holding its output still ends.
	out, _, err = c.Exec(ctx, ns, "box", "", nil, "sh", "-c", "sleep 600 & echo started")
	if err != nil || out != "started\n" {
		t.Errorf("a command that leaves a child: %q, %v", out, err)
	}
	// Deleted, its namespace and processes go.
	if err := clientFor(t, "c1").Delete(ctx, pod); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, "pod box gone", func() (bool, string) {
		p, _ := readyCondition(t, "c1", ns, "box")
		return p == nil, "still there"
	})
	prefix := c.NodeNetns() + "-p"
	for _, n := range netns.List(prefix) {
		for _, pid := range netns.Pids(ctx, n) {
			cmdline, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
			if strings.Contains(string(cmdline), "sleep") {
				t.Errorf("the deleted pod's process %d still runs in %s", pid, n)
			}
		}
	}
}

// A container the testbed cannot run leaves its pod not ready, saying why.
func TestUnrunnableContainerIsNotReady(t *testing.T) {
	createPod(t, "c2", "unrunnable", &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "nginx"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "nginx", Image: "nginx:1.27"}}},
	})
	poll.Until(t, time.Minute, "pod nginx reported not ready with the reason", func() (bool, string) {
		p, c := readyCondition(t, "c2", "unrunnable", "nginx")
		if p == nil || c == nil || len(p.Status.ContainerStatuses) != 1 {
			return false, "no status yet"
		}
		w := p.Status.ContainerStatuses[0].State.Waiting
		return c.Status == corev1.ConditionFalse && w != nil && w.Reason == "ImageNotRunnable" && strings.Contains(c.Message, "nginx:1.27"),
			c.Message
	})
}

// A hostNetwork pod is not run, and says so.
func TestHostNetworkPodIsNotReady(t *testing.T) {
	createPod(t, "c2", "hostnet", &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "hn"},
		Spec:       corev1.PodSpec{HostNetwork: true, Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
	})
	poll.Until(t, time.Minute, "pod hn reported not run", func() (bool, string) {
		p, c := readyCondition(t, "c2", "hostnet", "hn")
		if p == nil || c == nil {
			return false, "no status yet"
		}
		return c.Status == corev1.ConditionFalse && c.Reason == "HostNetworkNotSupported", c.Reason
	})
}

// Close removes every namespace, link and process the data plane made.
func TestCloseRemovesTheDataPlane(t *testing.T) {
	ctx := context.Background()
	small, err := testbed.Start(ctx, testbed.Options{Name: "close-" + strconv.Itoa(os.Getpid()), Clusters: 1, NodesPerCluster: 1, Ephemeral: true})
	if err != nil {
		t.Fatal(err)
	}
	node := small.Clusters[0].NodeNetns()
	prefix := strings.TrimSuffix(node, "-c1")
	if !netns.Exists(node) || len(netns.Pids(ctx, node)) == 0 {
		t.Fatalf("node namespace %s: exists %v, processes %v", node, netns.Exists(node), netns.Pids(ctx, node))
	}
	if err := small.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if left := netns.List(prefix + "-"); len(left) > 0 {
		t.Errorf("namespaces left after Close: %v", left)
	}
	if _, err := os.Stat(small.Dir()); !os.IsNotExist(err) {
		t.Errorf("state directory left: %v", err)
	}
}

// A testbed whose owner died without Close (a test binary killed by its
// timeout) is removed by the next Start: its processes, state and every
// network namespace.
func TestNextStartRemovesACrashedTestbed(t *testing.T) {
	ctx := context.Background()
	crashed, err := testbed.Start(ctx, testbed.Options{Name: "crashed-" + strconv.Itoa(os.Getpid()), Clusters: 1, NodesPerCluster: 1, Ephemeral: true})
	if err != nil {
		t.Fatal(err)
	}
	prefix := strings.TrimSuffix(crashed.Clusters[0].NodeNetns(), "-c1")
	// Its owner is now a process that has exited.
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(crashed.Dir(), "owner"), []byte(strconv.Itoa(gone.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	next, err := testbed.Start(ctx, testbed.Options{Name: "next-" + strconv.Itoa(os.Getpid()), Clusters: 1, NodesPerCluster: 1, Ephemeral: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = next.Close(ctx) }()
	if left := netns.List(prefix + "-"); len(left) > 0 {
		t.Errorf("namespaces of the crashed testbed left: %v", left)
	}
	if _, err := os.Stat(crashed.Dir()); !os.IsNotExist(err) {
		t.Errorf("state directory of the crashed testbed left: %v", err)
	}
}
