package report

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Markdown renders the report a user reads.
func (r *Results) Markdown() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }

	p("# mcsd benchmark, %s registry\n\n", r.Params.Registry)
	p("Run %s, %s.\n\n", r.Started.UTC().Format("2006-01-02 15:04:05 MST"), r.Finished.Sub(r.Started).Round(1e9))
	p("**Machine:** %d CPUs (%s), %s memory, %s, kernel %s; load average at start %s.\n\n",
		r.Machine.NProc, r.Machine.CPUModel, bytesString(r.Machine.MemTotal), r.Machine.GoVersion, r.Machine.Kernel, r.Machine.LoadAvg)
	pr := r.Params
	p("**Parameters:** %d clusters, %d services exported before the controllers start (owners round-robin), %d endpoints each; "+
		"%d more exported one by one at %.0f/s; endpoint churn %.1f/s for %s; %d DNS samples; steady state %s; bursts %v; "+
		"controller client QPS %.0f, burst %d. Phases: %s.\n\n",
		pr.Clusters, pr.Services, pr.Endpoints, pr.ExportSamples, pr.ExportRate, pr.Churn, pr.ChurnFor, pr.DNSSamples, pr.Steady,
		pr.Bursts, pr.ControllerQPS, pr.ControllerBur, strings.Join(pr.Phases, ", "))
	for _, e := range pr.Extra {
		p("- %s\n", e)
	}
	if len(pr.Extra) > 0 {
		p("\n")
	}

	if len(r.Targets) > 0 {
		p("## Figures against targets\n\n")
		p("| What | Target | Measured | |\n|---|---|---|---|\n")
		for _, t := range r.Targets {
			mark := "not measured"
			if t.Target == "(figure)" {
				mark = "–"
			}
			if t.Met != nil {
				mark = "met"
				if !*t.Met {
					mark = "**missed**"
				}
			}
			v := t.Value
			if t.Note != "" {
				v += " (" + t.Note + ")"
			}
			p("| %s | %s | %s | %s |\n", t.What, t.Target, v, mark)
		}
		p("\n")
	}

	p("## Latency\n\n")
	p("Each change is timed from the moment a watch in the source cluster sees it (the ServiceExport created, the EndpointSlice changed) " +
		"to the moment a watch in another cluster first sees the ServiceImport with its cluster IP and EndpointSlices holding exactly the " +
		"expected endpoints; DNS from the same start to the first A answer of another cluster's CoreDNS.\n\n")
	p("| Phase | What | n | p50 | p90 | p99 | max |\n|---|---|---|---|---|---|---|\n")
	for _, ph := range r.Phases {
		for _, what := range slices.Sorted(maps.Keys(ph.Latency)) {
			d := ph.Latency[what]
			p("| %s | %s | %d | %s | %s | %s | %s |\n", ph.Name, what, d.N, ms(d.P50), ms(d.P90), ms(d.P99), ms(d.Max))
		}
	}
	p("\n")

	for _, ph := range r.Phases {
		if len(ph.Stages) == 0 {
			continue
		}
		if ph.Name == "failover" {
			p("### Where the time of a failover goes (%s phase)\n\n", ph.Name)
			p("Time from the readiness change of the client cluster's own pod to each step, as a watch of that cluster's " +
				"EndpointSlices first sees it; kube-proxy's part is the rest of the failover figure.\n\n")
		} else {
			p("### Where the time of an export goes (%s phase)\n\n", ph.Name)
			p("Time from the ServiceExport's creation to each step, as the watches first see it; the importer's steps over every " +
				"cluster other than the source. The importers start once the export is in the registry, before the source's status patch.\n\n")
		}
		p("| Step | n | p50 | p90 | p99 |\n|---|---|---|---|---|\n")
		for _, step := range slices.Sorted(maps.Keys(ph.Stages)) {
			d := ph.Stages[step]
			p("| %s | %d | %s | %s | %s |\n", step[2:], d.N, ms(d.P50), ms(d.P90), ms(d.P99))
		}
		p("\n")
	}

	p("## Phases\n\n")
	p("Controller CPU is the sum over the %d mcsd processes; peak RSS is the largest VmHWM of one process. API writes are the controllers' "+
		"writes to their API servers; registry operations are mcsd_registry_operations_total; the registry server's counters are %s.\n\n",
		pr.Clusters, registryCounters(pr.Registry))
	p("| Phase | What it does | Time | Changes | Converged | Controller CPU | Peak RSS | Heap | API writes | Registry ops | Registry server |\n")
	p("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, ph := range r.Phases {
		var cpu float64
		var rss, heap uint64
		for _, c := range ph.Controllers {
			cpu += c.CPUSeconds
			rss = max(rss, c.PeakRSS)
			heap = max(heap, c.HeapInuse)
		}
		conv := "–"
		if ph.Converged > 0 {
			conv = fmt.Sprintf("%.1f s", ph.Converged)
		}
		p("| %s | %s | %.1f s | %d | %s | %.1f s | %s | %s | %s | %s | %s |\n", ph.Name, ph.Describe, ph.Seconds, ph.Changes, conv, cpu,
			bytesString(rss), bytesString(heap), writesString(ph.APIWrites), countsString(ph.RegistryOps), countsString(ph.RegistryServer))
	}
	p("\n")

	var perChange []*Phase
	for _, ph := range r.Phases {
		if len(ph.PerChange) > 0 {
			perChange = append(perChange, ph)
		}
	}
	if len(perChange) > 0 {
		figures := map[string]bool{}
		var head []string
		for _, ph := range perChange {
			head = append(head, ph.Name)
			for k := range ph.PerChange {
				figures[k] = true
			}
		}
		p("## Cost per change\n\nFor each change a phase made (an export, an endpoint change), over all clusters unless said otherwise.\n\n")
		p("| Figure | %s |\n|---|%s\n", strings.Join(head, " | "), strings.Repeat("---|", len(head)))
		for _, k := range slices.Sorted(maps.Keys(figures)) {
			var cells []string
			for _, ph := range perChange {
				if v, ok := ph.PerChange[k]; ok {
					cells = append(cells, fmt.Sprintf("%.2f", v))
				} else {
					cells = append(cells, "–")
				}
			}
			p("| %s | %s |\n", k, strings.Join(cells, " | "))
		}
		p("\n")
	}

	for _, ph := range r.Phases {
		if len(ph.PerMinute) == 0 {
			continue
		}
		p("## Rates during %s\n\n| Figure | Per minute |\n|---|---|\n", ph.Name)
		for _, k := range slices.Sorted(maps.Keys(ph.PerMinute)) {
			p("| %s | %.1f |\n", k, ph.PerMinute[k])
		}
		p("\n")
	}

	p("## Where the CPU went\n\n")
	p("CPU seconds by process over each phase. The API servers, their etcds, kube-controller-manager, kwok and CoreDNS are separate " +
		"processes of the testbed, not mcsd; \"harness\" is the benchmark process itself (load generator, watches, and the etcd registry, " +
		"which runs in it); \"machine\" is the busy time of all CPUs, so machine ÷ (time × CPUs) is how saturated the machine was.\n\n")
	kinds := map[string]bool{}
	for _, ph := range r.Phases {
		for k := range ph.Processes {
			kinds[k] = true
		}
	}
	cols := slices.Sorted(maps.Keys(kinds))
	p("| Phase | mcsd | %s | machine busy |\n|---|---|%s---|\n", strings.Join(cols, " | "), strings.Repeat("---|", len(cols)))
	for _, ph := range r.Phases {
		var cpu float64
		for _, c := range ph.Controllers {
			cpu += c.CPUSeconds
		}
		var cells []string
		for _, k := range cols {
			cells = append(cells, fmt.Sprintf("%.1f", ph.Processes[k]))
		}
		busy := "–"
		if ph.Seconds > 0 && r.Machine.NProc > 0 {
			busy = fmt.Sprintf("%.0f%%", 100*ph.Processes["machine"]/(ph.Seconds*float64(r.Machine.NProc)))
		}
		p("| %s | %.1f | %s | %s |\n", ph.Name, cpu, strings.Join(cells, " | "), busy)
	}
	p("\n")

	p("## Plots\n\n")
	for _, f := range []struct{ file, alt string }{
		{FileCDF, "latency CDF"}, {FileHistogram, "latency histogram"}, {FileScaling, "convergence time against the number of services"},
		{FileProgress, "imports converged during the cold start"},
	} {
		p("![%s](%s)\n\n", f.alt, f.file)
	}
	if len(r.Notes) > 0 {
		p("## Notes\n\n")
		for _, n := range r.Notes {
			p("- %s\n", n)
		}
		p("\n")
	}
	p("Raw figures: `%s`; every timed change: `%s`; CPU and heap profiles of every controller by phase: `profiles/`; controller logs: `logs/`.\n",
		FileJSON, FileSamples)
	return b.String()
}

// TargetTable renders only the targets table, for docs.
func (r *Results) TargetTable() string {
	s := r.Markdown()
	i := strings.Index(s, "## Figures against targets")
	if i < 0 {
		return ""
	}
	s = s[i:]
	j := strings.Index(s[2:], "\n## ")
	if j >= 0 {
		s = s[:j+2]
	}
	return s
}

func registryCounters(reg string) string {
	if reg == "cloudmap" {
		return "Cloud Map API calls counted at a proxy in front of moto"
	}
	return "the embedded etcd's own metrics (etcd_mvcc_*_total; events = watch events sent) and its revision"
}

func ms(s float64) string {
	switch {
	case s == 0:
		return "0"
	case s < 0.01:
		return fmt.Sprintf("%.1f ms", s*1000)
	case s < 10:
		return fmt.Sprintf("%.0f ms", s*1000)
	}
	return fmt.Sprintf("%.1f s", s)
}

// MS formats seconds as the report does.
func MS(s float64) string { return ms(s) }

func bytesString(n uint64) string {
	switch {
	case n == 0:
		return "–"
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	}
	return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20))
}

// Bytes formats a byte count as the report does.
func Bytes(n uint64) string { return bytesString(n) }

func writesString(w map[string]map[string]int) string {
	sum := map[string]int{}
	for _, byRes := range w {
		for res, n := range byRes {
			sum[res] += n
		}
	}
	var parts []string
	total := 0
	for _, res := range slices.Sorted(maps.Keys(sum)) {
		if sum[res] == 0 {
			continue
		}
		total += sum[res]
		parts = append(parts, fmt.Sprintf("%s %d", res, sum[res]))
	}
	if total == 0 {
		return "0"
	}
	return fmt.Sprintf("%d: %s", total, strings.Join(parts, ", "))
}

func countsString(m map[string]float64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if m[k] == 0 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.0f", k, m[k]))
	}
	if len(parts) == 0 {
		return "0"
	}
	return strings.Join(parts, ", ")
}

// MachineString is one line about the machine.
func (m Machine) String() string {
	return fmt.Sprintf("%d CPUs (%s), %s memory, %s, kernel %s", m.NProc, m.CPUModel, bytesString(m.MemTotal), m.GoVersion, m.Kernel)
}
