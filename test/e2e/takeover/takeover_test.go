package takeover

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/controller/export"
	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	"github.com/mcsd-io/mcsd/internal/wellknown"
	fw "github.com/mcsd-io/mcsd/test/framework"
)

const timeout = 60 * time.Second

// TestTakeOverFromAWSController: both clusters run the AWS controller's
// state (web exported from both, imported in both), a client in c2 reaches
// web by its clusterset name and the derived Service mcsd will not adopt by
// its cluster IP; mcsd starts in both clusters in that controller's place
// while the client keeps sending requests. Not one request fails; the
// import keeps the adopted Service's IP; the other derived Service carries
// the whole import until its grace ends, then goes; the AWS controller's
// slices, finalizers and Cloud Map instances are replaced, not doubled; a
// new pod in c1 reaches c2, which it never would under a stopped AWS
// controller.
func TestTakeOverFromAWSController(t *testing.T) {
	const ns = "shop"
	ctx := context.Background()
	pods := map[string][]string{}
	ips := map[string][]string{}
	for id, n := range map[string]int32{"c1": 2, "c2": 1} {
		fw.Deploy(t, env.Client(t, id), fw.App{Namespace: ns, Name: "web", Replicas: n, Containers: []corev1.Container{fw.Agnhost()}})
	}
	for id, n := range map[string]int{"c1": 2, "c2": 1} {
		pods[id] = env.WaitPodsReady(t, id, ns, map[string]string{"app": "web"}, n, nil)
		ips[id] = podIPv4s(t, id, ns, "web")
	}

	// The AWS controller ran in both clusters.
	for _, id := range []string{"c1", "c2"} {
		awsExport(t, id, ns, "web", ips[id])
	}
	var derived map[string]string
	for _, id := range []string{"c1", "c2"} {
		d := awsImport(t, id, ns, "web", ips)
		if id == "c2" {
			derived = d
		}
	}
	names := slices.Sorted(maps.Keys(derived))
	adopted, retiring := names[0], names[1]

	pod := env.StartPod(t, "c2", ns, corev1.Container{Name: "client", Image: "registry.k8s.io/pause:3.10"})
	web := "http://web." + ns + ".svc.clusterset.local/hostname"
	old := "http://" + derived[retiring] + "/hostname"
	poll.Until(t, timeout, "the AWS controller's import answering in c2", func() (bool, string) {
		out, _ := env.Shell(t, "c2", ns, pod, fmt.Sprintf(`for i in $(seq 20); do curl -s -m 2 %s; echo; done; curl -s -m 2 %s`, web, old))
		got := fw.Origins(fw.Lines(out), pods)
		return got["c1"] > 0 && got["c2"] > 0 && got["?"] == 0, fmt.Sprint(got)
	})

	// Requests all along the take-over: by name, and to the Service mcsd
	// does not adopt, 120 of each, about 15 s.
	loop := make(chan string, 1)
	go func() {
		script := fmt.Sprintf(`for i in $(seq 120); do curl -s -m 2 %s || echo FAIL-name-$?; echo; curl -s -m 2 %s || echo FAIL-retiring-$?; echo; sleep 0.1; done`, web, old)
		c, cancel := context.WithTimeout(ctx, 90*time.Second)
		defer cancel()
		out, stderr, err := env.TB.Cluster("c2").Exec(c, ns, pod, "", nil, "sh", "-c", script)
		if err != nil {
			stderr += err.Error()
		}
		loop <- out + stderr
	}()
	for _, id := range []string{"c1", "c2"} {
		if _, err := env.StartController(ctx, id); err != nil {
			t.Fatal(err)
		}
	}

	c2 := env.Client(t, "c2")
	poll.Until(t, timeout, "c2's import taken over in place", func() (bool, string) {
		si := fw.GetImport(t, c2, ns, "web")
		switch {
		case si == nil:
			return false, "no ServiceImport"
		case si.Annotations[wellknown.AnnotationManaged] != "true" || si.Annotations[wellknown.AnnotationDerivedService] != adopted:
			return false, fmt.Sprintf("annotations %v", si.Annotations)
		case !slices.Equal(si.Spec.IPs, []string{derived[adopted]}):
			return false, fmt.Sprintf("ips %v, want %s (the adopted Service's)", si.Spec.IPs, derived[adopted])
		case si.Annotations[wellknown.AnnotationRetiring] != retiring:
			return false, fmt.Sprintf("retiring %q", si.Annotations[wellknown.AnnotationRetiring])
		}
		if left := awsSlices(t, "c2", ns); len(left) > 0 {
			return false, fmt.Sprintf("AWS slices left: %v", left)
		}
		return true, ""
	})
	poll.Until(t, timeout, "only mcsd's Cloud Map instances, one per endpoint", func() (bool, string) {
		insts := cloudMapInstances(t, ns, "web")
		mcsd := 0
		for _, at := range insts {
			if at["MCSD_RECORD"] == "endpoint" {
				mcsd++
			}
		}
		return len(insts) == 3 && mcsd == 3, fmt.Sprintf("%d instances, %d of mcsd's", len(insts), mcsd)
	})
	for _, id := range []string{"c1", "c2"} {
		poll.Until(t, timeout, "mcsd's finalizer alone on the ServiceExport in "+id, func() (bool, string) {
			se := &mcsv1beta1.ServiceExport{}
			if err := env.Client(t, id).Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, se); err != nil {
				return false, err.Error()
			}
			return slices.Equal(se.Finalizers, []string{export.Finalizer}), fmt.Sprint(se.Finalizers)
		})
	}

	out := <-loop
	replies := fw.Lines(out)
	if strings.Contains(out, "FAIL") || len(replies) != 240 {
		t.Errorf("requests during the take-over: %d replies, want 240 and no failure:\n%s", len(replies), out)
	}
	if got := fw.Origins(replies, pods); got["?"] > 0 || got["c1"] == 0 || got["c2"] == 0 {
		t.Errorf("replies during the take-over came from %v", got)
	}

	// A change in c1 now reaches c2: under the stopped AWS controller it
	// never would.
	fw.Scale(t, env.Client(t, "c1"), ns, "web", 3)
	pods["c1"] = env.WaitPodsReady(t, "c1", ns, map[string]string{"app": "web"}, 3, nil)
	poll.Until(t, timeout, "c1's third pod in c2's import", func() (bool, string) {
		var list discoveryv1.EndpointSliceList
		if err := c2.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{mcsv1beta1.LabelServiceName: "web", mcsv1beta1.LabelSourceCluster: "c1",
			discoveryv1.LabelServiceName: adopted}); err != nil {
			return false, err.Error()
		}
		n := 0
		for _, s := range list.Items {
			n += len(s.Endpoints)
		}
		return n == 3, fmt.Sprintf("%d endpoints from c1", n)
	})

	// The grace ends: the retiring Service goes; the name still answers.
	poll.Until(t, grace+timeout, "the retiring Service deleted", func() (bool, string) {
		svc := &corev1.Service{}
		err := c2.Get(ctx, client.ObjectKey{Namespace: ns, Name: retiring}, svc)
		si := fw.GetImport(t, c2, ns, "web")
		_, pending := si.Annotations[wellknown.AnnotationRetireAfter]
		return err != nil && !pending, fmt.Sprintf("get: %v; annotations %v", err, si.Annotations)
	})
	out, _ = env.Shell(t, "c2", ns, pod, fmt.Sprintf(`for i in $(seq 30); do curl -s -m 2 %s || echo FAIL; echo; done`, web))
	if got := fw.Origins(fw.Lines(out), pods); got["?"] > 0 || got["c1"] == 0 || got["c2"] == 0 {
		t.Errorf("replies after the grace: %v\n%s", got, out)
	}
}
