package cloudmap

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	fw "github.com/mcsd-io/mcsd/test/framework"
)

// Cloud Map is polled, so propagation takes a few poll intervals.
const timeout = 45 * time.Second

func readyByCluster(t *testing.T, cl client.Client, ns, name string) map[string][]string {
	t.Helper()
	var list discoveryv1.EndpointSliceList
	if err := cl.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels{mcsv1beta1.LabelServiceName: name}); err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, s := range list.Items {
		c := s.Labels[mcsv1beta1.LabelSourceCluster]
		for _, ep := range s.Endpoints {
			if ep.Conditions.Ready != nil && *ep.Conditions.Ready {
				out[c] = append(out[c], ep.Addresses...)
			}
		}
		slices.Sort(out[c])
	}
	return out
}

func runningPods(t *testing.T, cl client.Client, ns string) []corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := cl.List(context.Background(), &pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" && p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

func ips(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Status.PodIP)
	}
	slices.Sort(out)
	return out
}

// TestExportImportReadinessUnexport: an export from c1 is imported in c2
// through Cloud Map; a pod turning not-ready leaves the ready set; unexport
// removes the import.
func TestExportImportReadinessUnexport(t *testing.T) {
	ns := "cm-basic"
	c1, c2 := env.Client(t, "c1"), env.Client(t, "c2")
	fw.EnsureNamespace(t, c2, ns)
	fw.Deploy(t, c1, fw.App{Namespace: ns, Name: "web", Replicas: 2})
	poll.Until(t, timeout, "pods running in c1", func() (bool, string) {
		n := len(runningPods(t, c1, ns))
		return n == 2, fmt.Sprintf("%d running", n)
	})
	want := ips(runningPods(t, c1, ns))
	fw.Export(t, c1, ns, "web")

	for _, id := range []string{"c1", "c2"} {
		cl := env.Client(t, id)
		poll.Until(t, timeout, "import in "+id, func() (bool, string) {
			si := fw.GetImport(t, cl, ns, "web")
			if si == nil {
				return false, "no ServiceImport"
			}
			if si.Spec.Type != mcsv1beta1.ClusterSetIP || len(si.Spec.IPs) != 1 || len(si.Spec.Ports) != 1 || si.Spec.Ports[0].Port != 80 {
				return false, fmt.Sprintf("spec %+v", si.Spec)
			}
			got := readyByCluster(t, cl, ns, "web")["c1"]
			return slices.Equal(got, want), fmt.Sprintf("ready from c1 %v, want %v", got, want)
		})
	}

	// A pod turns not-ready in c1: c2's slices follow.
	pods := runningPods(t, c1, ns)
	pod := pods[0]
	setReady(t, c1, &pod, false)
	poll.Until(t, timeout, "not-ready pod leaves c2's ready set", func() (bool, string) {
		got := readyByCluster(t, c2, ns, "web")["c1"]
		return slices.Equal(got, []string{pods[1].Status.PodIP}), fmt.Sprintf("ready %v", got)
	})
	setReady(t, c1, &pod, true)
	poll.Until(t, timeout, "pod ready again in c2", func() (bool, string) {
		got := readyByCluster(t, c2, ns, "web")["c1"]
		return slices.Equal(got, want), fmt.Sprintf("ready %v", got)
	})

	fw.Unexport(t, c1, ns, "web")
	poll.Until(t, timeout, "import gone from c2", func() (bool, string) {
		if fw.GetImport(t, c2, ns, "web") != nil {
			return false, "ServiceImport still there"
		}
		return len(readyByCluster(t, c2, ns, "web")) == 0, "slices left"
	})
}

func setReady(t *testing.T, cl client.Client, pod *corev1.Pod, ready bool) {
	t.Helper()
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	fresh := &corev1.Pod{}
	if err := cl.Get(context.Background(), client.ObjectKeyFromObject(pod), fresh); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(fresh.DeepCopy())
	for i, c := range fresh.Status.Conditions {
		if c.Type == corev1.PodReady || c.Type == corev1.ContainersReady {
			fresh.Status.Conditions[i].Status = status
			fresh.Status.Conditions[i].LastTransitionTime = metav1.Now()
		}
	}
	for i := range fresh.Status.ContainerStatuses {
		fresh.Status.ContainerStatuses[i].Ready = ready
	}
	if err := cl.Status().Patch(context.Background(), fresh, patch); err != nil {
		t.Fatal(err)
	}
}

// TestConflict: c1 and c2 export the same name with different ports; both
// exports report PortConflict naming c1 (the older export) as the winner.
func TestConflict(t *testing.T) {
	ns := "cm-conflict"
	c1, c2 := env.Client(t, "c1"), env.Client(t, "c2")
	fw.EnsureNamespace(t, c2, ns)
	fw.Deploy(t, c1, fw.App{Namespace: ns, Name: "api", Replicas: 1})
	fw.Export(t, c1, ns, "api")
	poll.Until(t, timeout, "import in c2", func() (bool, string) {
		return fw.GetImport(t, c2, ns, "api") != nil, "no import yet"
	})
	fw.Deploy(t, c2, fw.App{Namespace: ns, Name: "api", Replicas: 1,
		Ports: []corev1.ServicePort{{Name: "http", Port: 8000, TargetPort: intstr.FromInt32(8080)}}})
	fw.Export(t, c2, ns, "api")
	for _, id := range []string{"c1", "c2"} {
		cl := env.Client(t, id)
		poll.Until(t, timeout, "conflict on the export in "+id, func() (bool, string) {
			se := &mcsv1beta1.ServiceExport{}
			if err := cl.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "api"}, se); err != nil {
				return false, err.Error()
			}
			c := fw.Condition(se.Status.Conditions, "Conflict")
			ok := c != nil && c.Status == metav1.ConditionTrue && c.Reason == "PortConflict" && strings.Contains(c.Message, `"c1"`)
			return ok, fw.CondString(se.Status.Conditions)
		})
	}
	// The import keeps c1's port definition and has endpoints from both.
	poll.Until(t, timeout, "import from both clusters", func() (bool, string) {
		si := fw.GetImport(t, c2, ns, "api")
		if si == nil || len(si.Spec.Ports) != 1 || si.Spec.Ports[0].Port != 80 || len(si.Status.Clusters) != 2 {
			return false, fmt.Sprintf("%+v", si)
		}
		by := readyByCluster(t, c2, ns, "api")
		return len(by["c1"]) == 1 && len(by["c2"]) == 1, fmt.Sprintf("ready %v", by)
	})
}
