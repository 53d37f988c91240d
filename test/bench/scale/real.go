package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/controller/imports"
	"github.com/mcsd-io/mcsd/internal/manager"
	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/test/bench/harness"
	"github.com/mcsd-io/mcsd/test/testbed"
)

// Real clusters among the simulated members: testbed clusters (a real API
// server, its etcd and kube-controller-manager; no data plane) each running
// mcsd as the benchmark runs it, on the same registry as the members. They
// import the Services of the first RealNamespaces namespaces (the only
// ones they have), while their controllers watch, and hold, the whole
// clusterset. Their figures: the join (a controller started after the
// clusterset is up, until every import is whole, against the API write
// floor of the same objects), endpoint changes reaching their
// EndpointSlices (against the registry floor plus an API write → watch
// floor), the API writes each change costs, the controllers' CPU and peak
// RSS, what a registry restart and a member leaving cost them.

// realResult is the real clusters' figures for one clusterset size.
type realResult struct {
	Clusters int `json:"clusters"`
	// Imports is how many imports each real cluster has (each from K
	// clusters): Objects is the objects they are (a ServiceImport, a
	// derived Service and an EndpointSlice per source cluster each).
	Imports int `json:"imports"`
	Objects int `json:"objects"`

	// JoinFloor is how long the harness took to write the same objects
	// itself, in every real cluster at once with the controller's
	// concurrency; Join, the controllers started until every real cluster
	// had every import whole (the last object's arrival as wanted on the
	// benchmark's watch); JoinReady, until they were ready (the
	// process started, the registry read, caches synced, leadership taken).
	JoinFloor time.Duration `json:"joinFloor"`
	Join      time.Duration `json:"join"`
	JoinReady time.Duration `json:"joinReady"`
	// JoinFloorAfter is the floor timed after the join (the next join's,
	// or one of its own after the last join); the join's target is the
	// mean of the floors before and after it (joinPair.floor). Zero in
	// results of before 2026-11-29's last session.
	JoinFloorAfter time.Duration `json:"joinFloorAfter,omitempty"`
	// JoinWatchingFloor (config.WatchingFloor) is a floor timed after
	// JoinFloor, whose writes are the same while a second watcher, a
	// cache of the benchmark's process, watches each real cluster as the
	// controller's cache does: what the controller's watch of its own
	// writes adds to a join on this machine. It is not the target's
	// floor.
	JoinWatchingFloor time.Duration `json:"joinWatchingFloor,omitempty"`
	// JoinWatchingFloorHeld is how many of the floor's ServiceImports the
	// watching floor's caches held at its end, over the real clusters:
	// every one, once the watch saw the floor's writes.
	JoinWatchingFloorHeld int `json:"joinWatchingFloorHeld,omitempty"`
	// JoinWatchingFloorProcessSeconds are the watching floor's
	// CPU-seconds by kind of process (processSeconds; the second watcher
	// is the benchmark's).
	JoinWatchingFloorProcessSeconds map[string]float64 `json:"joinWatchingFloorProcessSeconds,omitempty"`
	// JoinPairs are every join of the run (config.JoinRepeats) with the
	// floors before and after it, in order; the figures of this result
	// are the join's that took the median of their ratios to their floors.
	JoinPairs []joinPair `json:"joinPairs,omitempty"`
	// JoinCPUs (config.SplitCPUs) are the CPUs the real clusters' own
	// processes ran on through the joins and their floors, and those of
	// the rest of the run (the controllers, the registry, the benchmark
	// with the simulated members): empty when every process could run on
	// every CPU.
	JoinCPUs *cpuSplit `json:"joinCPUs,omitempty"`
	// JoinWrites are the real controllers' API writes until every import
	// was whole, by resource; JoinReconciles, their import reconciles.
	JoinWrites        map[string]int `json:"joinWrites,omitempty"`
	JoinReconciles    float64        `json:"joinReconciles"`
	JoinReconcileTime float64        `json:"joinReconcileSeconds"`
	// JoinCPU is the real controllers' CPU from ready to every import
	// whole, summed, in cores of that time: what the controllers took from
	// the machine the floor had to itself.
	JoinCPU float64 `json:"joinCores"`
	// JoinFloorMachine and JoinMachine are the machine's busy CPUs, in
	// cores, while the floor wrote and from ready to every import whole:
	// where the floor already keeps every CPU busy, the controllers' CPU
	// lengthens the join as much.
	JoinFloorMachine float64 `json:"joinFloorMachineCores"`
	JoinMachine      float64 `json:"joinMachineCores"`
	// The join's CPU in CPU-seconds, from the controllers' start to every
	// import whole: the machine's (JoinMachineSeconds), the controllers'
	// (JoinControllerSeconds, start-up included) and the benchmark
	// process's (JoinHarnessSeconds: its watches of the real clusters and
	// the simulated members); and during the floor, the machine's and the
	// benchmark's, whose writes are the floor's client. Where both keep
	// every CPU busy, the join outlasts its floor by what its CPU-seconds
	// exceed the floor's, over the machine's CPUs.
	JoinMachineSeconds      float64 `json:"joinMachineSeconds"`
	JoinControllerSeconds   float64 `json:"joinControllerSeconds"`
	JoinHarnessSeconds      float64 `json:"joinHarnessSeconds"`
	JoinFloorMachineSeconds float64 `json:"joinFloorMachineSeconds"`
	JoinFloorHarnessSeconds float64 `json:"joinFloorHarnessSeconds"`
	// JoinFloorProcessSeconds and JoinProcessSeconds are the CPU-seconds
	// of each kind of process during the floor and the join
	// (processSeconds): where the join's CPU-seconds beyond the floor's go.
	JoinFloorProcessSeconds map[string]float64 `json:"joinFloorProcessSeconds,omitempty"`
	JoinProcessSeconds      map[string]float64 `json:"joinProcessSeconds,omitempty"`
	// JoinObjectBytes and JoinFloorObjectBytes are the mean size (JSON) of
	// the objects of each kind the controller and the floor wrote, in the
	// first real cluster: the floor writes objects of the same size.
	JoinObjectBytes      map[string]int `json:"joinObjectBytes,omitempty"`
	JoinFloorObjectBytes map[string]int `json:"joinFloorObjectBytes,omitempty"`
	// JoinFloorSettled and JoinSettled are the machine's busy CPUs over
	// the last second before the floor and the join began, once settled
	// (harness.Settle).
	JoinFloorSettled float64 `json:"joinFloorSettledCores"`
	JoinSettled      float64 `json:"joinSettledCores"`

	// Churn: a member's change of an endpoint in a real cluster's namespace
	// until that cluster's EndpointSlice has it; the API floor is an
	// EndpointSlice update → its arrival on a watch of the same cluster,
	// every 200 ms during the churn (apiFloor), of APIFloorSamples, the
	// shortest APIFloorMin; APIFloorSliceBytes is the size of its slice
	// (JSON), the controller's being JoinObjectBytes'. The three are 0 in
	// results of before they were measured, whose floor's slice had one
	// endpoint, no label and no owner.
	Changes            int           `json:"changes"`
	Samples            int           `json:"samples"`
	P50                time.Duration `json:"p50"`
	P99                time.Duration `json:"p99"`
	APIFloorP50        time.Duration `json:"apiFloorP50"`
	APIFloorP99        time.Duration `json:"apiFloorP99"`
	APIFloorSamples    int           `json:"apiFloorSamples,omitempty"`
	APIFloorMin        time.Duration `json:"apiFloorMin,omitempty"`
	APIFloorSliceBytes int           `json:"apiFloorSliceBytes,omitempty"`
	// SliceWritesPerChange are the EndpointSlice writes one change cost
	// an importing cluster; OtherWrites, every other API write the
	// controllers made during the churn, by resource.
	SliceWritesPerChange float64        `json:"sliceWritesPerChange"`
	OtherWrites          map[string]int `json:"otherWrites,omitempty"`
	// CPU is the busiest controller's cores during the churn; PeakRSS the
	// largest peak resident set of a controller, over the whole run (the
	// processes of every join).
	CPU     float64 `json:"cores"`
	PeakRSS uint64  `json:"peakRSS"`

	// RestartDeletions are imports and EndpointSlices deleted in the real
	// clusters while the registry restarted; RestartWrites, their
	// controllers' API writes meanwhile (a reachability report would be a
	// ServiceImport status write per import).
	RestartDeletions int            `json:"restartDeletions"`
	RestartWrites    map[string]int `json:"restartWrites,omitempty"`
	// Leave: the leaver's EndpointSlices in the real clusters, until
	// every one was deleted (after its TTL); the writes it cost them, by
	// resource (events included).
	LeaverSlices int            `json:"leaverSlices"`
	LeaveGone    time.Duration  `json:"leaveGone,omitempty"`
	LeaveWrites  map[string]int `json:"leaveWrites,omitempty"`
	// LeaveOtherDeletions are deletions in the real clusters of anything
	// but the leaver's EndpointSlices.
	LeaveOtherDeletions int `json:"leaveOtherDeletions"`
}

// realCluster is one testbed cluster with its mcsd and a watch of what
// mcsd writes in it.
type realCluster struct {
	c    *testbed.Cluster
	cl   client.Client
	ctrl *harness.Controller
	stop func()

	mu        sync.Mutex
	slices    map[string]int       // "ns/import/source" → endpoints
	ready     map[string]bool      // "ns/import": ServiceImport with its IPs
	since     map[string]time.Time // the keys of both: when their value came
	arrived   map[string]time.Time // churn and API floor addresses, first seen in a slice
	deletions map[string]int       // deleted objects, by kind and source cluster
}

func sliceKey(ns, name, source string) string { return ns + "/" + name + "/" + source }

// realSet is the real clusters of one clusterset size.
type realSet struct {
	tb       *testbed.Testbed
	clusters []*realCluster
	logs     string

	mu   sync.Mutex
	puts map[string]time.Time // churn and API floor addresses → when their put began

	// stoppedPeakRSS is the largest peak resident set of the controllers
	// stopped between joins (unjoin).
	stoppedPeakRSS uint64
	// deleted is when each namespace was last deleted (recreateNamespaces).
	deleted map[string]time.Time
}

// liveLookupTTL is how long after a namespace's deletion the API server
// checks, for every write in a namespace of that name, that the namespace
// exists with a read of its own (the NamespaceLifecycle admission plugin's
// forceLiveLookupTTL, 30 s, and a second more): a namespace made again at
// once costs each write an extra request to the API server and to its etcd
// for that long.
const liveLookupTTL = 31 * time.Second

// awaitLiveLookups waits until the API servers write in namespaces as they
// do in one never deleted: liveLookupTTL after the last deletion of each of
// names. Each floor and each join is timed after it, so that neither pays
// for the deletions made between them, nor one more than the other.
func (rs *realSet) awaitLiveLookups(ctx context.Context, names ...string) error {
	var until time.Time
	for _, name := range names {
		if at, ok := rs.deleted[name]; ok {
			until = latest(until, at.Add(liveLookupTTL))
		}
	}
	if d := time.Until(until); d > 0 {
		fmt.Fprintf(os.Stderr, "[scale]   waiting %s for the API servers' checks of deleted namespaces to end\n", d.Round(time.Second))
		return harness.Sleep(ctx, d)
	}
	return nil
}

// startReal starts n testbed clusters in the clusterset, with the
// namespaces that import (no controller yet).
func (r *sizeRun) startReal(ctx context.Context) error {
	tb, err := testbed.Start(ctx, testbed.Options{Name: fmt.Sprintf("scale-%d", os.Getpid()), Clusters: r.cfg.Real,
		ClusterSetID: clusterSet, NoDataPlane: true, Ephemeral: true, Log: os.Stderr})
	if err != nil {
		return fmt.Errorf("start the real clusters: %w", err)
	}
	logs := filepath.Join(r.dir, "logs")
	if r.cfg.Out != "" {
		logs = filepath.Join(r.cfg.Out, fmt.Sprintf("logs-N%d", r.n))
	}
	rs := &realSet{tb: tb, logs: logs, puts: map[string]time.Time{}, deleted: map[string]time.Time{}}
	r.real = rs
	if err := os.MkdirAll(rs.logs, 0o755); err != nil {
		return err
	}
	for _, c := range tb.Clusters {
		rc := &realCluster{c: c, slices: map[string]int{}, ready: map[string]bool{}, since: map[string]time.Time{}, arrived: map[string]time.Time{}, deletions: map[string]int{}}
		if rc.cl, err = c.Client(); err != nil {
			return err
		}
		rs.clusters = append(rs.clusters, rc)
		for _, ns := range append([]string{harness.FloorNamespace}, r.realNamespaceNames()...) {
			if err := client.IgnoreAlreadyExists(rc.cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})); err != nil {
				return fmt.Errorf("create namespace %s in %s: %w", ns, c.ID, err)
			}
		}
		if err := rc.watch(ctx, r.cfg.Timeout); err != nil {
			return err
		}
	}
	return nil
}

// removeFloor deletes the join floor's objects (their namespace) in every
// real cluster, waits until they are gone, and makes the namespace again,
// empty, for the API floor of the churn. A cluster that joins has no
// ServiceImports and derived Services of someone else's; left in place, the
// floor's would each be reconciled by the import and the export controllers
// beside the imports the join times, on the same workers.
func (rs *realSet) removeFloor(ctx context.Context, timeout time.Duration) error {
	return rs.recreateNamespaces(ctx, []string{harness.FloorNamespace}, timeout)
}

// recreateNamespaces deletes the namespaces names in every real cluster,
// waits until they are gone, and makes them again, empty.
func (rs *realSet) recreateNamespaces(ctx context.Context, names []string, timeout time.Duration) error {
	for _, rc := range rs.clusters {
		for _, name := range names {
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
			switch err := rc.cl.Delete(ctx, ns); {
			case err == nil:
				rs.deleted[name] = time.Now()
			case !apierrors.IsNotFound(err):
				return fmt.Errorf("delete namespace %s in %s: %w", name, rc.c.ID, err)
			}
		}
	}
	for _, rc := range rs.clusters {
		for _, name := range names {
			err := waitFor(ctx, timeout, "namespace "+name+" gone from "+rc.c.ID, func() bool {
				err := rc.cl.Get(ctx, client.ObjectKey{Name: name}, &corev1.Namespace{})
				return apierrors.IsNotFound(err)
			})
			if err != nil {
				return err
			}
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
			if err := rc.cl.Create(ctx, ns); err != nil {
				return fmt.Errorf("create namespace %s in %s again: %w", name, rc.c.ID, err)
			}
		}
	}
	return nil
}

// close stops the controllers and the clusters.
func (rs *realSet) close(ctx context.Context) {
	for _, rc := range rs.clusters {
		if rc.ctrl != nil {
			rc.ctrl.Stop()
		}
		if rc.stop != nil {
			rc.stop()
		}
	}
	if err := rs.tb.Close(context.WithoutCancel(ctx)); err != nil {
		fmt.Fprintln(os.Stderr, "[scale] close the real clusters:", err)
	}
}

// watch follows the cluster's EndpointSlices and ServiceImports.
func (rc *realCluster) watch(ctx context.Context, timeout time.Duration) error {
	w, err := startCache(ctx, rc.c, cache.Options{Scheme: testbed.Scheme}, timeout, func(ca cache.Cache) error {
		sl, err := ca.GetInformer(ctx, &discoveryv1.EndpointSlice{})
		if err != nil {
			return err
		}
		if _, err := sl.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { rc.onSlice(o, false) },
			UpdateFunc: func(_, o any) { rc.onSlice(o, false) },
			DeleteFunc: func(o any) { rc.onSlice(o, true) },
		}); err != nil {
			return err
		}
		si, err := ca.GetInformer(ctx, &mcsv1beta1.ServiceImport{})
		if err != nil {
			return err
		}
		_, err = si.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { rc.onImport(o, false) },
			UpdateFunc: func(_, o any) { rc.onImport(o, false) },
			DeleteFunc: func(o any) { rc.onImport(o, true) },
		})
		return err
	})
	if err != nil {
		return err
	}
	rc.stop = w.stop
	return nil
}

func (rc *realCluster) onSlice(o any, deleted bool) {
	if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	s, ok := o.(*discoveryv1.EndpointSlice)
	if !ok {
		return
	}
	now := time.Now()
	source := s.Labels[mcsv1beta1.LabelSourceCluster]
	key := sliceKey(s.Namespace, s.Labels[mcsv1beta1.LabelServiceName], source)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if deleted {
		if s.Namespace != harness.FloorNamespace {
			delete(rc.slices, key)
			rc.deletions["EndpointSlice of "+source]++
		}
		return
	}
	if n, ok := rc.slices[key]; s.Namespace != harness.FloorNamespace && (!ok || n != len(s.Endpoints)) {
		rc.slices[key], rc.since[key] = len(s.Endpoints), now
	}
	for _, e := range s.Endpoints {
		for _, a := range e.Addresses {
			if _, seen := rc.arrived[a]; !seen && (strings.HasPrefix(a, churnPrefix) || strings.HasPrefix(a, apiFloorPrefix)) {
				rc.arrived[a] = now
			}
		}
	}
}

func (rc *realCluster) onImport(o any, deleted bool) {
	if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	si, ok := o.(*mcsv1beta1.ServiceImport)
	if !ok || si.Namespace == harness.FloorNamespace {
		return
	}
	key := si.Namespace + "/" + si.Name
	now := time.Now()
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if deleted {
		delete(rc.ready, key)
		rc.deletions["ServiceImport"]++
		return
	}
	if ready, ok := rc.ready[key]; !ok || ready != (len(si.Spec.IPs) > 0) {
		rc.ready[key], rc.since[key] = len(si.Spec.IPs) > 0, now
	}
}

// whole reports whether every import of want is whole: its ServiceImport
// has its IPs and each source cluster's EndpointSlice has its endpoints.
func (rc *realCluster) whole(want map[registry.ServiceKey][]string, endpoints int) bool {
	_, ok := rc.wholeSince(want, endpoints)
	return ok
}

// wholeSince is whole, and when the last of those objects came as it is.
func (rc *realCluster) wholeSince(want map[registry.ServiceKey][]string, endpoints int) (time.Time, bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var last time.Time
	for key, sources := range want {
		k := key.Namespace + "/" + key.Name
		if !rc.ready[k] {
			return time.Time{}, false
		}
		last = latest(last, rc.since[k])
		for _, src := range sources {
			k := sliceKey(key.Namespace, key.Name, src)
			if rc.slices[k] != endpoints {
				return time.Time{}, false
			}
			last = latest(last, rc.since[k])
		}
	}
	return last, true
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func (rc *realCluster) deleted() map[string]int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	out := map[string]int{}
	for k, v := range rc.deletions {
		out[k] = v
	}
	return out
}

// The addresses that the real clusters' watch times: the members' churn
// (run.go) and the API floor's own writes (apiFloor).
const (
	churnPrefix    = "172."
	apiFloorPrefix = "192.168."
)

// namespace is the name of namespace number i (Service s is in number s
// mod namespaces).
func namespace(i int) string { return fmt.Sprintf("ns-%d", i) }

// realImports are the imports each real cluster must have: the exports of
// its namespaces, with their source clusters.
func (r *sizeRun) realImports() map[registry.ServiceKey][]string {
	want := map[registry.ServiceKey][]string{}
	for m, keys := range r.owned {
		for _, key := range keys {
			if r.inReal(key) {
				want[key] = append(want[key], r.memberID(m))
			}
		}
	}
	return want
}

func (r *sizeRun) inReal(key registry.ServiceKey) bool {
	return slices.Contains(r.realNamespaceNames(), key.Namespace)
}

// join times the real clusters' floor (joinFloor), then starts their
// controllers and waits until every import is whole in every one.
func (r *sizeRun) join(ctx context.Context, res *realResult) (err error) {
	want := r.realImports()
	res.Clusters, res.Imports = len(r.real.clusters), len(want)
	res.Objects = len(want) * 2
	for _, s := range want {
		res.Objects += len(s)
	}
	if r.cfg.SplitCPUs {
		split, restore, splitErr := r.splitCPUs()
		switch {
		case errors.Is(splitErr, harness.ErrOneCPU):
			fmt.Fprintf(os.Stderr, "[scale]   the joins run on every CPU: %v\n", splitErr)
		case splitErr != nil:
			return splitErr
		default:
			res.JoinCPUs = &split
			defer func() { err = errors.Join(err, restore()) }()
		}
	}
	// One pair's ratio moves by more than the 10 % the target allows
	// between runs of the same code (the floor's own CPU does): the
	// pairs' median is the figure.
	var pairs []realResult
	for i := range max(r.cfg.JoinRepeats, 1) {
		if i > 0 {
			if err := r.real.unjoin(ctx, r.realNamespaceNames(), r.cfg.Timeout); err != nil {
				return err
			}
		}
		pr := *res
		if err := r.joinOnce(ctx, want, &pr); err != nil {
			return err
		}
		pairs = append(pairs, pr)
	}
	// Each join is set against the floors before and after it: the
	// floors of one run often grew from one pair to the next (by a median
	// 6 % in the 30 pairs of 11 runs before this), and a join always comes
	// after its floor.
	after, err := r.floorAfter(ctx, want)
	if err != nil {
		return err
	}
	for i := range pairs {
		pairs[i].JoinFloorAfter = after
		if i+1 < len(pairs) {
			pairs[i].JoinFloorAfter = pairs[i+1].JoinFloor
		}
	}
	*res = medianJoin(pairs)
	return nil
}

// afterJoins, when set (by a test), looks at the run once the joins are
// over, before the churn.
var afterJoins func(r *sizeRun)

// cpuSplit is how the joins' processes were placed on the machine's CPUs
// (config.SplitCPUs).
type cpuSplit struct {
	ControlPlanes harness.CPUs `json:"controlPlanes"`
	Rest          harness.CPUs `json:"rest"`
}

// splitCPUs runs the real clusters' own processes (their API servers,
// etcds, kube-controller-managers, schedulers and kwok) on the first half
// of the CPUs, and the rest of the run on the other half: this process
// (with the simulated members and the floors' client), the registry's
// etcd and its gate, and the controllers, which this process starts and
// which take its CPUs. So the controllers and the API servers no longer take CPU from
// each other, as on separate machines. It returns what undoes it: every
// one of them, the controllers then running included, on every CPU again.
func (r *sizeRun) splitCPUs() (cpuSplit, func() error, error) {
	planes, rest, err := harness.SplitCPUs()
	if err != nil {
		return cpuSplit{}, nil, fmt.Errorf("place the joins' processes: %w", err)
	}
	others := func() []int {
		pids := []int{os.Getpid()}
		if r.cluster != nil {
			pids = append(pids, r.cluster.Pids()...)
		}
		if r.gate != nil {
			pids = append(pids, r.gate.pid())
		}
		return append(pids, r.controllerPids()...)
	}
	restore := func() error {
		if err := harness.Pin(append(r.clusterPids(), others()...), append(slices.Clone(planes), rest...)); err != nil {
			return fmt.Errorf("put the joins' processes back on every CPU: %w", err)
		}
		return nil
	}
	if err := errors.Join(harness.Pin(r.clusterPids(), planes), harness.Pin(others(), rest)); err != nil {
		return cpuSplit{}, nil, errors.Join(fmt.Errorf("place the joins' processes: %w", err), restore())
	}
	return cpuSplit{ControlPlanes: planes, Rest: rest}, restore, nil
}

// clusterPids are the real clusters' own processes: those the testbed
// started.
func (r *sizeRun) clusterPids() []int {
	return slices.Collect(maps.Keys(testbed.ProcessesUnder(r.real.tb.Dir())))
}

// controllerPids are the real clusters' controllers' processes, where
// they run.
func (r *sizeRun) controllerPids() []int {
	var pids []int
	for _, rc := range r.real.clusters {
		if rc.ctrl != nil {
			pids = append(pids, rc.ctrl.PID())
		}
	}
	return pids
}

// floorAfter times one more join floor after the last join, as every
// other floor is timed: the controllers stopped and their namespaces
// emptied (unjoin). The controllers then start again and join once more,
// untimed; the run goes on once every import is whole in every real
// cluster and the join's last writes (the derived Services' owners, the
// statuses) are made.
func (r *sizeRun) floorAfter(ctx context.Context, want map[registry.ServiceKey][]string) (time.Duration, error) {
	if err := r.real.unjoin(ctx, r.realNamespaceNames(), r.cfg.Timeout); err != nil {
		return 0, err
	}
	var x realResult
	if err := r.joinFloor(ctx, want, &x, false); err != nil {
		return 0, err
	}
	if err := r.startControllers(ctx, false); err != nil {
		return 0, err
	}
	for _, rc := range r.real.clusters {
		if err := waitFor(ctx, r.cfg.Timeout, "every import whole in "+rc.c.ID+" again", func() bool {
			_, ok := rc.wholeSince(want, r.cfg.Endpoints)
			return ok
		}); err != nil {
			return 0, err
		}
	}
	if _, err := r.real.joinWrites(ctx, len(want), r.cfg.Timeout); err != nil {
		return 0, err
	}
	return x.JoinFloor, nil
}

// startControllers starts a controller in every real cluster (profile:
// each writing a CPU profile beside its log, until StopProfile) and waits
// until every one is ready.
func (r *sizeRun) startControllers(ctx context.Context, profile bool) error {
	for _, rc := range r.real.clusters {
		var path string
		if profile {
			path = filepath.Join(r.real.logs, "join-"+rc.c.ID+".pprof")
		}
		ctrl, err := harness.StartEtcdController(rc.c, r.urls, r.cfg.TTL, r.real.logs, path)
		if err != nil {
			return err
		}
		rc.ctrl = ctrl
	}
	for _, rc := range r.real.clusters {
		if err := rc.ctrl.WaitReady(ctx, r.cfg.Timeout); err != nil {
			return err
		}
	}
	return nil
}

// stopControllers stops every real cluster's controller, keeping its peak
// resident set for peakRSS.
func (rs *realSet) stopControllers() {
	rs.stoppedPeakRSS = rs.peakRSS()
	for _, rc := range rs.clusters {
		rc.ctrl.Stop()
		rc.ctrl = nil
	}
}

// joinPair is one join of a run and the floors timed before and after it.
type joinPair struct {
	Floor      time.Duration `json:"floor"`
	FloorAfter time.Duration `json:"floorAfter,omitempty"`
	Join       time.Duration `json:"join"`
	Ready      time.Duration `json:"ready"`
	// Watching is the watching floor timed before the join
	// (realResult.JoinWatchingFloor), if any.
	Watching time.Duration `json:"watchingFloor,omitempty"`
}

// floor is the join's floor: the mean of the floors before and after it
// (the floor before alone in results that have no floor after).
func (p joinPair) floor() time.Duration {
	if p.FloorAfter > 0 {
		return (p.Floor + p.FloorAfter) / 2
	}
	return p.Floor
}

// floors names the floors the join is set against: "before b, after a",
// or "before b" alone.
func (p joinPair) floors() string {
	if p.FloorAfter > 0 {
		return fmt.Sprintf("before %s, after %s", p.Floor.Round(time.Millisecond), p.FloorAfter.Round(time.Millisecond))
	}
	return "before " + p.Floor.Round(time.Millisecond).String()
}

// ratio is the join's time over its floor's.
func (p joinPair) ratio() float64 { return p.Join.Seconds() / p.floor().Seconds() }

// watchingRatio is the join's time over its watching floor's.
func (p joinPair) watchingRatio() float64 { return p.Join.Seconds() / p.Watching.Seconds() }

// pair is x's floors and join.
func (x *realResult) pair() joinPair {
	return joinPair{Floor: x.JoinFloor, FloorAfter: x.JoinFloorAfter, Join: x.Join, Ready: x.JoinReady, Watching: x.JoinWatchingFloor}
}

// medianJoin is the result of the pair whose join took the median of the
// pairs' ratios to their floors (the upper middle of an even count: the
// less favourable), with every pair in JoinPairs.
func medianJoin(pairs []realResult) realResult {
	all := make([]joinPair, len(pairs))
	for i, p := range pairs {
		all[i] = p.pair()
	}
	byRatio := slices.Clone(pairs)
	slices.SortStableFunc(byRatio, func(a, b realResult) int { return cmp.Compare(a.pair().ratio(), b.pair().ratio()) })
	out := byRatio[len(byRatio)/2]
	out.JoinPairs = all
	return out
}

// unjoin undoes a join for the next: it stops the real controllers and
// deletes what they wrote (their namespaces, made again empty), and waits
// until the benchmark's watch has seen every import go.
func (rs *realSet) unjoin(ctx context.Context, namespaces []string, timeout time.Duration) error {
	rs.stopControllers()
	if err := rs.recreateNamespaces(ctx, namespaces, timeout); err != nil {
		return err
	}
	for _, rc := range rs.clusters {
		if err := waitFor(ctx, timeout, "the imports gone from the watch of "+rc.c.ID, func() bool {
			rc.mu.Lock()
			defer rc.mu.Unlock()
			// (The watch also holds slices of other namespaces: the
			// kubernetes Service's.)
			return !anyIn(rc.ready, namespaces) && !anyIn(rc.slices, namespaces)
		}); err != nil {
			return err
		}
	}
	return nil
}

// anyIn reports whether m has a key ("ns/...") in one of namespaces.
func anyIn[V any](m map[string]V, namespaces []string) bool {
	for key := range m {
		if ns, _, _ := strings.Cut(key, "/"); slices.Contains(namespaces, ns) {
			return true
		}
	}
	return false
}

// joinOnce times one join and its floor before it (and with
// config.WatchingFloor, its watching floor after that floor).
func (r *sizeRun) joinOnce(ctx context.Context, want map[registry.ServiceKey][]string, res *realResult) error {
	if err := r.joinFloor(ctx, want, res, false); err != nil {
		return err
	}
	if r.cfg.WatchingFloor {
		var x realResult
		if err := r.joinFloor(ctx, want, &x, true); err != nil {
			return err
		}
		res.JoinWatchingFloor, res.JoinWatchingFloorHeld = x.JoinFloor, x.JoinWatchingFloorHeld
		res.JoinWatchingFloorProcessSeconds = x.JoinFloorProcessSeconds
	}

	if err := r.real.awaitLiveLookups(ctx, r.realNamespaceNames()...); err != nil {
		return err
	}
	var err error
	if res.JoinSettled, err = harness.Settle(ctx, r.cfg.Settle); err != nil {
		return err
	}
	// Every process's CPU is read before the start: the read scans /proc.
	procs := r.processSeconds()
	start, machine, self := time.Now(), harness.MachineBusy(), harness.SelfCPU()
	if err := r.startControllers(ctx, r.cfg.ProfileJoin); err != nil {
		return err
	}
	res.JoinReady = time.Since(start)
	cpuReady, busyReady := r.real.usage(), harness.MachineBusy()
	// The join ends when the last object came as wanted, in the watch of
	// the cluster that finished last: not when the wait looked.
	var whole time.Time
	for _, rc := range r.real.clusters {
		if err := waitFor(ctx, r.cfg.Timeout, "every import whole in "+rc.c.ID, func() bool {
			at, ok := rc.wholeSince(want, r.cfg.Endpoints)
			whole = latest(whole, at)
			return ok
		}); err != nil {
			return err
		}
	}
	res.Join = whole.Sub(start)
	res.JoinProcessSeconds = cpuSince(procs, r.processSeconds())
	busy := harness.MachineBusy() - busyReady
	res.JoinMachineSeconds, res.JoinHarnessSeconds = harness.MachineBusy()-machine, harness.SelfCPU()-self
	for _, c := range r.real.usage() {
		res.JoinControllerSeconds += c
	}
	if r.cfg.ProfileJoin {
		for _, rc := range r.real.clusters {
			if err := rc.ctrl.StopProfile(ctx); err != nil {
				return fmt.Errorf("end the join's profile of %s: %w", rc.c.ID, err)
			}
		}
	}
	for i, c := range r.real.usage() {
		res.JoinCPU += c - cpuReady[i]
	}
	if d := (res.Join - res.JoinReady).Seconds(); d > 0 {
		res.JoinCPU /= d
		res.JoinMachine = busy / d
	}
	w, err := r.real.joinWrites(ctx, res.Imports, r.cfg.Timeout)
	if err != nil {
		return err
	}
	res.JoinWrites = w
	if res.JoinObjectBytes, err = r.real.clusters[0].objectBytes(ctx, r.realNamespaceNames()...); err != nil {
		return err
	}
	for _, rc := range r.real.clusters {
		n, secs, err := rc.ctrl.Reconciles(ctx, imports.ControllerName)
		if err != nil {
			return err
		}
		res.JoinReconciles += n
		res.JoinReconcileTime += secs
	}
	return nil
}

// joinFloor times the join's floor: the objects of the imports want,
// written by the harness itself with the controller's concurrency, in every
// real cluster at once, and the machine's busy CPUs meanwhile; then it
// removes them (removeFloor). A watching floor (watching) is timed while
// a cache in the benchmark's process watches each real cluster as the
// controller's does (watchAsController), beside the benchmark's own watch
// (realCluster.watch) that every floor and join has; the cache stops once
// it holds the floor's ServiceImports, before the floor is removed.
func (r *sizeRun) joinFloor(ctx context.Context, want map[registry.ServiceKey][]string, res *realResult, watching bool) error {
	k := 0
	for _, s := range want {
		k = max(k, len(s))
	}
	sources := make([]string, k)
	for i := range sources {
		sources[i] = fmt.Sprintf("floor%d", i)
	}
	if err := r.real.awaitLiveLookups(ctx, harness.FloorNamespace); err != nil {
		return err
	}
	var watches []*clusterCache
	if watching {
		defer func() {
			for _, w := range watches {
				w.stop()
			}
		}()
		for _, rc := range r.real.clusters {
			w, err := watchAsController(ctx, rc.c, r.cfg.Timeout)
			if err != nil {
				return err
			}
			watches = append(watches, w)
		}
	}
	var err error
	if res.JoinFloorSettled, err = harness.Settle(ctx, r.cfg.Settle); err != nil {
		return err
	}
	procs := r.processSeconds() // before the start: it scans /proc
	start, busy, self := time.Now(), harness.MachineBusy(), harness.SelfCPU()
	var wg sync.WaitGroup
	errs := make([]error, len(r.real.clusters))
	for ci, rc := range r.real.clusters {
		wg.Go(func() {
			var g errgroup.Group
			g.SetLimit(imports.MaxConcurrentReconciles)
			for i := range len(want) {
				g.Go(func() error { return harness.FloorImport(ctx, rc.cl, sources, i, r.cfg.Endpoints, nil) })
			}
			errs[ci] = g.Wait()
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("join floor: %w", err)
	}
	res.JoinFloor = time.Since(start)
	res.JoinFloorProcessSeconds = cpuSince(procs, r.processSeconds())
	res.JoinFloorMachineSeconds, res.JoinFloorHarnessSeconds = harness.MachineBusy()-busy, harness.SelfCPU()-self
	res.JoinFloorMachine = res.JoinFloorMachineSeconds / res.JoinFloor.Seconds()
	for _, w := range watches {
		// The watch saw the floor's writes, and stops before anything
		// else is written.
		held, err := w.awaitImports(ctx, len(want), r.cfg.Timeout)
		if err != nil {
			return err
		}
		res.JoinWatchingFloorHeld += held
		w.stop()
	}
	if res.JoinFloorObjectBytes, err = r.real.clusters[0].objectBytes(ctx, harness.FloorNamespace); err != nil {
		return err
	}
	return r.real.removeFloor(ctx, r.cfg.Timeout)
}

// processSeconds are the CPU-seconds each kind of process of the run has
// used so far: the real clusters' own (kube-apiserver, etcd,
// kube-controller-manager, ...), the registry's etcd and its gate, the
// real controllers, and the benchmark itself (the simulated members, its
// watches of the real clusters, the floor's client).
func (r *sizeRun) processSeconds() map[string]float64 {
	out := harness.TestbedCPU(r.real.tb.Dir())
	if r.cluster != nil {
		for _, pid := range r.cluster.Pids() {
			c, _ := harness.ProcCPU(pid)
			out[registryProcess] += c
		}
	}
	for _, pid := range r.controllerPids() {
		c, _ := harness.ProcCPU(pid)
		out[controllersProcess] += c
	}
	if r.gate != nil {
		out[gateKind], _ = harness.ProcCPU(r.gate.pid())
	}
	out[benchmarkProcess] = harness.SelfCPU()
	return out
}

// Kinds of processSeconds: the real clusters' API servers (named by their
// program, as the others of the real clusters), and those that are not the
// real clusters' programs.
const (
	apiServerProcess   = "kube-apiserver"
	registryProcess    = "registry etcd"
	controllersProcess = "controllers"
	gateKind           = "registry gate"
	benchmarkProcess   = "benchmark"
)

// cpuSince is the CPU-seconds each kind of process used from before to
// after; a process that ended meanwhile counts for nothing.
func cpuSince(before, after map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

// put records that the churn or the API floor is about to put address
// addr.
func (rs *realSet) put(addr string) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.puts[addr] = time.Now()
}

// writes are every real controller's API writes so far, summed by resource.
func (rs *realSet) writes(ctx context.Context) (map[string]int, error) {
	out := map[string]int{}
	for _, rc := range rs.clusters {
		w, err := rc.ctrl.Writes(ctx)
		if err != nil {
			return nil, fmt.Errorf("writes of %s: %w", rc.c.ID, err)
		}
		for k, v := range w {
			// Leader election renews its lease every few seconds,
			// whatever changes.
			if !strings.HasPrefix(k, "leases") {
				out[k] += v
			}
		}
	}
	return out, nil
}

// joinWrites returns the controllers' writes once the join's last have
// been made: an import is whole with its ServiceImport's IPs and its
// slices, and its derived Service's owner and its status are written
// after. They are waited for (imports of each cluster: a Service create
// and update and a status each), up to timeout, so that they count here
// and not in the churn that follows.
func (rs *realSet) joinWrites(ctx context.Context, imports int, timeout time.Duration) (map[string]int, error) {
	want := imports * len(rs.clusters)
	var w map[string]int
	var err error
	settled := func() bool {
		w, err = rs.writes(ctx)
		return err != nil || (w["services"] >= 2*want && w["serviceimports/status"] >= want)
	}
	if werr := waitFor(ctx, timeout, "the join's last writes", settled); werr != nil && err == nil {
		fmt.Fprintf(os.Stderr, "[scale]   %v (writes so far: %v)\n", werr, w)
	}
	return w, err
}

// apiFloor updates an EndpointSlice in every real cluster every 200 ms
// until ctx ends, with an address that its watch times: the API write
// floor of the controller's write of a change. The slice is the
// controller's size and shape (FloorSlice, of endpoints endpoints, at least
// one, owned by a Service): the API server's work for a write grows with
// the object.
// Each cluster's addresses are its own: an arrival is timed from the put of
// its address (put), and the clusters' writes drift apart. Each write has a
// bound of its own, not ctx's deadline: the client's rate limiter refuses
// at once a write whose turn would come after the deadline.
func (rs *realSet) apiFloor(ctx context.Context, endpoints int) error {
	var wg sync.WaitGroup
	errs := make([]error, len(rs.clusters))
	for ci, rc := range rs.clusters {
		wg.Go(func() {
			errs[ci] = rs.apiFloorIn(ctx, ci, rc, endpoints)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// apiFloorIn is apiFloor in the real cluster rc, number ci.
func (rs *realSet) apiFloorIn(ctx context.Context, ci int, rc *realCluster, endpoints int) error {
	write := func(f func(context.Context) error) error {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		return f(wctx)
	}
	svc := harness.FloorService("api-floor")
	if err := write(func(wctx context.Context) error { return rc.cl.Create(wctx, svc) }); err != nil {
		return fmt.Errorf("API floor in %s: %w", rc.c.ID, err)
	}
	s := harness.FloorSlice(svc, "api-floor",
		harness.FloorEndpoints(max(endpoints, 1), func(j int) string { return fmt.Sprintf("10.251.%d.%d", ci, j+1) }))
	// The export controller looks at the slices others write for a
	// Service (kubernetes.io/service-name): the floor names its Service
	// under a key of the same length that no controller acts on, as the
	// controller's slices set nothing off in the controllers.
	delete(s.Labels, discoveryv1.LabelServiceName)
	s.Labels[apiFloorServiceLabel] = svc.Name
	for i := 0; ctx.Err() == nil; i++ {
		addr := apiFloorAddress(ci, len(rs.clusters), i)
		s.Endpoints[0].Addresses = []string{addr}
		rs.put(addr)
		err := write(func(wctx context.Context) error {
			if i == 0 {
				return rc.cl.Create(wctx, s)
			}
			return rc.cl.Update(wctx, s)
		})
		if err != nil {
			return fmt.Errorf("API floor in %s: %w", rc.c.ID, err)
		}
		_ = harness.Sleep(ctx, 200*time.Millisecond)
	}
	return nil
}

// apiFloorServiceLabel stands for kubernetes.io/service-name on the API
// floor's slice.
const apiFloorServiceLabel = "bench.mcsd.io/service-name"

// apiFloorAddress is the address of the API floor's write i in real
// cluster ci of n: no other cluster's write has it (for 31,250 writes in
// each of two clusters).
func apiFloorAddress(ci, n, i int) string {
	return fmt.Sprintf(apiFloorPrefix+"%d.%d", (ci+n*(i/250))%250, i%250+1)
}

// latencies are, over every real cluster, the arrival of each address put
// since the churn began: the members' changes (172.*) and the API floor's
// (192.168.*).
func (rs *realSet) latencies() (changes, floor []time.Duration) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for _, rc := range rs.clusters {
		rc.mu.Lock()
		for addr, t := range rc.arrived {
			put, ok := rs.puts[addr]
			if !ok {
				continue
			}
			if strings.HasPrefix(addr, apiFloorPrefix) {
				floor = append(floor, t.Sub(put))
			} else {
				changes = append(changes, t.Sub(put))
			}
		}
		rc.mu.Unlock()
	}
	return changes, floor
}

// arrivedAll reports whether every real cluster has every churn address
// put, once settled (the floor's own addresses are in one cluster only).
func (rs *realSet) arrivedAll() bool { return len(rs.notArrived()) == 0 }

// missing says which changes of the churn have not arrived in which real
// cluster, at most n of them, with how long ago their put began.
func (rs *realSet) missing(n int) string {
	out := rs.notArrived()
	if len(out) > n {
		out = append(out[:n], fmt.Sprintf("%d more", len(out)-n))
	}
	return strings.Join(out, "; ")
}

// notArrived lists the changes of the churn that have not arrived in a
// real cluster, sorted.
func (rs *realSet) notArrived() []string {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	var out []string
	for _, rc := range rs.clusters {
		rc.mu.Lock()
		for addr, at := range rs.puts {
			if _, ok := rc.arrived[addr]; !ok && strings.HasPrefix(addr, churnPrefix) {
				out = append(out, fmt.Sprintf("%s not in %s, put %s ago", addr, rc.c.ID, time.Since(at).Round(time.Millisecond)))
			}
		}
		rc.mu.Unlock()
	}
	sort.Strings(out)
	return out
}

// usage is the real controllers' CPU seconds so far, by cluster.
func (rs *realSet) usage() []float64 {
	out := make([]float64, len(rs.clusters))
	for i, rc := range rs.clusters {
		out[i], _ = harness.ProcCPU(rc.ctrl.PID())
	}
	return out
}

// peakRSS is the largest peak resident set of a real controller.
func (rs *realSet) peakRSS() uint64 {
	peak := rs.stoppedPeakRSS
	for _, rc := range rs.clusters {
		if rc.ctrl == nil {
			continue
		}
		if n, err := harness.ProcPeakRSS(rc.ctrl.PID()); err == nil {
			peak = max(peak, n)
		}
	}
	return peak
}

func (rs *realSet) deletions() map[string]int {
	out := map[string]int{}
	for _, rc := range rs.clusters {
		for k, v := range rc.deleted() {
			out[k] += v
		}
	}
	return out
}

// settledWrites are the real controllers' writes once they have not
// changed for a second (or 20 s passed): what a change cost them, its
// status and events included.
func (rs *realSet) settledWrites(ctx context.Context) (map[string]int, error) {
	last, err := rs.writes(ctx)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if err := harness.Sleep(ctx, time.Second); err != nil {
			return nil, err
		}
		now, err := rs.writes(ctx)
		if err != nil {
			return nil, err
		}
		if total(now) == total(last) {
			return now, nil
		}
		last = now
	}
	return last, nil
}

// total is the sum of m's values.
func total[V int | float64](m map[string]V) V {
	var n V
	for _, v := range m {
		n += v
	}
	return n
}

// waitFor polls cond every 50 ms until it holds, or timeout.
func waitFor(ctx context.Context, timeout time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not within %s", what, timeout)
		}
		if err := harness.Sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// leaverSlices are the EndpointSlices of member id in the real clusters.
func (rs *realSet) leaverSlices(id string) int {
	n := 0
	for _, rc := range rs.clusters {
		rc.mu.Lock()
		for key := range rc.slices {
			if strings.HasSuffix(key, "/"+id) {
				n++
			}
		}
		rc.mu.Unlock()
	}
	return n
}

// objectBytes is the mean size, as JSON, of the ServiceImports, Services
// and EndpointSlices in namespaces, by kind.
func (rc *realCluster) objectBytes(ctx context.Context, namespaces ...string) (map[string]int, error) {
	lists := map[string]client.ObjectList{
		"ServiceImport": &mcsv1beta1.ServiceImportList{}, "Service": &corev1.ServiceList{}, "EndpointSlice": &discoveryv1.EndpointSliceList{},
	}
	out := map[string]int{}
	for kind, list := range lists {
		total, n := 0, 0
		for _, ns := range namespaces {
			if err := rc.cl.List(ctx, list, client.InNamespace(ns)); err != nil {
				return nil, fmt.Errorf("list %ss in %s: %w", kind, ns, err)
			}
			items, err := meta.ExtractList(list)
			if err != nil {
				return nil, err
			}
			for _, o := range items {
				b, err := json.Marshal(o)
				if err != nil {
					return nil, err
				}
				total, n = total+len(b), n+1
			}
		}
		if n > 0 {
			out[kind] = total / n
		}
	}
	return out, nil
}

// realNamespaceNames are the namespaces the real clusters have and import.
func (r *sizeRun) realNamespaceNames() []string {
	out := make([]string, r.cfg.RealNamespaces)
	for i := range out {
		out[i] = namespace(i)
	}
	return out
}

// clusterCache is a cache of one real cluster in the benchmark's
// process (startCache).
type clusterCache struct {
	cluster string
	cache   cache.Cache
	cancel  context.CancelFunc
	done    chan error
	once    sync.Once
}

// startCache starts a cache of c with opts, its informers made by setup,
// and returns once it has synced, within timeout.
func startCache(ctx context.Context, c *testbed.Cluster, opts cache.Options, timeout time.Duration, setup func(cache.Cache) error) (*clusterCache, error) {
	ca, err := cache.New(c.Config, opts)
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", c.ID, err)
	}
	if err := setup(ca); err != nil {
		return nil, fmt.Errorf("watch %s: %w", c.ID, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	w := &clusterCache{cluster: c.ID, cache: ca, cancel: cancel, done: make(chan error, 1)}
	go func() { w.done <- ca.Start(cctx) }()
	sctx, scancel := context.WithTimeout(ctx, timeout)
	defer scancel()
	if !ca.WaitForCacheSync(sctx) {
		w.stop()
		return nil, fmt.Errorf("watch %s: the caches did not sync within %s", c.ID, timeout)
	}
	return w, nil
}

// watchAsController starts a cache of c with the controller's cache
// options that watches the kinds a join writes, the Services,
// EndpointSlices and ServiceImports of the whole cluster. (The
// controller's cache also watches kinds a join does not write, and
// indexes EndpointSlices.)
func watchAsController(ctx context.Context, c *testbed.Cluster, timeout time.Duration) (*clusterCache, error) {
	opts := manager.CacheOptions(nil)
	opts.Scheme = testbed.Scheme
	return startCache(ctx, c, opts, timeout, func(ca cache.Cache) error {
		for _, o := range []client.Object{&corev1.Service{}, &discoveryv1.EndpointSlice{}, &mcsv1beta1.ServiceImport{}} {
			if _, err := ca.GetInformer(ctx, o); err != nil {
				return err
			}
		}
		return nil
	})
}

// awaitImports waits, up to timeout, until the watch holds n
// ServiceImports of the floor's namespace, and returns how many it holds.
func (w *clusterCache) awaitImports(ctx context.Context, n int, timeout time.Duration) (int, error) {
	var err error
	held := 0
	werr := waitFor(ctx, timeout, fmt.Sprintf("the floor's %d ServiceImports in the watch of %s", n, w.cluster), func() bool {
		var l mcsv1beta1.ServiceImportList
		if err = w.cache.List(ctx, &l, client.InNamespace(harness.FloorNamespace)); err != nil {
			return true
		}
		held = len(l.Items)
		return held >= n
	})
	if err != nil {
		return held, fmt.Errorf("list the watch of %s: %w", w.cluster, err)
	}
	if werr != nil {
		return held, fmt.Errorf("%w (%d held)", werr, held)
	}
	return held, nil
}

// stop stops the cache and waits until its informers have ended.
func (w *clusterCache) stop() {
	w.once.Do(func() {
		w.cancel()
		if err := <-w.done; err != nil {
			fmt.Fprintf(os.Stderr, "[scale]   the watch of %s ended: %v\n", w.cluster, err)
		}
	})
}
