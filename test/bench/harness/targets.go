package harness

import (
	"fmt"
	"slices"
	"strings"

	"github.com/mcsd-io/mcsd/pkg/registry/cloudmap"
	"github.com/mcsd-io/mcsd/test/bench/report"
)

// The targets mcsd is held to (2 cores, loopback).
const (
	targetImportP50 = 0.040 // seconds, with 1,000 exported services over 3 clusters
	// targetColdStartOverFloor bounds the cold start against the floor
	// phase, the testbed's own time for the same writes.
	targetColdStartOverFloor = 1.1
	targetImportP99          = 0.100 // seconds, with 1,000 exported services over 3 clusters
	targetEndpointsP99       = 0.100 // seconds
	targetColdStart          = 60.0  // seconds, 3 clusters × 2,000 services × 10 endpoints
	targetPeakRSS            = 256 << 20
)

// targets compares the run's figures with the targets. The configuration a
// target is stated for is noted when the run's differs.
func targets(r *report.Results) []report.TargetCheck {
	if r.Params.Registry != RegistryEtcd {
		return cloudMapFigures(r)
	}
	p := r.Params
	var out []report.TargetCheck
	check := func(what, target string, raw float64, value string, met bool, note string) {
		out = append(out, report.TargetCheck{What: what, Target: target, Raw: raw, Value: value, Met: &met, Note: note})
	}
	missing := func(what, target string) {
		out = append(out, report.TargetCheck{What: what, Target: target, Value: "–"})
	}
	scale := func(services, clusters int) string {
		if p.Services == services && p.Clusters == clusters {
			return ""
		}
		return fmt.Sprintf("run with %d services × %d clusters, target stated for %d × %d", p.Services, p.Clusters, services, clusters)
	}
	if ph := r.PhaseByName(PhaseExport); ph != nil && ph.Latency["import"].N > 0 {
		d := ph.Latency["import"]
		floor := func(pick func(report.Dist) float64) string {
			fl := r.PhaseByName(PhaseFloor)
			if fl == nil || fl.Latency[FloorOneAtATime].N == 0 {
				return scale(1000, 3)
			}
			note := fmt.Sprintf("the testbed alone, with no controller, took %s for an import's two writes in a row, one import at a time in every cluster at once (floor phase)",
				report.MS(pick(fl.Latency[FloorOneAtATime])))
			return strings.Join(slices.DeleteFunc([]string{scale(1000, 3), note}, func(s string) bool { return s == "" }), "; ")
		}
		check("export → import in every other cluster, p50", "≤ 40 ms", d.P50, report.MS(d.P50), d.P50 <= targetImportP50,
			floor(func(d report.Dist) float64 { return d.P50 }))
		check("export → import in every other cluster, p99", "≤ 100 ms", d.P99, report.MS(d.P99), d.P99 <= targetImportP99,
			floor(func(d report.Dist) float64 { return d.P99 }))
	} else {
		missing("export → import in every other cluster, p50", "≤ 40 ms")
		missing("export → import in every other cluster, p99", "≤ 100 ms")
	}
	if ph := r.PhaseByName(PhaseChurn); ph != nil && ph.Latency["endpoints"].N > 0 {
		d := ph.Latency["endpoints"]
		check("endpoint change → other clusters, p99", "≤ 100 ms", d.P99, report.MS(d.P99), d.P99 <= targetEndpointsP99, scale(1000, 3))
	} else {
		missing("endpoint change → other clusters, p99", "≤ 100 ms")
	}
	if ph := r.PhaseByName(PhaseColdStart); ph != nil && ph.Converged > 0 {
		note := ""
		if p.Services != 2000 || p.Clusters != 3 || p.Endpoints != 10 {
			note = fmt.Sprintf("run with %d × %d × %d, target stated for 3 × 2,000 × 10", p.Clusters, p.Services, p.Endpoints)
		}
		coldNote := note
		if fl := r.PhaseByName(PhaseFloor); fl != nil && fl.Converged > 0 {
			floor := fmt.Sprintf("the testbed alone, with no controller, took %.1f s for the API writes of these imports (floor phase)", fl.Converged)
			coldNote = strings.Join(slices.DeleteFunc([]string{note, floor}, func(s string) bool { return s == "" }), "; ")
		}
		check("cold start: every import converged", "≤ 60 s", ph.Converged, fmt.Sprintf("%.1f s", ph.Converged), ph.Converged <= targetColdStart, coldNote)
		if fl := r.PhaseByName(PhaseFloor); fl != nil && fl.Converged > 0 {
			ratio := ph.Converged / fl.Converged
			check("cold start against the floor phase of the same run", "≤ 1.1 ×", ratio, fmt.Sprintf("%.2f ×", ratio), ratio <= targetColdStartOverFloor,
				"the floor runs last, on top of the imports of every phase before it")
		}
		var rss uint64
		for _, c := range ph.Controllers {
			rss = max(rss, c.PeakRSS)
		}
		check("controller peak RSS (cold start)", "≤ 256 MiB", float64(rss), report.Bytes(rss), rss <= targetPeakRSS, note)
	} else {
		missing("cold start: every import converged", "≤ 60 s")
		missing("controller peak RSS (cold start)", "≤ 256 MiB")
	}
	for _, name := range []string{PhaseSteady, PhaseRestart} {
		ph := r.PhaseByName(name)
		what := "API writes at steady state"
		if name == PhaseRestart {
			what = "API writes after restarting every controller on a converged clusterset"
		}
		if ph == nil {
			missing(what, "0")
			continue
		}
		n, detail := objectWrites(ph)
		check(what, "0", float64(n), fmt.Sprint(n), n == 0, detail)
	}
	return append(out, failoverFigures(r)...)
}

// failoverFigures states the failover phase's figures beside its floor,
// kube-proxy's own reaction to an EndpointSlice change in the same run (no
// target is set for them).
func failoverFigures(r *report.Results) []report.TargetCheck {
	ph := r.PhaseByName(PhaseFailover)
	if ph == nil || ph.Latency[FailoverFloor].N == 0 {
		return nil
	}
	fl, fa := ph.Latency[FailoverFloor], ph.Latency[FailoverFloorAfter]
	floor := fmt.Sprintf("the same run's floor, kube-proxy alone reacting to an EndpointSlice written directly: p50 %s, p99 %s; "+
		"written 20 ms after another local slice changed, as the exported Service's own slice does before mcsd's: p50 %s, p99 %s",
		report.MS(fl.P50), report.MS(fl.P99), report.MS(fa.P50), report.MS(fa.P99))
	var out []report.TargetCheck
	for _, f := range []struct{ key, what string }{
		{FailoverAway, "failover: local endpoint not ready → first request served by another cluster"},
		{FailoverBack, "failback: local endpoint ready again → first request served by it"},
	} {
		d := ph.Latency[f.key]
		out = append(out, report.TargetCheck{What: f.what + ", p50 / p99", Target: "none (a figure)", Raw: d.P50,
			Value: report.MS(d.P50) + " / " + report.MS(d.P99), Note: floor})
	}
	return out
}

// objectWrites counts the writes of mcsd's objects (everything but Events).
func objectWrites(ph *report.Phase) (int, string) {
	var n, events int
	by := map[string]int{}
	for _, w := range ph.APIWrites {
		for res, c := range w {
			if res == "events" {
				events += c
				continue
			}
			n += c
			by[res] += c
		}
	}
	var parts []string
	for _, res := range sortedKeys(by) {
		parts = append(parts, fmt.Sprintf("%s %d", res, by[res]))
	}
	if events > 0 {
		parts = append(parts, fmt.Sprintf("plus %d Events", events))
	}
	return n, strings.Join(parts, ", ")
}

// cloudMapFigures are the Cloud Map run's headline figures; the targets
// are stated for the etcd registry.
func cloudMapFigures(r *report.Results) []report.TargetCheck {
	var out []report.TargetCheck
	add := func(what, value string) {
		out = append(out, report.TargetCheck{What: what, Target: "(figure)", Value: value})
	}
	if ph := r.PhaseByName(PhaseExport); ph != nil {
		d := ph.Latency["import"]
		add("export → import in every other cluster, p50 / p99", report.MS(d.P50)+" / "+report.MS(d.P99))
	}
	if ph := r.PhaseByName(PhaseChurn); ph != nil {
		d := ph.Latency["endpoints"]
		add("endpoint change → other clusters, p50 / p99", report.MS(d.P50)+" / "+report.MS(d.P99))
	}
	if ph := r.PhaseByName(PhaseInterop); ph != nil {
		for _, what := range []string{"AWS-controller export → import", "AWS-controller endpoint change → import"} {
			d := ph.Latency[what]
			add(what+" in every mcsd cluster, p50 / p99", report.MS(d.P50)+" / "+report.MS(d.P99))
		}
	}
	if ph := r.PhaseByName(PhaseChurn); ph != nil && ph.Changes > 0 {
		var total float64
		for k, v := range ph.RegistryServer {
			if !strings.HasPrefix(k, sweepPrefix) {
				total += v
			}
		}
		add("Cloud Map API calls per endpoint change (all clusters, sweeps excluded)", fmt.Sprintf("%.1f", total/float64(ph.Changes)))
	}
	for _, ph := range r.Phases {
		if strings.HasPrefix(ph.Name, PhaseBurst+"-") {
			add(fmt.Sprintf("%d exports at once → imported in every other cluster", ph.Changes), fmt.Sprintf("%.1f s", ph.Converged))
		}
	}
	if ph := r.PhaseByName(PhaseSteady); ph != nil {
		clusters := float64(max(r.Params.Clusters, 1))
		var total, sweep, sweeps float64
		var parts, sweepParts []string
		for _, op := range sortedKeys(ph.PerMinute) {
			name, ok := strings.CutPrefix(op, "registry server: ")
			if !ok {
				continue
			}
			v := ph.PerMinute[op] / clusters
			if name, ok := strings.CutPrefix(name, sweepPrefix); ok {
				sweep += v
				sweepParts = append(sweepParts, fmt.Sprintf("%s %.1f", name, v))
				if name == "ListNamespaces" {
					// One page a sweep, with fewer than 100 namespaces.
					sweeps = v
				}
				continue
			}
			total += v
			parts = append(parts, fmt.Sprintf("%s %.1f", name, v))
		}
		add("Cloud Map API calls per cluster per minute at steady state, sweeps excluded", fmt.Sprintf("%.1f: %s", total, strings.Join(parts, ", ")))
		if sweeps > 0 {
			per := sweep / sweeps
			add("Cloud Map API calls of one sweep, per cluster", fmt.Sprintf("%.0f: %s (per minute)", per, strings.Join(sweepParts, ", ")))
			services := float64(max(r.Params.Services+r.Params.ExportSamples, 1))
			add(fmt.Sprintf("the sweep amortized over its default interval (%s), calls per service per minute", cloudmap.DefaultSweepInterval),
				fmt.Sprintf("%.3f (%.0f services)", per/cloudmap.DefaultSweepInterval.Minutes()/services, services))
		}
	}
	return out
}

// notes explain how to read the figures.
func notes(r *report.Results) []string {
	n := []string{
		"Each controller is a process of its own (the benchmark binary run as mcsd's manager.Run, as the mcsd command runs it), so its CPU " +
			"seconds (/proc/PID/stat) and peak RSS (VmHWM) are its own; the API servers, their etcds, kube-controller-manager, kwok and CoreDNS " +
			"are separate processes and are not in them. All processes share the machine's CPUs.",
		"Services have no selector and the harness writes their EndpointSlices (managed-by " + managedBy + "), standing in for the EndpointSlice " +
			"controller: an endpoint change is one API write, and kube-controller-manager and kwok take no part.",
	}
	if r.Params.Registry == RegistryEtcd {
		n = append(n, "The etcd registry is embedded in the harness process: its CPU is in \"harness\".")
	}
	return n
}
