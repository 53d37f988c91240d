package core

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fw "github.com/mcsd-io/mcsd/test/e2e/framework"
)

// setPodReady sets a pod's Ready and ContainersReady conditions, as a
// kubelet would when a readiness probe fails or passes again. kwok's
// pod-ready stage only selects Pending pods, so it leaves a running pod's
// conditions alone (the test checks that it did).
func setPodReady(t *testing.T, cl client.Client, pod corev1.Pod, ready bool) {
	t.Helper()
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	base := pod.DeepCopy()
	for _, typ := range []corev1.PodConditionType{corev1.PodReady, corev1.ContainersReady} {
		i := slices.IndexFunc(pod.Status.Conditions, func(c corev1.PodCondition) bool { return c.Type == typ })
		c := corev1.PodCondition{Type: typ, Status: status, LastTransitionTime: metav1.Now()}
		if i < 0 {
			pod.Status.Conditions = append(pod.Status.Conditions, c)
		} else {
			pod.Status.Conditions[i] = c
		}
	}
	for i := range pod.Status.ContainerStatuses {
		pod.Status.ContainerStatuses[i].Ready = ready
	}
	if err := cl.Status().Patch(context.Background(), &pod, client.MergeFrom(base)); err != nil {
		t.Fatalf("set pod %s ready=%v: %v", pod.Name, ready, err)
	}
}

// scale sets a Deployment's replicas.
func scale(t *testing.T, cl client.Client, ns, name string, replicas int32) {
	t.Helper()
	d := &appsv1.Deployment{}
	if err := cl.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, d); err != nil {
		t.Fatal(err)
	}
	base := d.DeepCopy()
	d.Spec.Replicas = &replicas
	if err := cl.Patch(context.Background(), d, client.MergeFrom(base)); err != nil {
		t.Fatalf("scale %s/%s to %d: %v", ns, name, replicas, err)
	}
}

// Endpoints turning not ready and back, and scaling up and down, in the
// exporting cluster show in the imported slices of every cluster.
func TestReadinessAndScaling(t *testing.T) {
	t.Parallel()
	ns := "readiness"
	namespaceEverywhere(t, ns)
	c1 := env.Client(t, "c1")
	fw.Deploy(t, c1, fw.App{Namespace: ns, Name: "web", Replicas: 2})
	ips := waitPods(t, c1, ns, "web", 2)
	fw.Export(t, c1, ns, "web")

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
	setPodReady(t, c1, pod, false)
	notReady := allReady(ips)
	notReady[pod.Status.PodIP] = "not-ready"
	expect("pod "+name+" not ready", notReady)
	// kwok did not make the pod ready again behind the test's back.
	if p := runningPods(t, c1, ns, "web")[name]; !slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
		return c.Type == corev1.PodReady && c.Status == corev1.ConditionFalse
	}) {
		t.Fatalf("pod %s is ready again: %+v", name, p.Status.Conditions)
	}

	setPodReady(t, c1, runningPods(t, c1, ns, "web")[name], true)
	expect("pod "+name+" ready again", allReady(ips))

	scale(t, c1, ns, "web", 3)
	ips = waitPods(t, c1, ns, "web", 3)
	expect("three endpoints", allReady(ips))

	scale(t, c1, ns, "web", 1)
	ips = waitPods(t, c1, ns, "web", 1)
	expect("one endpoint", allReady(ips))

	// No endpoints at all: the import stays, without endpoints from c1.
	scale(t, c1, ns, "web", 0)
	waitPods(t, c1, ns, "web", 0)
	expect("no endpoints", map[string]string{})
	inEveryCluster(t, "import without endpoints", func(id string, cl client.Client) (bool, string) {
		si := fw.GetImport(t, cl, ns, "web")
		return si != nil && len(si.Spec.IPs) == 1, fmt.Sprintf("import %v", si)
	})

	scale(t, c1, ns, "web", 2)
	ips = waitPods(t, c1, ns, "web", 2)
	expect("endpoints back", allReady(ips))
}
