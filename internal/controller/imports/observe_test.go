package imports

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/mcsd-io/mcsd/internal/metrics"
	"github.com/mcsd-io/mcsd/internal/metrics/metricstest"
	"github.com/mcsd-io/mcsd/pkg/registry"
)

func sum(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	v, err := metricstest.Sum(ctrlmetrics.Registry, name, labels)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestImportMetricsFollowTheImport(t *testing.T) {
	const cluster = "imports-metrics-test"
	e := newEnv(t, namespace(testNS))
	e.r.metrics = metrics.NewImports(cluster)
	defer e.r.metrics.Close()
	state := func(s metrics.ImportState) float64 {
		return sum(t, "mcsd_service_imports", map[string]string{"cluster": cluster, "state": string(s)})
	}

	e.publish([]registry.Export{export("east", registry.ClusterSetIP, v4, port("http", corev1.ProtocolTCP, 80))})
	e.reconcile("web")
	if p, r := state(metrics.ImportPending), state(metrics.ImportReady); p != 1 || r != 0 {
		t.Errorf("before the derived Service has IPs: pending %v ready %v, want 1 and 0", p, r)
	}
	e.allocate("web", "10.96.0.10")
	e.reconcile("web")
	if p, r := state(metrics.ImportPending), state(metrics.ImportReady); p != 0 || r != 1 {
		t.Errorf("ready: pending %v ready %v, want 0 and 1", p, r)
	}

	e.disconnect(errors.New("connection refused"))
	e.reconcile("web")
	if u, r := state(metrics.ImportRegistryUnreachable), state(metrics.ImportReady); u != 1 || r != 0 {
		t.Errorf("registry unreachable: unreachable %v ready %v, want 1 and 0", u, r)
	}

	e.reconnect()
	e.unexport("east")
	e.reconcile("web")
	for _, s := range []metrics.ImportState{metrics.ImportReady, metrics.ImportPending, metrics.ImportRegistryUnreachable} {
		if v := state(s); v != 0 {
			t.Errorf("after the import was deleted: %s = %v, want 0", s, v)
		}
	}
}

// runs numbers the runs of a test (go test -count), so that each run's
// series in the process-wide metrics registry are its own.
var runs atomic.Int64

func TestPropagationObservedOncePerChange(t *testing.T) {
	cluster := fmt.Sprintf("imports-propagation-test-%d", runs.Add(1))
	e := newEnv(t, namespace(testNS))
	e.r.propagation = metrics.NewPropagation(cluster)
	observations := func(source string) float64 {
		return sum(t, "mcsd_propagation_seconds", map[string]string{"cluster": cluster, "source_cluster": source})
	}
	addr := func(cluster, addr string) registry.Endpoints {
		return endpoints(cluster, group(discoveryv1.AddressTypeIPv4, []registry.EndpointPort{epPort("http", 8080)}, ready(addr)))
	}
	exports := []registry.Export{
		export("east", registry.ClusterSetIP, v4, port("http", corev1.ProtocolTCP, 80)),
		export("west", registry.ClusterSetIP, v4, port("http", corev1.ProtocolTCP, 80)),
	}
	// east's clock is an hour behind until its change below; west's
	// registry stamps nothing.
	var eastBehind atomic.Bool
	eastBehind.Store(true)
	e.open("east", func() time.Time {
		if eastBehind.Load() {
			return time.Now().Add(-time.Hour)
		}
		return time.Now()
	})
	e.open("west", func() time.Time { return time.Time{} })

	// east's endpoints changed before the controller started; west's carry
	// no stamp: neither is observed.
	e.publish(exports, addr("east", "10.1.0.1"), addr("west", "10.2.0.1"))
	e.reconcile("web")
	if n := observations("east") + observations("west"); n != 0 {
		t.Errorf("%v observations of records older than the start or without a stamp", n)
	}

	// A change in east: once in place, observed once.
	eastBehind.Store(false)
	e.publish(nil, addr("east", "10.1.0.9"))
	e.reconcile("web")
	e.reconcile("web")
	if n := observations("east"); n != 1 {
		t.Errorf("east's change observed %v times, want 1", n)
	}
	if got := addresses(e.slices("web")["east"]); len(got) != 1 || got[0] != "10.1.0.9" {
		t.Errorf("east's slices hold %v", got)
	}
}

func TestClustersChangedEventOncePerChange(t *testing.T) {
	e := newEnv(t, namespace(testNS))
	east := export("east", registry.ClusterSetIP, v4, port("http", corev1.ProtocolTCP, 80))
	west := export("west", registry.ClusterSetIP, v4, port("http", corev1.ProtocolTCP, 80))
	e.publish([]registry.Export{east})
	e.reconcile("web")
	e.events()

	before := e.serviceImport("web")
	e.publish([]registry.Export{east, west})
	e.reconcile("web")
	if ev := e.events(); len(ev) != 1 || !strings.Contains(ev[0], "added west") {
		t.Fatalf("events = %v, want one naming west", ev)
	}
	// The cache lags: the ServiceImport still lists east alone.
	si := e.serviceImport("web")
	si.Status = before.Status
	if err := e.api.Status().Update(e.ctx, si); err != nil {
		t.Fatal(err)
	}
	e.reconcile("web")
	if ev := e.events(); len(ev) != 0 {
		t.Errorf("events for the same change seen through a stale cache: %v", ev)
	}

	e.unexport("east")
	e.reconcile("web")
	if ev := e.events(); len(ev) != 1 || !strings.Contains(ev[0], "removed east") {
		t.Errorf("events = %v, want one naming east as removed", ev)
	}
}
