package core

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/mcsd-io/mcsd/internal/metrics/metricstest"
	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	fw "github.com/mcsd-io/mcsd/test/framework"
)

// TestMetrics exports a Service from c1 and checks, once c2 imports it, the
// metrics of both controllers. They run in this process and share
// controller-runtime's registry, so every series is told apart by its
// cluster label.
func TestMetrics(t *testing.T) {
	ns, c1 := setUpTest(t, "metrics")
	c2 := env.Client(t, "c2")
	want := deployExported(t, c1, fw.App{Namespace: ns, Name: "web", Replicas: 2})
	poll.Until(t, timeout, "import in c2 with c1's endpoints", func() (bool, string) {
		si := fw.GetImport(t, c2, ns, "web")
		if si == nil || len(si.Spec.IPs) == 0 {
			return false, "no ServiceImport with an IP"
		}
		got := fw.ReadyAddresses(importedSlices(t, c2, ns, "web")["c1"])
		return slices.Equal(got, want), fmt.Sprintf("endpoints from c1 %v, want %v", got, want)
	})

	for _, m := range []struct {
		name   string
		labels map[string]string
	}{
		{"mcsd_service_exports", map[string]string{"cluster": "c1", "condition": "Ready", "state": "exported"}},
		{"mcsd_service_exports", map[string]string{"cluster": "c1", "condition": "Valid", "state": "valid"}},
		{"mcsd_service_imports", map[string]string{"cluster": "c2", "state": "ready"}},
		// A new export goes to the registry with its endpoints, in one write.
		{"mcsd_registry_operations_total", map[string]string{"cluster": "c1", "backend": "etcd", "operation": "Publish"}},
		{"mcsd_registry_operation_duration_seconds", map[string]string{"cluster": "c1", "backend": "etcd", "operation": "Publish"}},
		{"mcsd_registry_operations_total", map[string]string{"cluster": "c2", "backend": "etcd", "operation": "WatchUpdate"}},
		{"mcsd_registry_connected", map[string]string{"cluster": "c2", "backend": "etcd"}},
		{"mcsd_propagation_seconds", map[string]string{"cluster": "c2", "source_cluster": "c1"}},
	} {
		poll.Until(t, timeout, fmt.Sprintf("%s%v > 0", m.name, m.labels), func() (bool, string) {
			v, err := metricstest.Sum(ctrlmetrics.Registry, m.name, m.labels)
			if err != nil {
				return false, err.Error()
			}
			return v > 0, fmt.Sprintf("%v", v)
		})
	}

	// Every mcsd series names the cluster it is about.
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	ids := env.ClusterIDs()
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), "mcsd_") {
			continue
		}
		for _, m := range f.GetMetric() {
			cluster := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "cluster" {
					cluster = l.GetValue()
				}
			}
			if !slices.Contains(ids, cluster) {
				t.Errorf("%s series %v: cluster label %q is not a cluster of the testbed", f.GetName(), m.GetLabel(), cluster)
			}
		}
	}
}
