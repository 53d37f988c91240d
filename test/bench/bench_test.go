package main

import (
	"encoding/csv"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcsd-io/mcsd/test/bench/harness"
	"github.com/mcsd-io/mcsd/test/bench/report"
)

func TestMain(m *testing.M) {
	// The harness runs each cluster's controller as this test binary.
	harness.MaybeRunController()
	os.Exit(m.Run())
}

// TestSmoke runs the whole benchmark at a tiny size (2 clusters × 5
// services) and checks that the report is written and parses. It checks
// no timing: the figures of a tiny run on a shared machine mean nothing.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a testbed")
	}
	out := t.TempDir()
	_, err := harness.Run(t.Context(), harness.Options{
		Clusters: 2, Services: 5, Endpoints: 3, ExportSamples: 4, DNSSamples: 2,
		ChurnFor: 2 * time.Second, Steady: 2 * time.Second, Bursts: []int{2, 5},
		FailoverTrials: 1, Timeout: 2 * time.Minute, Out: out, Log: testWriter{t},
	})
	if err != nil {
		t.Fatal(err)
	}
	res, err := report.Read(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range harness.AllPhases {
		if name == harness.PhaseInterop {
			continue // Cloud Map only: TestCloudMapSmoke
		}
		if name == harness.PhaseBurst {
			name = "burst-5"
		}
		if res.PhaseByName(name) == nil {
			t.Errorf("results have no phase %s", name)
		}
	}
	if ph := res.PhaseByName(harness.PhaseExport); ph != nil && ph.Latency["import"].N != 4 {
		t.Errorf("export phase timed %d imports, want 4 (one other cluster × 4 services)", ph.Latency["import"].N)
	}
	if ph := res.PhaseByName(harness.PhaseFloor); ph != nil && ph.Latency[harness.FloorOneAtATime].N != 8 {
		t.Errorf("floor phase timed %d imports one at a time, want 8 (2 clusters × 4)", ph.Latency[harness.FloorOneAtATime].N)
	}
	if ph := res.PhaseByName(harness.PhaseColdStart); ph != nil && (ph.Converged <= 0 || ph.Controllers["c1"].PeakRSS == 0) {
		t.Errorf("cold start: converged %.3fs, controllers %+v", ph.Converged, ph.Controllers)
	}
	if len(res.Targets) == 0 || res.Machine.NProc == 0 {
		t.Errorf("targets %v, machine %+v", res.Targets, res.Machine)
	}

	md, err := os.ReadFile(filepath.Join(out, report.FileMarkdown))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Figures against targets", "## Latency", report.FileCDF} {
		if !strings.Contains(string(md), want) {
			t.Errorf("%s lacks %q", report.FileMarkdown, want)
		}
	}
	for _, name := range []string{report.FileCDF, report.FileHistogram, report.FileScaling, report.FileProgress} {
		f, err := os.Open(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		_ = f.Close()
		if err != nil {
			t.Errorf("%s: %v", name, err)
		} else if b := img.Bounds(); b.Dx() < 100 || b.Dy() < 100 {
			t.Errorf("%s is %v", name, b)
		}
	}
	f, err := os.Open(filepath.Join(out, report.FileSamples))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(f).ReadAll()
	_ = f.Close()
	if err != nil || len(rows) < 2 {
		t.Errorf("%s: %d rows, %v", report.FileSamples, len(rows), err)
	}
	for _, p := range []string{"profiles/cpu-coldstart-c1.pprof", "profiles/heap-churn-c2.pprof", "logs/c1.log"} {
		if st, err := os.Stat(filepath.Join(out, p)); err != nil || st.Size() == 0 {
			t.Errorf("%s: missing or empty (%v)", p, err)
		}
	}
}

// TestCloudMapSmoke runs the Cloud Map benchmark's export and interop
// phases at a tiny size (2 clusters × 3 services, 2 Services of the
// AWS-controller-shaped writer): the interop phase times both of its
// changes into both clusters.
func TestCloudMapSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("-short (make test-unit) runs nothing that needs the testbed's binaries or moto; make test, which CI runs, runs this")
	}
	out := t.TempDir()
	_, err := harness.Run(t.Context(), harness.Options{
		Registry: harness.RegistryCloudMap, Clusters: 2, Services: 3, Endpoints: 2, ExportSamples: 2, InteropSamples: 2,
		Phases: []string{harness.PhaseExport, harness.PhaseInterop}, Timeout: 2 * time.Minute, Out: out, Log: testWriter{t},
	})
	if err != nil {
		t.Fatal(err)
	}
	res, err := report.Read(out)
	if err != nil {
		t.Fatal(err)
	}
	ph := res.PhaseByName(harness.PhaseInterop)
	if ph == nil {
		t.Fatal("results have no interop phase")
	}
	for what, d := range ph.Latency {
		if d.N != 4 {
			t.Errorf("%s: %d samples, want 4 (2 Services × 2 clusters)", what, d.N)
		}
	}
	if len(ph.Latency) != 2 {
		t.Errorf("interop latencies %v, want the export and the endpoint change", ph.Latency)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
