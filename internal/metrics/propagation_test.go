package metrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mcsd-io/mcsd/internal/metrics/metricstest"
	"github.com/mcsd-io/mcsd/pkg/registry"
)

var registryKey = registry.ServiceKey{Namespace: "shop", Name: "web"}

func TestPropagation(t *testing.T) {
	c := newCollectors()
	start := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	now := start
	p := newPropagation(c, "east", func() time.Time { return now })
	count := func(source string) int {
		t.Helper()
		n, err := metricstest.Sum(registryOf(c), "mcsd_propagation_seconds", map[string]string{"cluster": "east", "source_cluster": source})
		if err != nil {
			t.Fatal(err)
		}
		return int(n)
	}
	eps := func(cluster string, updated time.Time) registry.Endpoints {
		return registry.Endpoints{Cluster: cluster, Service: registryKey, Updated: updated}
	}

	// Records from before the start, and records without a stamp, are not
	// observed.
	now = start.Add(time.Minute)
	p.Applied(registryKey, []registry.Endpoints{eps("west", start.Add(-time.Hour)), eps("north", time.Time{})})
	if n := count("west") + count("north"); n != 0 {
		t.Fatalf("%d observations of records older than the start or without a stamp", n)
	}

	// A change: observed once, however often its slices are applied.
	p.Applied(registryKey, []registry.Endpoints{eps("west", now.Add(-1500*time.Millisecond))})
	p.Applied(registryKey, []registry.Endpoints{eps("west", now.Add(-1500*time.Millisecond))})
	if n := count("west"); n != 1 {
		t.Fatalf("west observed %d times, want 1", n)
	}
	// A later change is observed again; a stamp ahead of this clock counts as 0.
	p.Applied(registryKey, []registry.Endpoints{eps("west", now.Add(time.Second))})
	if n := count("west"); n != 2 {
		t.Fatalf("west observed %d times, want 2", n)
	}
	if sum := histogramSum(t, c, "west"); sum != 1.5 {
		t.Errorf("sum of observations = %v, want 1.5 (1.5s, then 0 for a clock ahead)", sum)
	}

	// After Forget, the stamps of the import are gone.
	p.Forget(registryKey)
	p.Applied(registryKey, []registry.Endpoints{eps("west", now.Add(time.Second))})
	if n := count("west"); n != 3 {
		t.Fatalf("west observed %d times after Forget, want 3", n)
	}
	if n := testutil.CollectAndCount(c.propagation); n != 1 {
		t.Errorf("%d propagation series, want 1 (east from west)", n)
	}
}
