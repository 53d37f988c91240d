package export

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/metrics"
	"github.com/mcsd-io/mcsd/internal/metrics/metricstest"
	"github.com/mcsd-io/mcsd/pkg/registry"
)

// exportCount is the value of mcsd_service_exports for cluster, condition and state.
func exportCount(t *testing.T, cluster, condition, state string) float64 {
	t.Helper()
	v, err := metricstest.Sum(ctrlmetrics.Registry, "mcsd_service_exports",
		map[string]string{"cluster": cluster, "condition": condition, "state": state})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestMetricsFollowTheServiceExport(t *testing.T) {
	const cluster = "export-metrics-test"
	e := newEnv(t, newServiceExport())
	e.r.metrics = metrics.NewExports(cluster)
	defer e.r.metrics.Close()
	check := func(when string, want map[[2]string]float64) {
		t.Helper()
		for k, w := range want {
			if got := exportCount(t, cluster, k[0], k[1]); got != w {
				t.Errorf("%s: %s %s = %v, want %v", when, k[0], k[1], got, w)
			}
		}
	}

	e.mustReconcile()
	check("no Service", map[[2]string]float64{
		{validType, "invalid"}: 1, {validType, "valid"}: 0, {readyType, "pending"}: 1, {confType, "none"}: 1,
	})

	if err := e.c.Create(context.Background(), newService()); err != nil {
		t.Fatal(err)
	}
	e.mustReconcile()
	e.syncView(registry.Export{Cluster: otherID, Service: webKey, Order: otherOrd, Spec: registry.ServiceSpec{Type: registry.Headless}})
	e.mustReconcile()
	check("exported, in conflict", map[[2]string]float64{
		{validType, "invalid"}: 0, {validType, "valid"}: 1, {readyType, "pending"}: 0, {readyType, "exported"}: 1,
		{confType, "conflict"}: 1, {confType, "none"}: 0,
	})
	if v, _ := metricstest.Sum(ctrlmetrics.Registry, "mcsd_service_export_conflicts", map[string]string{"cluster": cluster, "reason": "TypeConflict"}); v != 1 {
		t.Errorf("TypeConflict exports = %v, want 1", v)
	}

	e.reg.setErr(errors.New("etcd unavailable"))
	if err := e.c.Create(context.Background(), newSlice("web-a", svcName, "IPv4", httpPort(), ep("10.1.0.1", nil))); err != nil {
		t.Fatal(err)
	}
	_ = e.reconcile()
	check("registry failing", map[[2]string]float64{{readyType, "exported"}: 0, {readyType, "failed"}: 1})

	e.reg.setErr(nil)
	if err := e.c.Delete(context.Background(), e.serviceExport()); err != nil {
		t.Fatal(err)
	}
	e.mustReconcile() // withdraws and removes the finalizer
	e.mustReconcile() // gone
	for _, s := range [][2]string{{validType, "valid"}, {validType, "invalid"}, {readyType, "exported"}, {readyType, "failed"}, {readyType, "pending"}, {confType, "conflict"}, {confType, "none"}} {
		if got := exportCount(t, cluster, s[0], s[1]); got != 0 {
			t.Errorf("deleted: %s %s = %v, want 0", s[0], s[1], got)
		}
	}
}

// staleCache puts back the ServiceExport's stored status as it was before
// the last reconcile, as a cache that has not seen the status patch yet
// would show it.
func (e *env) staleCache(before *mcsv1beta1.ServiceExport) {
	e.t.Helper()
	se := e.serviceExport()
	se.Status = before.Status
	if err := e.c.Status().Update(context.Background(), se); err != nil {
		e.t.Fatal(err)
	}
}

func TestConflictEventOncePerChange(t *testing.T) {
	e := newEnv(t, newServiceExport(), newService())
	e.mustReconcile()
	headless := registry.Export{Cluster: otherID, Service: webKey, Order: otherOrd, Spec: registry.ServiceSpec{
		Type: registry.Headless, Ports: []registry.Port{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}},
		IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
	}}
	e.syncView(headless)
	before := e.serviceExport()
	e.mustReconcile()
	if ev := e.events(); len(ev) != 1 || !strings.HasPrefix(ev[0], "Warning "+EventReasonConflict) {
		t.Fatalf("events = %q, want one %s warning", ev, EventReasonConflict)
	}

	// The cache lags: the ServiceExport still shows no conflict.
	e.staleCache(before)
	e.mustReconcile()
	if ev := e.events(); len(ev) != 0 {
		t.Errorf("events for the same conflict seen through a stale cache: %q", ev)
	}

	// The reasons change: a new event.
	other := headless
	other.Spec.Ports = []registry.Port{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 8080}}
	e.syncView(other)
	e.mustReconcile()
	if ev := e.events(); len(ev) != 1 || !strings.HasPrefix(ev[0], "Warning "+EventReasonConflict) || !strings.Contains(ev[0], "ports:") {
		t.Errorf("events = %q, want one %s warning about the ports", ev, EventReasonConflict)
	}

	// A restarted controller compares with the stored condition.
	e.r = e.newReconciler()
	e.mustReconcile()
	if ev := e.events(); len(ev) != 0 {
		t.Errorf("events after a restart without a change: %q", ev)
	}
}

func TestRegistryFailureEventOncePerFailure(t *testing.T) {
	e := newEnv(t, newServiceExport(), newService())
	e.reg.setErr(errors.New("etcd unavailable"))
	for range 3 {
		before := e.serviceExport()
		if err := e.reconcile(); err == nil {
			t.Fatal("Reconcile succeeded with a failing registry")
		}
		e.staleCache(before)
	}
	if ev := e.events(); len(ev) != 1 || !strings.HasPrefix(ev[0], "Warning "+EventReasonRegistryFailed) {
		t.Errorf("events = %q, want one %s warning for retries of one failure", ev, EventReasonRegistryFailed)
	}

	e.reg.setErr(nil)
	e.mustReconcile()
	e.reg.setErr(errors.New("etcd unavailable"))
	if err := e.c.Create(context.Background(), newSlice("web-a", svcName, "IPv4", httpPort(), ep("10.1.0.1", nil))); err != nil {
		t.Fatal(err)
	}
	_ = e.reconcile()
	if ev := e.events(); len(ev) != 1 {
		t.Errorf("events = %q, want one warning for a failure after a success", ev)
	}
}
