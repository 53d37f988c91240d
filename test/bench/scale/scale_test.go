package main

import (
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/test/bench/harness"
)

func TestMain(m *testing.M) {
	// The real clusters' controllers are processes of this test binary,
	// and so is the registry's gate.
	harness.MaybeRunController()
	maybeRunGate()
	os.Exit(m.Run())
}

// A small run, so that bench-scale keeps working: the phases end, a
// restart of etcd delivers no deletion and reports no outage, a compaction
// past every watch has every member read the clusterset again and deletes
// nothing, the leaver's
// records (and only they) are deleted at every other member, and the idle
// cost does not grow with the clusterset.
func TestSmallRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and a testbed cluster and runs for about four minutes; skipped with -short")
	}
	// The idle window spans three health checks (every 5 s): in a window of
	// 6 s a member's count moved by a check with where the window fell (60
	// against 80 requests per member per minute in one run), beyond the
	// comparison below. The churn changes each member's exports in turn:
	// at N = 6, where the real cluster is, 16 changes of its 10, so every
	// export, those the real cluster imports included (4 s, 8 changes,
	// missed them in one run).
	cpus, err := harness.ProcessCPUs(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	_, _, splitErr := harness.SplitCPUs()
	// Once the joins are over, the real cluster's own processes and its
	// controller run on every CPU again, as this process does.
	looked := 0
	afterJoins = func(r *sizeRun) {
		for _, pid := range append(r.clusterPids(), r.controllerPids()...) {
			got, err := harness.ProcessCPUs(pid)
			if err != nil || !slices.Equal(got, cpus) {
				t.Errorf("after the joins, process %d runs on CPUs %v (%v); want every CPU, %v", pid, got, err, cpus)
			}
			looked++
		}
	}
	t.Cleanup(func() { afterJoins = nil })
	cfg := config{Services: 30, K: 2, Endpoints: 3, Churn: 8 * time.Second, ChurnRate: 2, Idle: 15 * time.Second,
		TTL: 3 * time.Second, Views: 2, Timeout: time.Minute}
	var idle []float64
	for _, n := range []int{2, 6} {
		if n == 6 {
			// A real cluster running mcsd among the members, importing two
			// namespaces.
			cfg.Real, cfg.RealNamespaces = 1, 2
			// Twice: the controllers stopped and their imports deleted
			// between the joins. Each join with a watching floor too.
			cfg.JoinRepeats, cfg.WatchingFloor = 2, true
			// The joins' processes on two halves of the CPUs, as
			// make bench-scale runs them, and back on every CPU after.
			cfg.SplitCPUs = true
		}
		r, err := runOne(t.Context(), cfg, n)
		if err != nil {
			t.Fatalf("N=%d: %v", n, err)
		}
		t.Log(r.line())
		if r.Records != cfg.Services*cfg.K || r.Changes == 0 || r.Deliveries < r.Changes*(n-1) {
			t.Errorf("N=%d: %d records, %d changes, %d deliveries; want %d records and every change delivered to the %d others",
				n, r.Records, r.Changes, r.Deliveries, cfg.Services*cfg.K, n-1)
		}
		// The registry floor: a put of an endpoint record's size (3
		// endpoints here) every 200 ms of the 8 s churn, on a watch that
		// carries every change of the churn, and the floor of before
		// beside it.
		if r.FloorSamples < 20 || r.FloorValueBytes < 200 || r.FloorP99 <= 0 || r.KeyFloorP99 <= 0 || r.FloorCarried < r.Changes/2 {
			t.Errorf("N=%d: the registry floor: %d samples of %d bytes, p99 %s, its watch carrying %d other changes of the churn's %d, the key floor's p99 %s; want at least 20 of an endpoint record's size, on a watch of the changes (those begun as it began or ended aside), both measured",
				n, r.FloorSamples, r.FloorValueBytes, r.FloorP99, r.FloorCarried, r.Changes, r.KeyFloorP99)
		}
		if r.RestartDeletions != 0 || r.RestartReports != 0 {
			t.Errorf("N=%d: the restart delivered %d deletions and %d outage reports, want none", n, r.RestartDeletions, r.RestartReports)
		}
		if c := r.Compaction; c == nil || c.Rereads != n || c.Deletions != 0 || c.RealDeletions != 0 {
			t.Errorf("N=%d: the compaction: %+v; want every member to read again, no deletion", n, c)
		}
		if r.LeaveDeletions != 2*r.LeaverRecords {
			t.Errorf("N=%d: a member's leaving deleted %d records at another, want its %d exports and endpoints", n, r.LeaveDeletions, 2*r.LeaverRecords)
		}
		idle = append(idle, r.IdlePerMemberPerMinute)
		if x := r.Real; x != nil {
			checkReal(t, x)
			if (x.JoinCPUs == nil) != (splitErr != nil) {
				t.Errorf("real cluster: the joins' CPUs %+v, where the CPUs split with error %v; want them split on a machine of two CPUs or more", x.JoinCPUs, splitErr)
			}
			if got, err := harness.ProcessCPUs(os.Getpid()); err != nil || !slices.Equal(got, cpus) {
				t.Errorf("after the joins, this process runs on CPUs %v (%v); want every CPU it had, %v", got, err, cpus)
			}
			// The API server, its etcd, kube-controller-manager, ... and
			// the controller.
			if looked < 4 {
				t.Errorf("after the joins, %d processes of the real cluster were looked at; want its own and its controller's", looked)
			}
		}
	}
	// The same within where the window fell: one health check more or less
	// in 15 s moves a member's count by up to a third (58 against 75
	// requests per member per minute in one run of the same code). A cost
	// that grew with the members would triple it from N = 2 to N = 6.
	if idle[0] == 0 || idle[1] > idle[0]*1.5 {
		t.Errorf("idle requests per member per minute: %v at N=2 and N=6; want the same", idle)
	}
}

// checkReal checks the real cluster's figures: it joined, each endpoint
// change cost it one EndpointSlice write, the registry restart deleted
// nothing, and the leaver cost it its EndpointSlices' deletions and the
// statuses, nothing else.
func checkReal(t *testing.T, x *realResult) {
	t.Helper()
	if x.Imports == 0 || x.Join == 0 {
		t.Errorf("real cluster: %d imports, joined in %s; want imports, whole", x.Imports, x.Join)
	}
	if len(x.JoinPairs) != 2 || !slices.ContainsFunc(x.JoinPairs, func(p joinPair) bool { return p.Join == x.Join && p.Floor == x.JoinFloor }) {
		t.Errorf("real cluster: joins %+v; want 2, the figures one of them", x.JoinPairs)
	}
	// Ready is when the harness's looks at the controllers' readiness, one
	// controller after the other every 50 ms, saw it: a small run's
	// imports may be whole a little before. Each join is set against the
	// floors before and after it: the next join's, and one after the last.
	for i, p := range x.JoinPairs {
		if p.Join <= 0 || p.Floor <= 0 || p.FloorAfter <= 0 || p.Ready <= 0 || p.Ready > p.Join+time.Second {
			t.Errorf("real cluster: join %+v; want each timed, with the floors before and after it", p)
		}
		if p.Watching <= 0 {
			t.Errorf("real cluster: join %+v; want a watching floor timed before it", p)
		}
		if i+1 < len(x.JoinPairs) && p.FloorAfter != x.JoinPairs[i+1].Floor {
			t.Errorf("real cluster: join %d's floor after %s, the next join's floor %s; want the same", i, p.FloorAfter, x.JoinPairs[i+1].Floor)
		}
	}
	// The watching floor's caches saw the floor's writes; its CPU is
	// measured as the floor's.
	if want := x.Imports * x.Clusters; x.JoinWatchingFloorHeld != want {
		t.Errorf("real cluster: the watching floor's caches held %d of the floor's ServiceImports, want all %d", x.JoinWatchingFloorHeld, want)
	}
	if x.JoinWatchingFloorProcessSeconds[apiServerProcess] <= 0 {
		t.Errorf("real cluster: the watching floor's CPU-seconds by process %v; want the API servers' measured", x.JoinWatchingFloorProcessSeconds)
	}
	// The busy CPUs once ready are measured over what the join took after
	// it: a small run's imports may all be whole within a tick of the
	// machine's CPU times (10 ms) after ready, or before ready was seen.
	if x.JoinFloorMachine <= 0 || (x.JoinMachine <= 0 && x.Join-x.JoinReady > 100*time.Millisecond) {
		t.Errorf("real cluster: the machine's busy CPUs during the join's floor %.2f and its join %.2f; want both measured", x.JoinFloorMachine, x.JoinMachine)
	}
	if x.JoinMachineSeconds <= 0 || x.JoinControllerSeconds <= 0 || x.JoinFloorHarnessSeconds <= 0 {
		t.Errorf("real cluster: CPU-seconds of the join's machine %.2f and controllers %.2f, of the floor's benchmark %.2f; want all measured",
			x.JoinMachineSeconds, x.JoinControllerSeconds, x.JoinFloorHarnessSeconds)
	}
	// A short phase may cost the other processes less than the tick of
	// their CPU times; the API servers take each write.
	if x.JoinFloorProcessSeconds[apiServerProcess] <= 0 || x.JoinProcessSeconds[apiServerProcess] <= 0 {
		t.Errorf("real cluster: the API servers' CPU-seconds %.2f in the join's floor, %.2f in the join; want both measured",
			x.JoinFloorProcessSeconds[apiServerProcess], x.JoinProcessSeconds[apiServerProcess])
	}
	if x.JoinProcessSeconds[controllersProcess] <= 0 || x.JoinFloorProcessSeconds[controllersProcess] != 0 {
		t.Errorf("real cluster: the controllers' CPU-seconds %.2f in the join, %.2f in its floor; want some, and none before they started",
			x.JoinProcessSeconds[controllersProcess], x.JoinFloorProcessSeconds[controllersProcess])
	}
	for kind, n := range x.JoinObjectBytes {
		if f := x.JoinFloorObjectBytes[kind]; f < n*3/4 || f > n*5/4 {
			t.Errorf("real cluster: the floor's %ss are %d bytes, the controller's %d; want the same size within a quarter", kind, f, n)
		}
	}
	if len(x.JoinObjectBytes) != 3 {
		t.Errorf("real cluster: object sizes %v; want those of ServiceImports, Services and EndpointSlices", x.JoinObjectBytes)
	}
	// The API floor writes a slice the size of the controller's, and no
	// arrival is timed from before its write (one real cluster here: the
	// addresses of two are TestAPIFloorAddressesAreEachClustersOwn's).
	if c := x.JoinObjectBytes["EndpointSlice"]; x.APIFloorSliceBytes < c*3/4 || x.APIFloorSliceBytes > c*5/4 {
		t.Errorf("real cluster: the API floor's EndpointSlice is %d bytes, the controller's %d; want the same size within a quarter", x.APIFloorSliceBytes, c)
	}
	if x.APIFloorSamples == 0 || x.APIFloorMin <= 0 {
		t.Errorf("real cluster: the API floor's %d samples, the shortest %s; want samples, each after its write began", x.APIFloorSamples, x.APIFloorMin)
	}
	if x.Changes == 0 || x.SliceWritesPerChange != 1 {
		t.Errorf("real cluster: %d changes cost %.2f EndpointSlice writes each, want changes and 1", x.Changes, x.SliceWritesPerChange)
	}
	if x.RestartDeletions != 0 {
		t.Errorf("real cluster: the registry restart deleted %d objects, want none", x.RestartDeletions)
	}
	if x.LeaverSlices == 0 || x.LeaveOtherDeletions != 0 || x.LeaveWrites["endpointslices"] != x.LeaverSlices {
		t.Errorf("real cluster: the leaver's %d EndpointSlices cost writes %v and %d other deletions; want one write each and none",
			x.LeaverSlices, x.LeaveWrites, x.LeaveOtherDeletions)
	}
}

// medianJoin takes the pair with the median ratio of join to floor, not
// of either alone, and keeps every pair in order.
func TestMedianJoin(t *testing.T) {
	pair := func(floor, join time.Duration) realResult {
		return realResult{JoinFloor: floor, Join: join, JoinReady: join / 10, Imports: int(join / time.Millisecond)}
	}
	bracketed := func(before, after, join time.Duration) realResult {
		x := pair(before, join)
		x.JoinFloorAfter = after
		return x
	}
	for _, tc := range []struct {
		name  string
		pairs []realResult
		want  time.Duration // the Join of the pair taken
	}{
		{"one", []realResult{pair(4*time.Second, 5*time.Second)}, 5 * time.Second},
		// Ratios 1.25, 0.90, 1.10: the median is 1.10, though its join is
		// neither the shortest nor the median join.
		{"three", []realResult{pair(4*time.Second, 5*time.Second), pair(5*time.Second, 4500*time.Millisecond), pair(3*time.Second, 3300*time.Millisecond)}, 3300 * time.Millisecond},
		// Ratios 1.2, 1.0, 1.3, 1.1: the upper middle, 1.2.
		{"four", []realResult{pair(time.Second, 1200*time.Millisecond), pair(time.Second, time.Second), pair(time.Second, 1300*time.Millisecond), pair(time.Second, 1100*time.Millisecond)}, 1200 * time.Millisecond},
		// Against the floors' means (4.5, 4 and 4 s): ratios 1.0, 1.2 and
		// 1.1, the median the third join's; against the floors before
		// alone (3, 4 and 4 s: 1.5, 1.2 and 1.1), it would be the second's.
		{"bracketed", []realResult{bracketed(3*time.Second, 6*time.Second, 4500*time.Millisecond), bracketed(4*time.Second, 4*time.Second, 4800*time.Millisecond), bracketed(4*time.Second, 4*time.Second, 4400*time.Millisecond)}, 4400 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := medianJoin(tc.pairs)
			if got.Join != tc.want || got.Imports != int(tc.want/time.Millisecond) {
				t.Errorf("took the pair with join %s (imports %d), want %s", got.Join, got.Imports, tc.want)
			}
			if len(got.JoinPairs) != len(tc.pairs) {
				t.Fatalf("%d pairs kept, want %d", len(got.JoinPairs), len(tc.pairs))
			}
			for i, p := range tc.pairs {
				if w := p.pair(); got.JoinPairs[i] != w {
					t.Errorf("pair %d: %+v, want %+v", i, got.JoinPairs[i], w)
				}
			}
		})
	}
}

// The pairs' list gives each join's watching floor and the medians of the
// watching floors over the joins' floors (the means of the floors before
// and after) and of the joins over their watching floors, and explains
// them; a run without watching floors says nothing of them.
func TestJoinPairsMarkdownWatching(t *testing.T) {
	pair := func(before, after, watching, join time.Duration) joinPair {
		return joinPair{Floor: before, FloorAfter: after, Watching: watching, Join: join, Ready: join / 10}
	}
	x := &realResult{
		JoinFloorProcessSeconds:         map[string]float64{apiServerProcess: 4.5, benchmarkProcess: 1},
		JoinWatchingFloorProcessSeconds: map[string]float64{apiServerProcess: 5, benchmarkProcess: 1.25},
		JoinPairs: []joinPair{
			// Watching over the mean floor 1.05, 1.20, 1.00, 1.10 (over the
			// floor before alone: 1.40, 1.20, 0.80, 1.10); join / watching
			// 1.10, 1.00, 1.30, 1.20. Of an even count, the upper middle.
			pair(3*time.Second, 5*time.Second, 4200*time.Millisecond, 4620*time.Millisecond),
			pair(4*time.Second, 4*time.Second, 4800*time.Millisecond, 4800*time.Millisecond),
			pair(5*time.Second, 3*time.Second, 4*time.Second, 5200*time.Millisecond),
			pair(4*time.Second, 4*time.Second, 4400*time.Millisecond, 5280*time.Millisecond),
		}}
	md := results{Runs: []runResult{{N: 3, Real: x}}}.joinPairsMarkdown()
	for _, want := range []string{
		"watching floor 4.2s, 1.10 ×", "watching floor 4.8s, 1.00 ×", "watching floor 4s, 1.30 ×", "watching floor 4.4s, 1.20 ×",
		"medians: watching floor / floor 1.10 ×; join / watching floor 1.20 ×",
		"CPU-seconds by process: kube-apiserver 4.50 → 5.00; benchmark 1.00 → 1.25",
		"A watching floor (`-watching-floor`)",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the pairs' list lacks %q:\n%s", want, md)
		}
	}
	for i := range x.JoinPairs {
		x.JoinPairs[i].Watching = 0
	}
	if md := (results{Runs: []runResult{{N: 3, Real: x}}}).joinPairsMarkdown(); strings.Contains(md, "watching") {
		t.Errorf("a run without watching floors speaks of them:\n%s", md)
	}
	// One join is not listed: nor is its watching floor explained.
	one := &realResult{JoinPairs: []joinPair{pair(4*time.Second, 4*time.Second, 4400*time.Millisecond, 5280*time.Millisecond)}}
	if md := (results{Runs: []runResult{{N: 3, Real: one}}}).joinPairsMarkdown(); md != "" {
		t.Errorf("a run of one join lists it:\n%s", md)
	}
}

// With the joins' processes on two halves of the CPUs, the CPU-seconds
// against the target's 10 % are the real clusters' own processes', not the
// controllers' on the other CPUs; the report says where each ran.
func TestJoinProcessMarkdownSplit(t *testing.T) {
	x := &realResult{
		JoinFloorProcessSeconds: map[string]float64{apiServerProcess: 5, "etcd": 1, benchmarkProcess: 1},
		JoinProcessSeconds:      map[string]float64{apiServerProcess: 5.25, "etcd": 1.25, controllersProcess: 1.5, registryProcess: 0.25, benchmarkProcess: 0.25},
	}
	res := results{Runs: []runResult{{N: 3, Real: x}}}
	// Every process: 7.00 → 8.50, +1.50, against 0.70.
	if md := res.joinProcessMarkdown(); !strings.Contains(md, "| 7.00 → 8.50 | +1.50 | +0.25 | 0.70 |") || strings.Contains(md, "CPUs of their own") {
		t.Errorf("on every CPU, the table is not of every process:\n%s", md)
	}
	if md := res.realMarkdown(); strings.Contains(md, "-split-cpus") || !strings.Contains(md, "Where the floor keeps every CPU of the machine busy") {
		t.Errorf("on every CPU, the report speaks of the split, or not of every CPU:\n%s", md)
	}
	x.JoinCPUs = &cpuSplit{ControlPlanes: harness.CPUs{0}, Rest: harness.CPUs{1}}
	// The real clusters' own: 6.00 → 6.50, +0.50, against 0.60.
	if md := res.joinProcessMarkdown(); !strings.Contains(md, "| 6.00 → 6.50 | +0.50 | +0.25 | 0.60 |") || !strings.Contains(md, "CPUs of their own") {
		t.Errorf("split, the table is not of the real clusters' own processes:\n%s", md)
	}
	if md := res.realMarkdown(); !strings.Contains(md, "ran on CPUs [0] alone, and the rest of the run") || !strings.Contains(md, "on CPUs [1]") ||
		strings.Contains(md, "Where the floor keeps every CPU of the machine busy") {
		t.Errorf("split, the report does not say where the processes ran:\n%s", md)
	}
	// No change timed in the real clusters: the churn's target is not
	// said to be met.
	if md := res.realMarkdown(); !strings.Contains(md, "| no samples |") {
		t.Errorf("no change timed, the report does not say so:\n%s", md)
	}
	x.Samples, x.P99, x.APIFloorP99 = 10, 5*time.Millisecond, 10*time.Millisecond
	if md := res.realMarkdown(); strings.Contains(md, "no samples") || !strings.Contains(md, "(10) | 0 / 10 ms | yes (2 × 0 + 10 ms) |") {
		t.Errorf("ten changes within the bound, the report does not say yes:\n%s", md)
	}
	// Against the registry floor, and against the key floor of before.
	res.Runs[0].FloorP99, res.Runs[0].KeyFloorP99, x.P99 = 4*time.Millisecond, time.Millisecond, 15*time.Millisecond
	if md := res.realMarkdown(); !strings.Contains(md, "| yes (2 × 4.0 ms + 10 ms) |") || !strings.Contains(md, "N = 3: 15 ms against 2 × 1.0 ms + 10 ms = 12 ms (**no**)") {
		t.Errorf("15 ms against 2 × 4 + 10 and 2 × 1 + 10, the report does not say yes, then no:\n%s", md)
	}
	// The API floor's slice against the controller's, where measured.
	if md := res.realMarkdown(); strings.Contains(md, "its slice is the controller's size") {
		t.Errorf("the API floor's slice not measured, the report gives its size:\n%s", md)
	}
	x.APIFloorSliceBytes, x.JoinObjectBytes = 2480, map[string]int{"EndpointSlice": 2494}
	x.APIFloorSamples, x.APIFloorMin = 196, 2500*time.Microsecond
	if md := res.realMarkdown(); !strings.Contains(md, "2480 bytes against the controller's 2494 at N = 3 (196 samples, the shortest 2.5 ms)") {
		t.Errorf("the report does not give the API floor's slice against the controller's:\n%s", md)
	}
}

// Each real cluster's API floor writes addresses of its own: an arrival is
// timed from the last put of its address, and the clusters' writes drift
// apart, so an address both wrote would time one cluster's arrival from
// the other's write.
func TestAPIFloorAddressesAreEachClustersOwn(t *testing.T) {
	// The default two clusters, for 31,250 writes each (about 104 min of
	// churn); three, for 2,000.
	for _, tc := range []struct{ clusters, writes int }{{2, 31250}, {3, 2000}} {
		seen := map[string]int{}
		for ci := range tc.clusters {
			for i := range tc.writes {
				a := apiFloorAddress(ci, tc.clusters, i)
				if other, ok := seen[a]; ok {
					t.Fatalf("%d clusters: address %s of cluster %d's write %d was cluster %d's too", tc.clusters, a, ci, i, other)
				}
				if !strings.HasPrefix(a, apiFloorPrefix) || net.ParseIP(a) == nil {
					t.Fatalf("address %q, want an IP under %s", a, apiFloorPrefix)
				}
				seen[a] = ci
			}
		}
	}
}

// TestChurnWalkSpreadsRealExports: in the default run (5,000 Services from
// 3 members each, the real clusters' 2 namespaces of 50), every member's
// churn walk is a permutation of its exports, and every stretch of it
// changes the real clusters' exports at their share, give or take one: a
// churn of 20 changes from a random start in the exports' own order
// missed them at N = 3 in about one run in five.
func TestChurnWalkSpreadsRealExports(t *testing.T) {
	isReal := func(key registry.ServiceKey) bool {
		return key.Namespace == namespace(0) || key.Namespace == namespace(1)
	}
	for _, n := range []int{3, 10, 30, 100} {
		members := 0
		for m, keys := range exportsOf(5000, 3, n) {
			walk := churnWalk(keys, isReal)
			if got := slices.Sorted(slices.Values(walk)); len(got) != len(keys) || got[0] != 0 || got[len(got)-1] != len(keys)-1 || len(slices.Compact(got)) != len(keys) {
				t.Fatalf("N = %d, member %d: the walk is not a permutation of its %d exports", n, m, len(keys))
			}
			in := 0
			for _, key := range keys {
				if isReal(key) {
					in++
				}
			}
			if in == 0 {
				continue // as at N = 10, a member whose turns miss them
			}
			members++
			for _, w := range []int{20, (len(keys) + in - 1) / in} {
				for start := range walk {
					got := 0
					for p := range w {
						if isReal(keys[walk[(start+p)%len(walk)]]) {
							got++
						}
					}
					share := float64(w*in) / float64(len(keys))
					if float64(got) < share-1 || float64(got) > share+1 || (w*in >= len(keys) && got == 0) {
						t.Fatalf("N = %d, member %d: %d changes from %d change %d real exports, want %.1f (±1, at least one)", n, m, w, start, got, share)
					}
				}
			}
		}
		if members == 0 {
			t.Errorf("N = %d: no member exports in the real clusters' namespaces", n)
		}
	}
}
