package traffic

import (
	"context"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/conditions"
	"github.com/mcsd-io/mcsd/internal/controller/imports"
	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	"github.com/mcsd-io/mcsd/internal/topology"
	fw "github.com/mcsd-io/mcsd/test/framework"
)

// TestSameClusterDuringRegistryOutage exports web from c1 (one pod) and c2
// (two) with the same-cluster preference, and stops the registry: c2's
// clients keep to c2's pods, and when one of them turns not ready (and
// ready again) meanwhile, their requests follow it, since c2's own
// endpoints reach its import without the registry; c2's export says the
// registry is unreachable.
func TestSameClusterDuringRegistryOutage(t *testing.T) {
	const ns = "outage"
	deploy := func(id string, n int) {
		deployWeb(t, id, ns, n)
		setExport(t, id, ns, func(se *mcsv1beta1.ServiceExport) {
			se.Spec.ExportedAnnotations = map[string]string{topology.AnnotationPreference: topology.PreferSameCluster}
		})
	}
	deploy("c1", 1)
	deploy("c2", 2)
	pod := startClient(t, "c2", ns)
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(env.TB.Cluster("c2").ProxyReport(context.Background(), ns, imports.DerivedServiceName("web")))
		}
	})
	url := "http://web." + ns + ".svc.clusterset.local/hostname"
	fromC2 := func(k string) bool { return strings.HasPrefix(k, "c2/") }
	poll.Until(t, timeout, "c2's import of c1 and c2, preferring c2", func() (bool, string) {
		si := fw.GetImport(t, env.Client(t, "c2"), ns, "web")
		if si == nil {
			return false, "no import"
		}
		c := fw.Condition(si.Status.Conditions, topology.ConditionHints)
		return len(si.Status.Clusters) == 2 && c != nil && c.Status == metav1.ConditionTrue, fw.CondString(si.Status.Conditions)
	})
	switchTo(t, "c2's pods only", ns, pod, url, 20, fromC2)

	t.Cleanup(func() {
		if err := env.StartRegistry(context.Background()); err != nil {
			t.Errorf("start the registry again: %v", err)
		}
	})
	env.StopRegistry()
	poll.Until(t, timeout, "c2's import to say the registry is unreachable", func() (bool, string) {
		si := fw.GetImport(t, env.Client(t, "c2"), ns, "web")
		if si == nil {
			return false, "no import"
		}
		c := fw.Condition(si.Status.Conditions, conditions.RegistryReachable)
		return c != nil && c.Status == metav1.ConditionFalse, fw.CondString(si.Status.Conditions)
	})

	// c2's pod in zone-b turns not ready, then ready again.
	zoneA, zoneB := "c2/"+env.TB.Cluster("c2").Zone(0), "c2/"+env.TB.Cluster("c2").Zone(1)
	setReady := func(ready bool) {
		for name, where := range localityPods(t, ns) {
			if where == zoneB {
				fw.SetPodReady(t, env.Client(t, "c2"), ns, name, ready)
			}
		}
	}
	setReady(false)
	if n := switchTo(t, zoneB+" not ready: "+zoneA+" alone", ns, pod, url, 20, func(k string) bool { return k == zoneA }); n > 0 {
		t.Errorf("%d requests failed when %s turned not ready", n, zoneB)
	}
	setReady(true)
	poll.Until(t, timeout, zoneB+" ready again: both of c2's pods", func() (bool, string) {
		got := tally(t, ns, pod, url, 20)
		return only(got, fromC2) && got[zoneA] > 0 && got[zoneB] > 0, fmt.Sprint(got)
	})
	// c2's export was not written meanwhile, and says so: the registry
	// unreachable, or, once the outage outlasted the lease's TTL, c2's
	// records possibly expired there.
	se := &mcsv1beta1.ServiceExport{}
	if err := env.Client(t, "c2").Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "web"}, se); err != nil {
		t.Fatal(err)
	}
	c := fw.Condition(se.Status.Conditions, string(mcsv1beta1.ServiceExportConditionReady))
	unreachable := c != nil && c.Status == metav1.ConditionFalse && strings.Contains(c.Message, "unreachable")
	lapsed := c != nil && c.Status == metav1.ConditionUnknown && c.Reason == string(mcsv1beta1.ServiceExportReasonPending) && strings.Contains(c.Message, "expired")
	if !unreachable && !lapsed {
		t.Errorf("c2's ServiceExport during the outage: %s, want Ready=False saying the registry is unreachable, or Unknown saying its records may have expired", fw.CondString(se.Status.Conditions))
	}

	if err := env.StartRegistry(context.Background()); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, timeout, "c2's import reachable again", func() (bool, string) {
		si := fw.GetImport(t, env.Client(t, "c2"), ns, "web")
		if si == nil {
			return false, "no import"
		}
		return fw.Condition(si.Status.Conditions, conditions.RegistryReachable) == nil && len(si.Status.Clusters) == 2,
			fmt.Sprint(si.Status.Clusters, " ", fw.CondString(si.Status.Conditions))
	})
	poll.Until(t, timeout, "c2's export exported again", func() (bool, string) {
		se := fw.GetOrNil[mcsv1beta1.ServiceExport](t, env.Client(t, "c2"), ns, "web")
		if se == nil {
			return false, "no ServiceExport"
		}
		c := fw.Condition(se.Status.Conditions, string(mcsv1beta1.ServiceExportConditionReady))
		return c != nil && c.Status == metav1.ConditionTrue, fw.CondString(se.Status.Conditions)
	})
	switchTo(t, "c2's pods only, after the outage", ns, pod, url, 20, func(k string) bool {
		return fromC2(k)
	})
}
