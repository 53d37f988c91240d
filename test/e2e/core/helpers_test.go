package core

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/controller/imports"
	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	fw "github.com/mcsd-io/mcsd/test/framework"
)

// inEveryCluster waits, cluster by cluster, until check holds in each.
func inEveryCluster(t *testing.T, what string, check func(id string, cl client.Client) (bool, string)) {
	t.Helper()
	for _, id := range env.ClusterIDs() {
		cl := env.Client(t, id)
		poll.Until(t, timeout, what+" in "+id, func() (bool, string) { return check(id, cl) })
	}
}

// setUpTest begins a core test: it runs t in parallel with the others,
// creates ns, the test's own namespace, in every cluster, and returns ns and
// the client of c1, the cluster the tests export from.
func setUpTest(t *testing.T, ns string) (string, client.Client) {
	t.Helper()
	t.Parallel()
	env.EnsureNamespaceEverywhere(t, ns)
	return ns, env.Client(t, "c1")
}

// getExport returns a ServiceExport, or nil when it does not exist.
func getExport(t *testing.T, cl client.Client, ns, name string) *mcsv1beta1.ServiceExport {
	t.Helper()
	return fw.GetOrNil[mcsv1beta1.ServiceExport](t, cl, ns, name)
}

// waitExportCondition waits until the ServiceExport has a condition of type
// typ with status and reason, and returns it.
func waitExportCondition(t *testing.T, cl client.Client, ns, name, typ string, status metav1.ConditionStatus, reason string) metav1.Condition {
	t.Helper()
	var got metav1.Condition
	poll.Until(t, timeout, fmt.Sprintf("ServiceExport %s/%s %s=%s %s", ns, name, typ, status, reason), func() (bool, string) {
		se := getExport(t, cl, ns, name)
		if se == nil {
			return false, "no ServiceExport"
		}
		c := fw.Condition(se.Status.Conditions, typ)
		if c == nil || c.Status != status || c.Reason != reason {
			return false, fw.CondString(se.Status.Conditions)
		}
		got = *c
		return true, ""
	})
	return got
}

// runningPods returns the app's running pods that have an IP, by name.
func runningPods(t *testing.T, cl client.Client, ns, app string) map[string]corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := cl.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{"app": app}); err != nil {
		t.Fatal(err)
	}
	out := map[string]corev1.Pod{}
	for _, p := range pods.Items {
		if p.Status.PodIP != "" && p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			out[p.Name] = p
		}
	}
	return out
}

// waitPods waits until n pods of the app run, and returns their IPs, sorted.
func waitPods(t *testing.T, cl client.Client, ns, app string, n int) []string {
	t.Helper()
	var ips []string
	poll.Until(t, timeout, fmt.Sprintf("%d pods of %s/%s running", n, ns, app), func() (bool, string) {
		ips = fw.PodIPs(t, cl, ns, app)
		return len(ips) == n, fmt.Sprintf("%d running: %v", len(ips), ips)
	})
	return ips
}

// exportFirst deploys app in c1, waits for its pods, exports it and waits
// until c1 imports it from c1 alone: c1's export is the oldest. It returns
// the pods' IPs; app names its replicas.
func exportFirst(t *testing.T, c1 client.Client, app fw.App) []string {
	t.Helper()
	ips := deployExported(t, c1, app)
	poll.Until(t, timeout, "import of c1's export in c1", func() (bool, string) {
		si := fw.GetImport(t, c1, app.Namespace, app.Name)
		return si != nil && len(si.Status.Clusters) == 1, fmt.Sprintf("%v", si)
	})
	return ips
}

// deployExported deploys app in cl, waits for its pods to run and exports
// it; it returns the pods' IPs. app names its replicas.
func deployExported(t *testing.T, cl client.Client, app fw.App) []string {
	t.Helper()
	if app.Replicas == 0 {
		t.Fatal("deployExported: the app does not name its replicas")
	}
	fw.Deploy(t, cl, app)
	ips := waitPods(t, cl, app.Namespace, app.Name, int(app.Replicas))
	fw.Export(t, cl, app.Namespace, app.Name)
	return ips
}

// endpointStates returns address → "ready"/"not-ready" over slices.
func endpointStates(slices []discoveryv1.EndpointSlice) map[string]string {
	out := map[string]string{}
	for _, s := range slices {
		for _, ep := range s.Endpoints {
			state := "ready"
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				state = "not-ready"
			}
			for _, a := range ep.Addresses {
				out[a] = state
			}
		}
	}
	return out
}

// allReady is the endpointStates of addresses that are all ready.
func allReady(addrs []string) map[string]string {
	out := map[string]string{}
	for _, a := range addrs {
		out[a] = "ready"
	}
	return out
}

// portsOf renders the ports of a cluster's slices as sorted "name/protocol/port"
// strings; every slice of the cluster must carry the same ports.
func portsOf(ss []discoveryv1.EndpointSlice) ([]string, error) {
	var out []string
	for i, s := range ss {
		var ports []string
		for _, p := range s.Ports {
			ports = append(ports, fmt.Sprintf("%s/%s/%d", ptr.Deref(p.Name, ""), ptr.Deref(p.Protocol, corev1.ProtocolTCP), ptr.Deref(p.Port, 0)))
		}
		slices.Sort(ports)
		if i > 0 && !slices.Equal(out, ports) {
			return nil, fmt.Errorf("slices of one cluster disagree on ports: %v and %v", out, ports)
		}
		out = ports
	}
	return out, nil
}

// importPorts renders a ServiceImport's ports as sorted "name/protocol/port".
func importPorts(si *mcsv1beta1.ServiceImport) []string {
	var out []string
	for _, p := range si.Spec.Ports {
		out = append(out, fmt.Sprintf("%s/%s/%d", p.Name, p.Protocol, p.Port))
	}
	slices.Sort(out)
	return out
}

// importClusters returns the sorted ids of status.clusters.
func importClusters(si *mcsv1beta1.ServiceImport) []string {
	var out []string
	for _, c := range si.Status.Clusters {
		out = append(out, c.Cluster)
	}
	slices.Sort(out)
	return out
}

// derivedService returns the Service mcsd derived for an import, or nil.
func derivedService(t *testing.T, cl client.Client, ns, name string) *corev1.Service {
	t.Helper()
	return fw.GetOrNil[corev1.Service](t, cl, ns, imports.DerivedServiceName(name))
}

// importGone reports whether nothing of an import is left in a cluster: no
// ServiceImport, no EndpointSlices, no derived Service.
func importGone(t *testing.T, cl client.Client, ns, name string) (bool, string) {
	if si := fw.GetImport(t, cl, ns, name); si != nil {
		return false, "ServiceImport still there"
	}
	if n := len(importedSlices(t, cl, ns, name)); n != 0 {
		return false, fmt.Sprintf("slices of %d clusters left", n)
	}
	if svc := derivedService(t, cl, ns, name); svc != nil {
		return false, "derived Service still there"
	}
	return true, ""
}

// updateService applies change to a Service, retrying on conflicts.
func updateService(t *testing.T, cl client.Client, ns, name string, change func(*corev1.Service)) {
	t.Helper()
	poll.Until(t, timeout, "update Service "+ns+"/"+name, func() (bool, string) {
		svc := &corev1.Service{}
		if err := cl.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, svc); err != nil {
			return false, err.Error()
		}
		change(svc)
		if err := cl.Update(context.Background(), svc); err != nil {
			if apierrors.IsConflict(err) {
				return false, err.Error()
			}
			t.Fatalf("update Service %s/%s: %v", ns, name, err)
		}
		return true, ""
	})
}

// deleteService deletes a Service and waits until it is gone.
func deleteService(t *testing.T, cl client.Client, ns, name string) {
	t.Helper()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := cl.Delete(context.Background(), svc); err != nil {
		t.Fatalf("delete Service %s/%s: %v", ns, name, err)
	}
	poll.Until(t, timeout, "Service "+ns+"/"+name+" gone", func() (bool, string) {
		err := cl.Get(context.Background(), client.ObjectKeyFromObject(svc), &corev1.Service{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

// noImportAnywhere checks for a while that no cluster has the import.
func noImportAnywhere(t *testing.T, ns, name string, d time.Duration) {
	t.Helper()
	clients := map[string]client.Client{}
	for _, id := range env.ClusterIDs() {
		clients[id] = env.Client(t, id)
	}
	poll.Throughout(t, d, "no import of "+ns+"/"+name, func() (bool, string) {
		for _, id := range slices.Sorted(maps.Keys(clients)) {
			if ok, msg := importGone(t, clients[id], ns, name); !ok {
				return false, id + ": " + msg
			}
		}
		return true, ""
	})
}

// importReady reports whether a ServiceImport's Ready condition is True.
func importReady(si *mcsv1beta1.ServiceImport) (bool, string) {
	c := fw.Condition(si.Status.Conditions, string(mcsv1beta1.ServiceImportConditionReady))
	if c == nil || c.Status != metav1.ConditionTrue {
		return false, "import not Ready: " + fw.CondString(si.Status.Conditions)
	}
	return true, ""
}
