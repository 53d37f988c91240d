package main

import (
	"cmp"
	"fmt"
	"image/color"
	"maps"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/mcsd-io/mcsd/test/bench/report"
)

// results are a bench-scale run.
type results struct {
	Config   config         `json:"config"`
	Machine  report.Machine `json:"machine"`
	Started  time.Time      `json:"started"`
	Finished time.Time      `json:"finished"`
	Runs     []runResult    `json:"runs"`
	CloudMap []cloudMapRun  `json:"cloudMap,omitempty"`
}

func (r runResult) line() string {
	return fmt.Sprintf("[scale] N=%d: converged %s (writes %s); churn p50 %s p99 %s (floor p50 %s p99 %s; a small key's p99 %s); idle %.1f req/member/min; resync %s (%d deletions, %d reports); leave seen %s",
		r.N, r.Converged.Round(time.Millisecond), r.Publish.Round(time.Millisecond), ms(r.P50), ms(r.P99), ms(r.FloorP50), ms(r.FloorP99), ms(r.KeyFloorP99),
		r.IdlePerMemberPerMinute, r.Resynced.Round(time.Millisecond), r.RestartDeletions, r.RestartReports, r.LeaveSeen.Round(time.Millisecond)) +
		r.LeaderKill.line("leader killed") + r.Compaction.line("compacted past every watch") + r.Real.line()
}

func (d *disruption) line(what string) string {
	if d == nil {
		return ""
	}
	return fmt.Sprintf("\n[scale]   %s: every member current in %s (change written in %s, half the members current in %s; %d read again, %s received; %d deletions, %d reports; real clusters %d deletions, writes %s)",
		what, d.Took.Round(time.Millisecond), d.Written.Round(time.Millisecond), d.Median.Round(time.Millisecond), d.Rereads, report.Bytes(uint64(d.Received)), d.Deletions, d.Reports, d.RealDeletions, counts(d.RealWrites))
}

func (x *realResult) line() string {
	if x == nil {
		return ""
	}
	return fmt.Sprintf("\n[scale]   real clusters: join ready %s, whole %s (floor %s: %s; every join / floor: %s; %d objects; writes %s, %.0f import reconciles taking %.1f s; controllers' CPU once ready %.2f cores, the machine's %.2f, during the floor %.2f; CPU-seconds from the start: the machine's %.1f, the controllers' %.1f, the benchmark's %.1f; during the floor before: the machine's %.1f, the benchmark's %.1f; the machine's busy CPUs before the floor %.2f, before the join %.2f; by process, floor before → join: %s; object bytes %s, the floor's %s); change → slice p50 %s p99 %s (API floor p99 %s); %.2f slice writes per change; %.3f cores, peak RSS %s; restart deletions %d; leave: %d slices gone in %s, writes %s",
		x.JoinReady.Round(time.Millisecond), x.Join.Round(time.Millisecond), x.pair().floor().Round(time.Millisecond), x.pair().floors(), x.pairRatios(), x.Objects, counts(x.JoinWrites), x.JoinReconciles, x.JoinReconcileTime, x.JoinCPU, x.JoinMachine, x.JoinFloorMachine,
		x.JoinMachineSeconds, x.JoinControllerSeconds, x.JoinHarnessSeconds, x.JoinFloorMachineSeconds, x.JoinFloorHarnessSeconds, x.JoinFloorSettled, x.JoinSettled, processLine(x.JoinFloorProcessSeconds, x.JoinProcessSeconds), counts(x.JoinObjectBytes), counts(x.JoinFloorObjectBytes), ms(x.P50), ms(x.P99), ms(x.APIFloorP99),
		x.SliceWritesPerChange, x.CPU, report.Bytes(x.PeakRSS), x.RestartDeletions, x.LeaverSlices, x.LeaveGone.Round(time.Millisecond), counts(x.LeaveWrites))
}

// pairRatios lists each join's ratio to its floor, in order.
func (x *realResult) pairRatios() string {
	var parts []string
	for _, p := range x.JoinPairs {
		parts = append(parts, fmt.Sprintf("%.2f", p.ratio()))
	}
	if len(parts) == 0 {
		return "-"
	}
	out := strings.Join(parts, ", ") + " ×"
	if w := x.joinOverWatching(); w != "" {
		out += fmt.Sprintf("; median watching floor / floor %s, join / watching floor %s", x.watchingMedians(), w)
	}
	return out
}

func ms(d time.Duration) string { return report.MS(d.Seconds()) }

func (res results) markdown() string {
	if len(res.CloudMap) > 0 {
		return res.cloudMapMarkdown()
	}
	var b strings.Builder
	c := res.Config
	fmt.Fprintf(&b, "# bench-scale: the etcd registry under N simulated clusters\n\n")
	fmt.Fprintf(&b, "%s. %d Services, each exported by %s clusters with %d endpoints; churn %.1f endpoint change per member per second for %s (%s); idle counted over %s; lease TTL %s; %d members feed a real clusterset.View. Started %s, took %s.\n\n",
		res.Machine, c.Services, kString(c.K), c.Endpoints, c.ChurnRate, c.Churn, churnOrder(c.ChurnLockstep), c.Idle, c.TTL, c.Views,
		res.Started.Format(time.RFC3339), res.Finished.Sub(res.Started).Round(time.Second))
	b.WriteString("| N | endpoint records | etcd db | writes (floor) | every member holds every record | churn p50 / p99 / max | etcd put → watch p50 / p99 (floor; a small key, one watcher) | p99 ≤ 2 × floor p99 + 50 ms? | churn CPU (cores, all members) | idle requests per member per minute | registry restart: every member read again | deletions / outage reports during it | leaver seen gone by all (TTL) | records deleted at each other member (leaver's) | RSS, all members |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range res.Runs {
		ok := "yes"
		if r.P99 > 2*r.FloorP99+50*time.Millisecond {
			ok = "**no**"
		}
		fmt.Fprintf(&b, "| %d | %d | %s | %s | %s | %s / %s / %s | %s / %s (%s / %s) | %s | %.2f | %.1f | %s | %d / %d | %s (%s) | %d (%d) | %s |\n",
			r.N, r.Records, report.Bytes(uint64(r.DBBytes)), r.Publish.Round(time.Millisecond), r.Converged.Round(time.Millisecond),
			ms(r.P50), ms(r.P99), ms(r.Max), ms(r.FloorP50), ms(r.FloorP99), ms(r.KeyFloorP50), ms(r.KeyFloorP99), ok, r.ChurnCPU, r.IdlePerMemberPerMinute,
			r.Resynced.Round(time.Millisecond), r.RestartDeletions, r.RestartReports, r.LeaveSeen.Round(time.Millisecond), c.TTL,
			r.LeaveDeletions, r.LeaverRecords*2, report.Bytes(r.RSS))
	}
	b.WriteString("\nThe floor is the registry's own put → watch as a watcher of the clusterset has it: every 200 ms during the churn, a raw etcd client's put of a value the size of an endpoint record" + res.floorValues() + ", at a key under the clusterset's prefix that no cluster has (etcd sends it to every watcher of the clusterset, as it sends every change, and each ignores it), reaching the registry as the members do (through their gate, where the registry is one member), timed to its arrival on a raw watch of the whole clusterset (which carries every change, as the controllers' watches do). In brackets, the floor of before 2026-11-29's last session: a small value put every 50 ms at a key outside the clusterset, watched by no other client, straight to etcd. \"Writes\" is how long the members took to write every record: etcd's pace, the floor of the cold start. The 50 ms in the churn target stands for the API write floor of a real cluster, which this registry-only run does not have.\n")
	b.WriteString(res.disruptionsMarkdown())
	if res.hasReal() {
		b.WriteString(res.realMarkdown())
	}
	b.WriteString("\n![scale](scale.png)\n")
	return b.String()
}

func (res results) hasReal() bool {
	for _, r := range res.Runs {
		if r.Real != nil {
			return true
		}
	}
	return false
}

// realMarkdown is the table of the real clusters' figures.
func (res results) realMarkdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n## Real clusters among the members\n\n%d testbed clusters (API server, etcd, kube-controller-manager; no data plane) run mcsd on the same registry; they have, and import, the Services of %d of the 50 namespaces, and their controllers hold the whole clusterset.\n\n", res.Config.Real, res.Config.RealNamespaces)
	b.WriteString("| N | imports (objects) per real cluster | join: ready / every import whole (machine's CPUs busy once ready) | join floor (same objects, written by the harness): the mean of the floors before and after the join, where both were timed (machine's CPUs busy during the one before) | whole ≤ 1.1 × floor? | join CPU-seconds: machine / controllers / benchmark (floor: machine / benchmark) | change → real EndpointSlice p50 / p99 (samples) | API write → watch p50 / p99 | p99 ≤ 2 × registry floor p99 + API floor p99? | EndpointSlice writes per change per cluster | other writes during the churn | controller CPU (cores, busiest) | controller peak RSS | registry restart: deletions / writes | leaver: slices gone (its slices) / writes / other deletions |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range res.Runs {
		x := r.Real
		if x == nil {
			continue
		}
		joinOK := yes(x.pair().ratio() <= 1.1)
		churnOK := fmt.Sprintf("%s (2 × %s + %s)", yes(x.P99 <= 2*r.FloorP99+x.APIFloorP99), ms(r.FloorP99), ms(x.APIFloorP99))
		if x.Samples == 0 {
			// No change of the churn fell in the real clusters' namespaces
			// (at N = 3, about one run in 125): nothing was timed.
			churnOK = "no samples"
		}
		fmt.Fprintf(&b, "| %d | %d (%d) | %s / %s (%.2f cores) | %s, %s (%.2f cores) | %s | %.1f / %.1f / %.1f (%.1f / %.1f) | %s / %s (%d) | %s / %s | %s | %.2f | %s | %.3f | %s | %d / %s | %s (%d) / %s / %d |\n",
			r.N, x.Imports, x.Objects, x.JoinReady.Round(time.Millisecond), x.Join.Round(time.Millisecond), x.JoinMachine, x.pair().floor().Round(time.Millisecond), x.pair().floors(), x.JoinFloorMachine, joinOK,
			x.JoinMachineSeconds, x.JoinControllerSeconds, x.JoinHarnessSeconds, x.JoinFloorMachineSeconds, x.JoinFloorHarnessSeconds,
			ms(x.P50), ms(x.P99), x.Samples, ms(x.APIFloorP50), ms(x.APIFloorP99), churnOK, x.SliceWritesPerChange, counts(x.OtherWrites),
			x.CPU, report.Bytes(x.PeakRSS), x.RestartDeletions, counts(x.RestartWrites),
			x.LeaveGone.Round(time.Millisecond), x.LeaverSlices, counts(x.LeaveWrites), x.LeaveOtherDeletions)
	}
	b.WriteString(res.keyFloorMarkdown())
	b.WriteString(res.joinPairsMarkdown())
	b.WriteString(res.joinProcessMarkdown())
	b.WriteString("\nThe join is timed from the controllers' start (both real clusters at once) to the arrival, on the benchmark's watch, of the last object as wanted; its floor is the harness writing the same ServiceImports, derived Services and EndpointSlices in both clusters at once, with the import controller's concurrency and in its order, then deleted before the controllers start. Each begins on a settled machine (the benchmark's garbage collected, and the machine's CPUs less than 0.3 busy over a second), and at least 31 s after the last deletion of a namespace it writes in (for 30 s after a namespace is deleted, the API server reads it again for every write in a namespace of that name), as does the churn.")
	if res.cpuSplit() == nil {
		b.WriteString(" Where the floor keeps every CPU of the machine busy, the join outlasts it by its start-up (until ready) plus what the join's CPU-seconds exceed the floor's, over the machine's CPUs: the controllers' own (start-up included), less the floor's client (the benchmark's writes), plus what the API servers do for the controllers beyond the writes.")
	}
	b.WriteString(" The API floor is an EndpointSlice update every 200 ms in each real cluster, timed to its arrival on the benchmark's watch" + res.apiFloorSlices() + ". Writes are counted by resource, summed over the real clusters (lease renewals left out).\n")
	if split := res.cpuSplit(); split != nil {
		fmt.Fprintf(&b, "\nThrough the joins and their floors (`-split-cpus`), the real clusters' own processes (their API servers, etcds, kube-controller-managers, schedulers and kwok) ran on CPUs %v alone, and the rest of the run (the controllers, the registry's etcd and its gate, the benchmark with the simulated members and the floor's client) on CPUs %v, as on separate machines: the floor is then what the API servers write on their own CPUs, and the join outlasts it by its start-up (until ready) plus what the real clusters' own processes spend beyond the floor's CPU-seconds (the API servers serving the controllers' watches, lists and reads), over their CPUs; the controllers' own CPU no longer takes from the API servers'. The phases after the joins ran on every CPU.\n", split.ControlPlanes, split.Rest)
	}
	return b.String()
}

// floorValues says how large the floor's values were: " (N bytes at N = ...)".
func (res results) floorValues() string {
	parts := res.eachRun(func(r runResult) string {
		if r.FloorValueBytes == 0 {
			return ""
		}
		return fmt.Sprintf("%d bytes at N = %d, %d samples, its watch carrying %d other changes", r.FloorValueBytes, r.N, r.FloorSamples, r.FloorCarried)
	})
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, "; ") + ")"
}

// keyFloorMarkdown sets the real clusters' change → slice p99 against the
// registry floor of before 2026-11-29's last session too (sizeRun.keyFloor),
// where the runs measured it.
func (res results) keyFloorMarkdown() string {
	parts := res.eachRun(func(r runResult) string {
		x := r.Real
		if x == nil || x.Samples == 0 || r.KeyFloorP99 == 0 {
			return ""
		}
		bound := 2*r.KeyFloorP99 + x.APIFloorP99
		return fmt.Sprintf("N = %d: %s against 2 × %s + %s = %s (%s)", r.N, ms(x.P99), ms(r.KeyFloorP99), ms(x.APIFloorP99), ms(bound), yes(x.P99 <= bound))
	})
	if len(parts) == 0 {
		return ""
	}
	return "\nThe registry floor of the target above is a put of a record's size, which etcd sends to every watcher of the clusterset, timed on a watch of the whole clusterset, reaching the registry as the members do (below the first table). Against the registry floor of before (a small key, one watcher, straight to etcd), change → slice p99 and the bound were: " + strings.Join(parts, "; ") + ".\n"
}

// eachRun is what part says of each run, where it says something.
func (res results) eachRun(part func(r runResult) string) []string {
	var parts []string
	for _, r := range res.Runs {
		if p := part(r); p != "" {
			parts = append(parts, p)
		}
	}
	return parts
}

// apiFloorSlices says, where the runs measured it, how large the API
// floor's slice was against the controller's: "; its slice, ...".
func (res results) apiFloorSlices() string {
	sizes := res.eachRun(func(r runResult) string {
		x := r.Real
		if x == nil || x.APIFloorSliceBytes == 0 {
			return ""
		}
		return fmt.Sprintf("%d bytes against the controller's %d at N = %d (%d samples, the shortest %s)",
			x.APIFloorSliceBytes, x.JoinObjectBytes["EndpointSlice"], r.N, x.APIFloorSamples, ms(x.APIFloorMin))
	})
	if len(sizes) == 0 {
		return ""
	}
	return "; its slice is the controller's size and shape (as many endpoints, each with its zone, as many labels and annotations, none that a controller acts on, and an owner), with addresses of its own in each cluster: " + strings.Join(sizes, ", ")
}

// cpuSplit is the joins' placement on the CPUs (config.SplitCPUs), or nil.
func (res results) cpuSplit() *cpuSplit {
	for _, r := range res.Runs {
		if r.Real != nil && r.Real.JoinCPUs != nil {
			return r.Real.JoinCPUs
		}
	}
	return nil
}

// joinPairsMarkdown lists every join of the run against its floor, when
// the real clusters joined more than once.
func (res results) joinPairsMarkdown() string {
	var b strings.Builder
	for _, r := range res.Runs {
		x := r.Real
		if x == nil || len(x.JoinPairs) < 2 {
			continue
		}
		switch {
		case b.Len() > 0:
		case x.JoinPairs[0].FloorAfter == 0: // a run of before the floors after
			fmt.Fprintf(&b, "\nThe real clusters joined %d times at each N, each join after a floor of its own (the controllers stopped and their imports deleted in between); the table shows the pair whose join took the median of the ratios. Every pair, in order, join / floor:\n\n", len(x.JoinPairs))
		default:
			fmt.Fprintf(&b, "\nThe real clusters joined %d times at each N, each join between two floors (the controllers stopped, and their imports deleted before the next join), and set against the floors' mean: the floors of a run often grew from pair to pair, and a join always came after its floor. Every floor is timed with the real clusters' imports deleted and their controllers stopped; after the last floor the controllers join once more, untimed, for the phases that follow. The table shows the join whose ratio was the median. Every join, in order, against the floors before and after it:\n\n", len(x.JoinPairs))
		}
		var parts []string
		for _, p := range x.JoinPairs {
			part := fmt.Sprintf("%s / %s (%s; %.2f ×", p.Join.Round(time.Millisecond), p.floor().Round(time.Millisecond), p.floors(), p.ratio())
			if p.Watching > 0 {
				part += fmt.Sprintf("; watching floor %s, %.2f ×", p.Watching.Round(time.Millisecond), p.watchingRatio())
			}
			parts = append(parts, part+")")
		}
		fmt.Fprintf(&b, "- N = %d: %s\n", r.N, strings.Join(parts, "; "))
		if w := x.watchingMedians(); w != "" {
			fmt.Fprintf(&b, "  - medians: watching floor / floor %s; join / watching floor %s\n", w, x.joinOverWatching())
			if len(x.JoinWatchingFloorProcessSeconds) > 0 {
				fmt.Fprintf(&b, "  - the median join's floor before → its watching floor, CPU-seconds by process: %s\n", processLine(x.JoinFloorProcessSeconds, x.JoinWatchingFloorProcessSeconds))
			}
		}
	}
	if res.anyWatching() {
		b.WriteString("\nA watching floor (`-watching-floor`) is timed after each join's floor before it (so nearer the floor before than the floor after), and set against the same mean of the floors before and after the join: the same writes, while a second watcher, a cache in the benchmark's process, watches each real cluster as the controller's cache does (the Services, EndpointSlices and ServiceImports of the whole cluster, with the controller's cache options), beside the benchmark's own watch that every floor and join has. Its excess over the floor is what the controller's watch of its own writes costs on this machine. It is not the target's floor; the join's ratio to it is what the controller costs beyond that watch: its start-up, registry read and reconciles. With it, each join comes one floor (and at least 31 s) later after the floor before it than without.\n")
	}
	return b.String()
}

// anyWatching reports whether a run listed in joinPairsMarkdown (of two
// joins or more) timed watching floors.
func (res results) anyWatching() bool {
	for _, r := range res.Runs {
		if r.Real != nil && len(r.Real.JoinPairs) >= 2 && slices.ContainsFunc(r.Real.JoinPairs, func(p joinPair) bool { return p.Watching > 0 }) {
			return true
		}
	}
	return false
}

// watchingMedians is the median, over the joins with a watching floor,
// of that floor over the join's floor (the mean of the floors before and
// after it: the watching floor is timed between them too); "" without
// any.
func (x *realResult) watchingMedians() string {
	return x.watchingMedian(func(p joinPair) float64 { return p.Watching.Seconds() / p.floor().Seconds() })
}

// joinOverWatching is the median, over the joins with a watching floor,
// of the join over that floor.
func (x *realResult) joinOverWatching() string { return x.watchingMedian(joinPair.watchingRatio) }

// watchingMedian is the median of ratio over the joins with a watching
// floor (medianRatio).
func (x *realResult) watchingMedian(ratio func(joinPair) float64) string {
	var r []float64
	for _, p := range x.JoinPairs {
		if p.Watching > 0 {
			r = append(r, ratio(p))
		}
	}
	return medianRatio(r)
}

// medianRatio is the median of r as "1.23 ×" (the upper middle of an
// even count), or "" for none.
func medianRatio(r []float64) string {
	if len(r) == 0 {
		return ""
	}
	slices.Sort(r)
	return fmt.Sprintf("%.2f ×", r[len(r)/2])
}

// joinProcessMarkdown is the table of the join's CPU-seconds by process,
// against its floor's, when the run measured them.
func (res results) joinProcessMarkdown() string {
	var b strings.Builder
	for _, r := range res.Runs {
		x := r.Real
		if x == nil || len(x.JoinProcessSeconds) == 0 {
			continue
		}
		split := x.JoinCPUs != nil
		if b.Len() == 0 {
			if split {
				b.WriteString("\nThe join's CPU-seconds by process, the floor's before it → its own (the controllers' from their start). The real clusters' own processes had CPUs of their own (below), which the floor keeps busy: the join stays within 1.1 × its floor only if their CPU-seconds stay within about 1.1 × the floor's, and the controllers' own CPU-seconds, on the other CPUs, count only where they keep those busy:\n\n")
				b.WriteString("| N | by process, floor → join | the real clusters' own processes | join − floor | of which the API servers | 10 % of the floor's |\n|---|---|---|---|---|---|\n")
			} else {
				b.WriteString("\nThe join's CPU-seconds by process, the floor's before it → its own (the controllers' from their start); where the floor keeps every CPU busy, the join stays within 1.1 × its floor only if its CPU-seconds stay within about 1.1 × the floor's:\n\n")
				b.WriteString("| N | by process, floor → join | every process | join − floor | of which the API servers | 10 % of the floor's |\n|---|---|---|---|---|---|\n")
			}
		}
		floor, join := total(x.JoinFloorProcessSeconds), total(x.JoinProcessSeconds)
		if split {
			floor, join = clustersOwn(x.JoinFloorProcessSeconds), clustersOwn(x.JoinProcessSeconds)
		}
		api := x.JoinProcessSeconds[apiServerProcess] - x.JoinFloorProcessSeconds[apiServerProcess]
		fmt.Fprintf(&b, "| %d | %s | %.2f → %.2f | %+.2f | %+.2f | %.2f |\n", r.N, processLine(x.JoinFloorProcessSeconds, x.JoinProcessSeconds), floor, join, join-floor, api, floor/10)
	}
	return b.String()
}

// clustersOwn is the CPU-seconds of the real clusters' own processes in
// secs (processSeconds): every kind but the registry's etcd, the
// controllers and the benchmark.
func clustersOwn(secs map[string]float64) float64 {
	var sum float64
	for k, v := range secs {
		if k != registryProcess && k != gateKind && k != controllersProcess && k != benchmarkProcess {
			sum += v
		}
	}
	return sum
}

// processLine lists each kind of process's CPU-seconds in floor and in
// join, the real clusters' programs first.
func processLine(floor, join map[string]float64) string {
	order := []string{apiServerProcess, "etcd", "kube-controller-manager", registryProcess, gateKind, controllersProcess, benchmarkProcess}
	rank := func(k string) int {
		if i := slices.Index(order, k); i >= 0 {
			return i
		}
		return len(order)
	}
	union := maps.Clone(join)
	maps.Copy(union, floor)
	kinds := slices.SortedFunc(maps.Keys(union), func(a, b string) int { return cmp.Or(cmp.Compare(rank(a), rank(b)), cmp.Compare(a, b)) })
	var parts []string
	for _, k := range kinds {
		if floor[k] < 0.005 && join[k] < 0.005 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.2f → %.2f", k, floor[k], join[k]))
	}
	return strings.Join(parts, "; ")
}

// cloudMapMarkdown is the report of a -registry cloudmap run.
func (res results) cloudMapMarkdown() string {
	var b strings.Builder
	c := res.Config
	fmt.Fprintf(&b, "# bench-scale: Cloud Map under N simulated clusters\n\n")
	fmt.Fprintf(&b, "%s. Each member is the Cloud Map backend as a controller opens it (default poll interval, sweep interval and TTL), on moto behind a counting proxy. %d Services, each exported by %s clusters with 3 endpoints; idle calls counted over %s (sweeps excluded); %d endpoint changes, 1 to 3 s apart. Started %s, took %s.\n\n",
		res.Machine, c.CloudMapServices, kString(c.K), c.CloudMapIdle, c.CloudMapChanges, res.Started.Format(time.RFC3339), res.Finished.Sub(res.Started).Round(time.Second))
	b.WriteString("| N | idle calls per member per minute | ≤ 60? | by operation | change → every other member p50 / p99 (deliveries) | p50 ≤ 3 s? |\n|---|---|---|---|---|---|\n")
	for _, r := range res.CloudMap {
		fmt.Fprintf(&b, "| %d | %.1f | %s | %s | %s / %s (%d) | %s |\n", r.N, r.IdlePerMemberPerMinute, yes(r.IdlePerMemberPerMinute <= 60),
			perOp(r.IdleByOperation), ms(r.P50), ms(r.P99), r.Deliveries, yes(r.P50 <= 3*time.Second))
	}
	return b.String()
}

// disruptionsMarkdown is the table of the registry's leader kill or
// compaction, when the run had one.
func (res results) disruptionsMarkdown() string {
	var b strings.Builder
	row := func(n int, what string, d *disruption) {
		if d == nil {
			return
		}
		fmt.Fprintf(&b, "| %d | %s | %s / %s / %s | %d | %s | %d / %d | %d / %s |\n", n, what, d.Written.Round(time.Millisecond), d.Median.Round(time.Millisecond), d.Took.Round(time.Millisecond), d.Rereads, report.Bytes(uint64(d.Received)), d.Deletions, d.Reports, d.RealDeletions, counts(d.RealWrites))
	}
	for _, r := range res.Runs {
		row(r.N, fmt.Sprintf("leader of %d members killed", res.Config.RegistryMembers), r.LeaderKill)
		row(r.N, "every client cut off, the registry compacted past their watches", r.Compaction)
	}
	if b.Len() == 0 {
		return ""
	}
	return "\n## Registry disruptions\n\n| N | what | from the registry back: the change written / half the members have it / every member has it | members that read the clusterset again | bytes they received | deletions / outage reports delivered | real clusters: deletions / writes |\n|---|---|---|---|---|---|---|\n" + b.String()
}

func yes(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}

// counts is a map of counts as "key n, key n".
func counts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func kString(k int) string {
	if k <= 0 {
		return "all"
	}
	return fmt.Sprint(k)
}

// plot draws, against N on log scales, the churn p99 and its floor (ms),
// the cold start (s) and the idle requests per member per minute.
func (res results) plot(path string) error {
	p := plot.New()
	p.Title.Text = "bench-scale: cost against clusterset size"
	p.X.Label.Text = "clusters (N)"
	p.Y.Label.Text = "ms, s, requests per member per minute (log)"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
	p.Add(plotter.NewGrid())
	lines := []struct {
		label string
		c     color.RGBA
		y     func(runResult) float64
	}{
		{"churn p99, put → every other member (ms)", color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}, func(r runResult) float64 { return ms64(r.P99) }},
		{"etcd's own put → watch p99 (ms)", color.RGBA{R: 0x99, G: 0x99, B: 0x99, A: 0xff}, func(r runResult) float64 { return ms64(r.FloorP99) }},
		{"cold start, every member has all (s)", color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, func(r runResult) float64 { return r.Converged.Seconds() }},
		{"idle requests per member per minute", color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, func(r runResult) float64 { return r.IdlePerMemberPerMinute }},
	}
	for _, l := range lines {
		var pts plotter.XYs
		for _, r := range res.Runs {
			if y := l.y(r); y > 0 {
				pts = append(pts, plotter.XY{X: float64(r.N), Y: y})
			}
		}
		if len(pts) == 0 {
			continue
		}
		line, points, err := plotter.NewLinePoints(pts)
		if err != nil {
			return err
		}
		line.Color, points.Color = l.c, l.c
		line.Width = vg.Points(1.5)
		p.Add(line, points)
		p.Legend.Add(l.label, line)
	}
	p.Legend.Top = true
	p.Legend.Left = true
	return p.Save(18*vg.Centimeter, 12*vg.Centimeter, path)
}

func ms64(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// churnOrder says how the members go through their exports in the churn.
func churnOrder(lockstep bool) string {
	if lockstep {
		return "every member through its exports in the same order from the same start"
	}
	return "each member through its exports from one picked at random, those the real clusters import spread evenly among the others"
}
