// Command scale is `make bench-scale`: the etcd registry under many
// clusters, simulated as members (members.go) in this process, against an
// etcd process (or three, -registry-members 3). For each
// clusterset size N it measures, each against the same run's floor: a cold
// start (every member publishes, until every member holds every record),
// endpoint churn at a fixed rate per member (put → delivered at every other
// member, against etcd's own put → watch latency measured beside it), the
// idle requests per member per minute, a registry restart (every watch
// ends; until every member has read the clusterset again, with no deletion
// delivered and no outage reported), with three members the leader killed,
// and a member leaving (until every other member sees it gone, after its
// TTL). Real testbed clusters running mcsd join the members (real.go,
// -real): their join, EndpointSlice writes, CPU and RSS, and what each phase
// costs them. -registry cloudmap runs Cloud Map members on moto instead
// (cloudmap.go): idle calls and change latency. The report goes to -out:
// results.json, report.md and scale.png.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/mcsd-io/mcsd/test/bench/harness"
)

type config struct {
	Ns        []int         `json:"clusters"`
	Services  int           `json:"services"`
	K         int           `json:"exportersPerService"`
	Endpoints int           `json:"endpointsPerExport"`
	Churn     time.Duration `json:"churnDuration"`
	ChurnRate float64       `json:"churnPerMemberPerSecond"`
	// ChurnLockstep makes every member change its exports in the same
	// order from the same start: at k = all, every member changes the same
	// Service in the same second. Otherwise each member starts at an
	// export of its own, at random, as independent clusters would.
	ChurnLockstep bool          `json:"churnLockstep,omitempty"`
	Idle          time.Duration `json:"idleDuration"`
	TTL           time.Duration `json:"ttl"`
	Views         int           `json:"membersWithAView"`
	Out           string        `json:"-"`
	Timeout       time.Duration `json:"timeout"`
	SkipRestart   bool          `json:"skipRestart"`
	SkipLeave     bool          `json:"skipLeave"`
	// Settle bounds the wait for a quiet machine before the real
	// clusters' join and its floor (harness.Settle).
	Settle time.Duration `json:"settle"`
	// ProfileJoin writes a CPU profile of each real controller from its
	// process's start to every import whole (join-<cluster>.pprof beside
	// its log; each join writes it again: the last join's is kept).
	ProfileJoin bool `json:"profileJoin,omitempty"`
	// JoinRepeats is how many times the real clusters join, each between
	// two floors (the controllers stopped and their imports deleted in
	// between; one more floor after the last join), set against their
	// mean; the figures are the join's with the median ratio.
	JoinRepeats int `json:"joinRepeats,omitempty"`
	// WatchingFloor times, after each join's floor, a watching floor:
	// the same writes while the benchmark's process watches each real
	// cluster as the controller does (realResult.JoinWatchingFloor).
	WatchingFloor bool `json:"watchingFloor,omitempty"`
	// SplitCPUs runs, through the joins and their floors, the real
	// clusters' own processes on one half of the machine's CPUs and the
	// rest of the run on the other (realResult.JoinCPUs), where the
	// machine has two CPUs or more.
	SplitCPUs bool `json:"splitCPUs,omitempty"`
	// ProfileCompaction writes a CPU profile of the benchmark's own
	// process (the simulated members) over the compaction phase
	// (cpu-compaction-N<n>.pprof in Out).
	ProfileCompaction bool `json:"profileCompaction,omitempty"`
	// Real testbed clusters running mcsd join the simulated members; they
	// have (and import) the first RealNamespaces of the 50 namespaces.
	Real           int `json:"realClusters"`
	RealNamespaces int `json:"realNamespaces"`
	// RegistryMembers is the etcd registry's members, each an etcd
	// process: with 1, the run compacts it past every watch; with more, it
	// kills the leader.
	RegistryMembers int `json:"registryMembers"`
	// Registry is "etcd" or "cloudmap" (Cloud Map members on moto).
	Registry         string        `json:"registry"`
	CloudMapServices int           `json:"cloudMapServices,omitempty"`
	CloudMapIdle     time.Duration `json:"cloudMapIdle,omitempty"`
	CloudMapChanges  int           `json:"cloudMapChanges,omitempty"`
}

func main() {
	// The real clusters' controllers are processes of this executable,
	// and so is the registry's gate.
	harness.MaybeRunController()
	maybeRunGate()
	ctrllog.SetLogger(logr.Discard())
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-scale:", err)
		os.Exit(1)
	}
}

func run() error {
	var cfg config
	ns := flag.String("n", "3,10,30,100", "clusterset sizes, comma-separated")
	flag.IntVar(&cfg.Services, "services", 1000, "exported Services")
	flag.IntVar(&cfg.K, "k", 3, "clusters that export each Service (0: all)")
	flag.IntVar(&cfg.Endpoints, "endpoints", 10, "endpoints of each export")
	flag.DurationVar(&cfg.Churn, "churn", 20*time.Second, "how long endpoints change")
	flag.Float64Var(&cfg.ChurnRate, "churn-rate", 1, "endpoint changes per member per second")
	flag.BoolVar(&cfg.ChurnLockstep, "churn-lockstep", false, "every member changes its exports in the same order from the same start (at k = all: the same Service in the same second)")
	flag.DurationVar(&cfg.Idle, "idle", 30*time.Second, "how long the idle requests are counted")
	flag.DurationVar(&cfg.TTL, "ttl", 10*time.Second, "members' lease TTL (the leave phase waits for it)")
	flag.IntVar(&cfg.Views, "views", 10, "members that feed a real clusterset.View (the others decode and count)")
	flag.DurationVar(&cfg.Timeout, "timeout", 5*time.Minute, "bound on each wait")
	flag.BoolVar(&cfg.SkipRestart, "skip-restart", false, "leave out the registry restart")
	flag.BoolVar(&cfg.SkipLeave, "skip-leave", false, "leave out the member leaving")
	flag.DurationVar(&cfg.Settle, "settle", 30*time.Second, "bound on the wait for a quiet machine before the join and its floor")
	flag.BoolVar(&cfg.ProfileJoin, "profile-join", false, "write CPU profiles of the real controllers during the join, beside their logs (of the last join)")
	flag.IntVar(&cfg.JoinRepeats, "join-repeats", 3, "how many times the real clusters join, each between two floors (set against their mean); the figures are the median join's")
	flag.BoolVar(&cfg.WatchingFloor, "watching-floor", false, "also time before each join a watching floor: the floor's writes while this process watches each real cluster as the controller does (what watching its own writes costs a join)")
	flag.BoolVar(&cfg.SplitCPUs, "split-cpus", true, "through the joins and their floors, run the real clusters' control planes (API servers, their etcds, ...) on one half of the machine's CPUs, and the controllers, the registry and this process on the other, as on separate machines (on a machine of one CPU, or with -split-cpus=false, every process runs on every CPU)")
	flag.BoolVar(&cfg.ProfileCompaction, "profile-compaction", false, "write a CPU profile of this process (the simulated members) over the compaction phase")
	flag.IntVar(&cfg.Real, "real", 2, "real testbed clusters running mcsd among the members (0: registry only)")
	flag.IntVar(&cfg.RealNamespaces, "real-namespaces", 4, "namespaces (of 50) the real clusters have and import")
	flag.IntVar(&cfg.RegistryMembers, "registry-members", 1, "etcd members, each a process: 1 (the run compacts it past every watch), or 3 (the run kills the leader)")
	flag.StringVar(&cfg.Registry, "registry", "etcd", "etcd, or cloudmap: Cloud Map members on moto (idle calls and change latency only)")
	flag.IntVar(&cfg.CloudMapServices, "cloudmap-services", 20, "with -registry cloudmap: exported Services")
	flag.DurationVar(&cfg.CloudMapIdle, "cloudmap-idle", 2*time.Minute, "with -registry cloudmap: how long idle calls are counted")
	flag.IntVar(&cfg.CloudMapChanges, "cloudmap-changes", 15, "with -registry cloudmap: endpoint changes timed, one every 1 to 3 s")
	flag.StringVar(&cfg.Out, "out", filepath.Join("results", "scale-"+time.Now().UTC().Format("20060102-150405")), "results folder")
	render := flag.String("render", "", "write report.md and scale.png of an earlier run's folder again, from its results.json")
	flag.Parse()
	if *render != "" {
		return rerender(*render)
	}
	if cfg.Registry != "etcd" && cfg.Registry != "cloudmap" {
		return fmt.Errorf("-registry must be etcd or cloudmap, not %q", cfg.Registry)
	}
	if cfg.JoinRepeats < 1 {
		return fmt.Errorf("-join-repeats must be 1 or more, not %d", cfg.JoinRepeats)
	}
	if cfg.Real < 0 || cfg.RealNamespaces < 1 || cfg.RealNamespaces > namespaces {
		return fmt.Errorf("-real must be 0 or more and -real-namespaces 1 to %d", namespaces)
	}
	for _, f := range strings.Split(*ns, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 2 {
			return fmt.Errorf("-n: %q is not a clusterset size of 2 or more", f)
		}
		cfg.Ns = append(cfg.Ns, n)
	}
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return err
	}
	res := results{Config: cfg, Machine: harness.MachineInfo(), Started: time.Now().UTC()}
	for _, n := range cfg.Ns {
		if cfg.Registry == "cloudmap" {
			fmt.Fprintf(os.Stderr, "[scale] cloudmap N=%d: %d services, each from %d clusters\n", n, cfg.CloudMapServices, exporters(cfg.K, n))
			r, err := runCloudMap(context.Background(), cfg, n)
			if err != nil {
				return fmt.Errorf("cloud map clusterset of %d: %w", n, err)
			}
			res.CloudMap = append(res.CloudMap, r)
			fmt.Fprintln(os.Stderr, r.line())
			continue
		}
		fmt.Fprintf(os.Stderr, "[scale] N=%d: %d services, each from %d clusters, %d endpoints each\n", n, cfg.Services, exporters(cfg.K, n), cfg.Endpoints)
		r, err := runOne(context.Background(), cfg, n)
		if err != nil {
			return fmt.Errorf("clusterset of %d: %w", n, err)
		}
		res.Runs = append(res.Runs, r)
		fmt.Fprintln(os.Stderr, r.line())
		runtime.GC()
	}
	res.Finished = time.Now().UTC()
	data, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(cfg.Out, "results.json"), data, 0o644); err != nil {
		return err
	}
	return res.write(cfg.Out)
}

// write writes the report and the plot into dir.
func (res results) write(dir string) error {
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte(res.markdown()), 0o644); err != nil {
		return err
	}
	if len(res.Runs) > 0 {
		if err := res.plot(filepath.Join(dir, "scale.png")); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "[scale] report: %s\n", filepath.Join(dir, "report.md"))
	return nil
}

// rerender writes the report of dir's results.json again.
func rerender(dir string) error {
	data, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		return err
	}
	var res results
	if err := json.Unmarshal(data, &res); err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	return res.write(dir)
}

func exporters(k, n int) int {
	if k <= 0 || k > n {
		return n
	}
	return k
}

// percentile is the p-th percentile (0–100) of d, sorted in place.
func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	i := int(float64(len(d)-1) * p / 100)
	return d[i]
}
