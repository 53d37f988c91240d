package traffic

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	fw "github.com/mcsd-io/mcsd/test/framework"
)

// startNetshoot runs a client pod written the way upstream suites write
// theirs: an image without an entry point and args only, which Kubernetes
// runs as the command line. It waits until the pod is ready.
func startNetshoot(t *testing.T, id, ns string) string {
	t.Helper()
	return startPod(t, id, ns, corev1.Container{
		Name:  "netshoot",
		Image: "nicolaka/netshoot:v0.15",
		Args:  []string{"/bin/sh", "-ec", "while :; do echo '.'; sleep 5; done"},
	})
}

// TestStrictPortRouting exports services whose ports disagree from c1 and
// c2 and checks, from an args-only netshoot pod in c2, that each port of
// the import reaches only the clusters that define it as the import does:
// same name with another number (only the oldest export's cluster answers,
// until the conflict clears), and different names (each port its own
// cluster).
func TestStrictPortRouting(t *testing.T) {
	const ns = "traffic-ports"
	pod := startNetshoot(t, "c2", ns)

	t.Run("the netshoot pod runs sh, nslookup, nc and curl", func(t *testing.T) {
		out, code := shell(t, "c2", ns, pod, "command -v nslookup nc curl >/dev/null && echo ok")
		if code != 0 || strings.TrimSpace(out) != "ok" {
			t.Fatalf("tools in the netshoot pod: %q (exit %d)", out, code)
		}
		// kubernetes.default answers through the cluster's DNS.
		out, code = shell(t, "c2", ns, pod, "nslookup kubernetes.default.svc.cluster.local")
		if code != 0 || !strings.Contains(out, "Address") {
			t.Fatalf("nslookup in the netshoot pod: %q (exit %d)", out, code)
		}
	})

	// same: c1 serves "tcp" on 42, c2 on 4242; both pods listen on 8080.
	deploy := func(id, name string, ports ...corev1.ServicePort) {
		fw.Deploy(t, env.Client(t, id), fw.App{Namespace: ns, Name: name, Ports: ports, Containers: []corev1.Container{agnhost()}})
	}
	deploy("c1", "same", httpPort("tcp", 42))
	deploy("c2", "same", httpPort("tcp", 4242))
	deploy("c1", "names", httpPort("tcp", 42))
	deploy("c2", "names", httpPort("tcp2", 4242))
	pods := map[string]map[string][]string{}
	for _, app := range []string{"same", "names"} {
		pods[app] = map[string][]string{}
		for _, id := range []string{"c1", "c2"} {
			pods[app][id] = waitPodsReady(t, id, ns, map[string]string{"app": app}, 2, nil)
		}
		// c1's export is the oldest: wait for c2 to import it before c2
		// exports too.
		fw.Export(t, env.Client(t, "c1"), ns, app)
		waitImportClusters(t, "c2", ns, app, "c1")
		fw.Export(t, env.Client(t, "c2"), ns, app)
		waitImportClusters(t, "c2", ns, app, "c1", "c2")
	}

	t.Run("same port name, other number: only the winning cluster answers", func(t *testing.T) {
		// c2's endpoints are imported, without the port they do not serve.
		poll.Until(t, timeout, "c2's imported slice of same without ports", func() (bool, string) {
			var ss discoveryv1.EndpointSliceList
			if err := env.Client(t, "c2").List(context.Background(), &ss, client.InNamespace(ns),
				client.MatchingLabels{mcsv1beta1.LabelServiceName: "same", mcsv1beta1.LabelSourceCluster: "c2"}); err != nil {
				return false, err.Error()
			}
			var eps, ports int
			for _, s := range ss.Items {
				eps += len(s.Endpoints)
				ports += len(s.Ports)
			}
			return eps == 2 && ports == 0, fmt.Sprintf("%d slices, %d endpoints, %d ports", len(ss.Items), eps, ports)
		})
		url := "http://same." + ns + ".svc.clusterset.local:42/hostname"
		poll.Until(t, timeout, "20 replies from c1 only", func() (bool, string) {
			got := origins(replies(t, "c2", ns, pod, "", url, 20), pods["same"])
			return got["c1"] == 20, fmt.Sprint(got)
		})
		for _, id := range []string{"c1", "c2"} {
			waitConflict(t, id, ns, "same", "PortConflict")
		}
	})
	t.Run("different port names: each port reaches only its cluster", func(t *testing.T) {
		host := "http://names." + ns + ".svc.clusterset.local"
		poll.Until(t, timeout, "port 42 from c1 only, port 4242 from c2 only", func() (bool, string) {
			p42 := origins(replies(t, "c2", ns, pod, "", host+":42/hostname", 20), pods["names"])
			p4242 := origins(replies(t, "c2", ns, pod, "", host+":4242/hostname", 20), pods["names"])
			return p42["c1"] == 20 && p4242["c2"] == 20, fmt.Sprintf("42: %v, 4242: %v", p42, p4242)
		})
	})
	t.Run("the conflict clears: both clusters answer again", func(t *testing.T) {
		fw.Patch(t, env.Client(t, "c2"), &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "same"}},
			func(svc *corev1.Service) { svc.Spec.Ports[0].Port = 42 })
		for _, id := range []string{"c1", "c2"} {
			waitConflict(t, id, ns, "same", "NoConflicts")
		}
		url := "http://same." + ns + ".svc.clusterset.local:42/hostname"
		poll.Until(t, timeout, "replies from c1 and c2", func() (bool, string) {
			got := origins(replies(t, "c2", ns, pod, "", url, 30), pods["same"])
			return got["c1"] > 0 && got["c2"] > 0 && got["?"] == 0, fmt.Sprint(got)
		})
	})
}

// waitImportClusters waits until the ServiceImport in cluster id lists
// exactly the clusters given, and says its EndpointSlices are present.
func waitImportClusters(t *testing.T, id, ns, name string, clusters ...string) {
	t.Helper()
	poll.Until(t, timeout, fmt.Sprintf("%s's import %s/%s from %v", id, ns, name, clusters), func() (bool, string) {
		si := &mcsv1beta1.ServiceImport{}
		if err := env.Client(t, id).Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, si); err != nil {
			return false, err.Error()
		}
		var got []string
		for _, c := range si.Status.Clusters {
			got = append(got, c.Cluster)
		}
		return fmt.Sprint(got) == fmt.Sprint(clusters) && si.Status.EndpointSliceObjects == mcsv1beta1.EndpointSliceObjectsPresent,
			fmt.Sprintf("clusters %v, endpointSliceObjects %q", got, si.Status.EndpointSliceObjects)
	})
}

// waitConflict waits until the export's Conflict condition has reason.
func waitConflict(t *testing.T, id, ns, name, reason string) {
	t.Helper()
	poll.Until(t, timeout, fmt.Sprintf("Conflict %s on %s's export %s/%s", reason, id, ns, name), func() (bool, string) {
		se := &mcsv1beta1.ServiceExport{}
		if err := env.Client(t, id).Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, se); err != nil {
			return false, err.Error()
		}
		c := fw.Condition(se.Status.Conditions, "Conflict")
		return c != nil && c.Reason == reason, fw.CondString(se.Status.Conditions)
	})
}
