package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/etcd"
	"github.com/mcsd-io/mcsd/test/bench/harness"
	"github.com/mcsd-io/mcsd/test/testbed"
	"github.com/mcsd-io/mcsd/test/testbed/etcdcluster"
)

const clusterSet = "scale"

// namespaces is how many namespaces the Services are spread over (Service
// s is in ns-<s mod namespaces>).
const namespaces = 50

// runResult is one clusterset size's figures.
type runResult struct {
	N       int `json:"clusters"`
	Records int `json:"endpointRecords"`
	// DBBytes is etcd's database size after the cold start.
	DBBytes int64 `json:"dbBytes"`

	// Publish is how long the members took to write every record (the
	// write floor: etcd's own pace); Converged, until every member held
	// every record.
	Publish   time.Duration `json:"publish"`
	Converged time.Duration `json:"converged"`

	// Churn: endpoint changes put → delivered at every other member, and
	// the floor (a raw etcd put → watch beside it, sizeRun.floor: since
	// 2026-11-29's last session, of a record's size and delivered to every
	// watcher of the clusterset; before, as KeyFloorP50 and KeyFloorP99
	// are, sizeRun.keyFloor).
	Changes         int           `json:"changes"`
	Deliveries      int           `json:"deliveries"`
	P50             time.Duration `json:"p50"`
	P99             time.Duration `json:"p99"`
	Max             time.Duration `json:"max"`
	FloorP50        time.Duration `json:"floorP50"`
	FloorP99        time.Duration `json:"floorP99"`
	FloorSamples    int           `json:"floorSamples,omitempty"`
	FloorValueBytes int           `json:"floorValueBytes,omitempty"`
	FloorCarried    int           `json:"floorCarried,omitempty"`
	KeyFloorP50     time.Duration `json:"keyFloorP50,omitempty"`
	KeyFloorP99     time.Duration `json:"keyFloorP99,omitempty"`
	// ChurnCPU is the process's CPU (cores) during the churn, all members.
	ChurnCPU float64 `json:"churnCores"`

	// IdlePerMemberPerMinute is the requests each member sent per minute
	// while nothing changed (health checks, lease keep-alives).
	IdlePerMemberPerMinute float64 `json:"idleRequestsPerMemberPerMinute"`

	// Restart: from etcd serving again until every member had read the
	// clusterset again; deletions delivered and outages reported meanwhile.
	Resynced         time.Duration `json:"resynced,omitempty"`
	RestartDeletions int           `json:"restartDeletions"`
	RestartReports   int           `json:"restartReports"`
	// LeaderKill is a three-member registry's leader killed.
	LeaderKill *disruption `json:"leaderKill,omitempty"`
	// Compaction is every client cut off from the single-member registry
	// while it moves on and is compacted past their watches.
	Compaction *disruption `json:"compaction,omitempty"`

	// Leave: a member stopped; until every other member saw it gone.
	LeaveSeen time.Duration `json:"leaveSeen,omitempty"`
	// LeaveDeletions are the records each other member was delivered as
	// deleted (the leaver's, and nothing else).
	LeaveDeletions int `json:"leaveDeletionsPerMember"`
	LeaverRecords  int `json:"leaverRecords"`

	// RSS is the process's resident set after the churn (all members).
	RSS uint64 `json:"rssBytes"`

	// Real are the real clusters' figures, when the run had any.
	Real *realResult `json:"real,omitempty"`
}

// run is one clusterset size.
type sizeRun struct {
	cfg     config
	n       int
	url     string
	dir     string
	cluster *etcdcluster.Cluster // the registry, of RegistryMembers
	urls    []string             // the registry's client URLs
	members []*member
	owned   [][]registry.ServiceKey // each member's exports
	version []int                   // each member's churn counter
	real    *realSet                // nil: no real cluster
	// gate stands between the single-member registry and its clients
	// (members and real clusters), for the compaction phase: a process of
	// its own.
	gate *gateProcess
}

func (r *sizeRun) memberID(i int) string { return fmt.Sprintf("m%03d", i) }

func runOne(ctx context.Context, cfg config, n int) (runResult, error) {
	dir, err := os.MkdirTemp("", "mcsd-scale-")
	if err != nil {
		return runResult{}, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	r := &sizeRun{cfg: cfg, n: n, dir: dir}
	if err := r.startEtcd(ctx); err != nil {
		return runResult{}, err
	}
	defer r.stopEtcd()
	res := runResult{N: n}
	if cfg.Real > 0 {
		res.Real = &realResult{}
		err := r.startReal(ctx)
		if r.real != nil {
			defer r.real.close(ctx)
		}
		if err != nil {
			return res, err
		}
	}

	// Members: each its own client, backend and watch.
	// Not errgroup.WithContext: its context ends with Wait, and the
	// backends live on the context they are opened with.
	var g errgroup.Group
	g.SetLimit(16)
	r.members = make([]*member, n)
	for i := range n {
		g.Go(func() error {
			m, err := startEtcdMember(ctx, r.memberID(i), clusterSet, r.urls, cfg.TTL, i < cfg.Views)
			r.members[i] = m
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return res, err
	}
	defer func() {
		for _, m := range r.members {
			if m != nil {
				m.stop()
			}
		}
	}()

	if err := r.coldStart(ctx, &res); err != nil {
		return res, err
	}
	if r.real != nil {
		if err := r.join(ctx, res.Real); err != nil {
			return res, err
		}
		if afterJoins != nil {
			afterJoins(r)
		}
	}
	if err := r.churn(ctx, &res); err != nil {
		return res, err
	}
	r.idle(&res)
	if !cfg.SkipRestart {
		if err := r.restart(ctx, &res); err != nil {
			return res, err
		}
		if r.cfg.RegistryMembers > 1 {
			if err := r.killLeader(ctx, &res); err != nil {
				return res, err
			}
		} else if err := r.compact(ctx, &res); err != nil {
			return res, err
		}
	}
	if !cfg.SkipLeave {
		if err := r.leave(ctx, &res); err != nil {
			return res, err
		}
	}
	return res, nil
}

func (r *sizeRun) stopEtcd() {
	if r.gate != nil {
		r.gate.stop()
	}
	if r.cluster != nil {
		r.cluster.Close()
	}
}

// startEtcd starts the registry: RegistryMembers etcd processes (the
// testbed's etcd binary), each a process of its own as in production. (In
// the benchmark's process, etcd's garbage collector would also scan the
// simulated members' memory, and every read would pay for it.) A single
// member is reached through a gate, a process of its own too, for the
// compaction phase.
func (r *sizeRun) startEtcd(ctx context.Context) error {
	bins, err := testbed.EnsureBinaries(ctx, nil)
	if err != nil {
		return err
	}
	c, err := etcdcluster.Start(ctx, etcdcluster.Config{Binary: bins.Etcd, Dir: filepath.Join(r.dir, "etcd"), Members: r.cfg.RegistryMembers})
	if err != nil {
		return fmt.Errorf("start etcd: %w", err)
	}
	r.cluster, r.urls, r.url = c, c.ClientURLs(), c.ClientURLs()[0]
	if r.cfg.RegistryMembers > 1 {
		return nil
	}
	g, err := startGateProcess(strings.TrimPrefix(r.url, "http://"))
	if err != nil {
		c.Close()
		return fmt.Errorf("start the registry's gate: %w", err)
	}
	r.gate, r.urls = g, []string{g.url()}
	return nil
}

func spec() registry.ServiceSpec {
	return registry.ServiceSpec{Type: registry.ClusterSetIP, Ports: []registry.Port{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}}
}

// groups are member m's endpoints of its export number e, at version v.
func (r *sizeRun) groups(m, e, v int) []registry.EndpointGroup {
	return endpointGroups(r.cfg.Endpoints, m, e, v)
}

// endpointGroups are n endpoints of member m's export number e, at version
// v: endpoint 0's address moves with v.
func endpointGroups(n, m, e, v int) []registry.EndpointGroup {
	eps := make([]registry.Endpoint, n)
	for j := range eps {
		addr := fmt.Sprintf("10.%d.%d.%d", m%250, (e*n+j)/250%250, (e*n+j)%250+1)
		if j == 0 && v > 0 {
			addr = fmt.Sprintf(churnPrefix+"%d.%d.%d", m%250, v/250%250, v%250+1)
		}
		eps[j] = registry.Endpoint{Addresses: []string{addr}, Ready: true, Serving: true, Zone: fmt.Sprintf("zone-%d", j%3)}
	}
	return []registry.EndpointGroup{{AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []registry.EndpointPort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 8080}}, Endpoints: eps}}
}

// churnWalk is the order in which a member's churn walks its exports
// (indexes into keys): those the real clusters import (isReal) spread
// evenly among the others, each kind in its own order, so that any stretch
// of the walk changes them at their share of the member's exports. In the
// exports' own order, whose namespaces cycle, a walk of 20 changes from a
// random start missed the real clusters' namespaces at N = 3 in about one
// run in five.
func churnWalk(keys []registry.ServiceKey, isReal func(registry.ServiceKey) bool) []int {
	var in, out []int
	for e, key := range keys {
		if isReal(key) {
			in = append(in, e)
		} else {
			out = append(out, e)
		}
	}
	n, order := len(keys), make([]int, 0, len(keys))
	ni, no := 0, 0
	for p := range n {
		// The j-th real export at position (j + 1/2) n / len(in), rounded
		// down: positions at least one apart, as len(in) <= n.
		if ni < len(in) && (no == len(out) || p >= (2*ni+1)*n/(2*len(in))) {
			order = append(order, in[ni])
			ni++
			continue
		}
		order = append(order, out[no])
		no++
	}
	return order
}

// exportsOf are the exports of each of n members: services Services, in
// namespaces by turns, each exported by k members by turns.
func exportsOf(services, k, n int) [][]registry.ServiceKey {
	owned := make([][]registry.ServiceKey, n)
	for s := range services {
		key := registry.ServiceKey{Namespace: namespace(s % namespaces), Name: fmt.Sprintf("svc-%d", s)}
		for j := range k {
			m := (s + j) % n
			owned[m] = append(owned[m], key)
		}
	}
	return owned
}

// coldStart: every member publishes its exports; until every member holds
// every endpoint record.
func (r *sizeRun) coldStart(ctx context.Context, res *runResult) error {
	k := exporters(r.cfg.K, r.n)
	r.owned = exportsOf(r.cfg.Services, k, r.n)
	r.version = make([]int, r.n)
	res.Records = r.cfg.Services * k
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(32)
	for m, keys := range r.owned {
		g.Go(func() error {
			for e, key := range keys {
				if err := r.members[m].reg.Publish(gctx, key, spec(), r.groups(m, e, 0)); err != nil {
					return fmt.Errorf("publish %s of %s: %w", key, r.members[m].id, err)
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	res.Publish = time.Since(start)
	if err := r.waitAll("every member holds every record", func(m *member) bool { return m.records() == res.Records }); err != nil {
		return err
	}
	res.Converged = time.Since(start)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{r.url}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer func() { _ = cli.Close() }()
	if st, err := cli.Status(ctx, r.url); err == nil {
		res.DBBytes = st.DbSize
	}
	return nil
}

// waitAll polls until cond holds for every member still running.
func (r *sizeRun) waitAll(what string, cond func(*member) bool) error {
	deadline := time.Now().Add(r.cfg.Timeout)
	for {
		ok := true
		for _, m := range r.members {
			if m != nil && !cond(m) {
				ok = false
				break
			}
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			var held []int
			for _, m := range r.members {
				if m != nil {
					held = append(held, m.records())
				}
			}
			return fmt.Errorf("%s: not within %s (endpoint records held: %v)", what, r.cfg.Timeout, held)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// churn: each member changes one endpoint of one of its exports at
// ChurnRate per second, going through its exports in turn from one picked
// at random (ChurnLockstep: from the first); every other member's delivery
// is timed, and a raw etcd put → watch beside it is the floor.
func (r *sizeRun) churn(ctx context.Context, res *runResult) error {
	if r.real != nil {
		// The real clusters' writes, the controllers' and the API
		// floor's, in namespaces of theirs that the joins deleted.
		if err := r.real.awaitLiveLookups(ctx, append(r.realNamespaceNames(), harness.FloorNamespace)...); err != nil {
			return err
		}
	}
	for _, m := range r.members {
		m.measure(true)
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Churn)
	defer cancel()
	cpu0, _ := harness.ProcCPU(os.Getpid())
	start := time.Now()
	var floor registryFloor
	var keyFloor []time.Duration
	var wg sync.WaitGroup
	wg.Go(func() { floor = r.floor(ctx) })
	wg.Go(func() { keyFloor = r.keyFloor(ctx) })
	var mu sync.Mutex
	var errs []error
	var realWrites map[string]int
	var realCPU []float64
	if r.real != nil {
		var err error
		if realWrites, err = r.real.writes(ctx); err != nil {
			return err
		}
		realCPU = r.real.usage()
		wg.Go(func() {
			if err := r.real.apiFloor(ctx, r.cfg.Endpoints); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	period := time.Duration(float64(time.Second) / r.cfg.ChurnRate)
	realChanges := 0
	for i, m := range r.members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if harness.Sleep(ctx, rand.N(period)) != nil {
				return
			}
			tick := time.NewTicker(period)
			defer tick.Stop()
			order := churnWalk(r.owned[i], func(key registry.ServiceKey) bool { return r.real != nil && r.inReal(key) })
			first := rand.N(len(order))
			if r.cfg.ChurnLockstep {
				first = 0
			}
			for p := first; ; p = (p + 1) % len(order) {
				e := order[p]
				r.version[i]++
				key, groups := r.owned[i][e], r.groups(i, e, r.version[i])
				inReal := r.real != nil && r.inReal(key)
				if inReal {
					r.real.put(groups[0].Endpoints[0].Addresses[0])
				}
				// The write has a bound of its own: one the churn's end
				// cut off might still be applied, and the real clusters
				// are waited for until each change they were told of
				// arrives.
				wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.Timeout)
				err := m.reg.PutEndpoints(wctx, key, groups)
				cancel()
				mu.Lock()
				if err != nil {
					errs = append(errs, fmt.Errorf("member %d: put endpoints of %s: %w", i, key, err))
				} else {
					res.Changes++
					if inReal {
						realChanges++
					}
				}
				mu.Unlock()
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu1, _ := harness.ProcCPU(os.Getpid())
	res.ChurnCPU = (cpu1 - cpu0) / elapsed.Seconds()
	// The last changes' deliveries: each other member sees every change.
	want := res.Changes * (r.n - 1)
	var lat []time.Duration
	settle := time.Now().Add(10 * time.Second)
	for {
		total := 0
		for _, m := range r.members {
			m.mu.Lock()
			total += len(m.latencies)
			m.mu.Unlock()
		}
		if total >= want || time.Now().After(settle) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, m := range r.members {
		lat = append(lat, m.measure(false)...)
	}
	res.Deliveries = len(lat)
	res.P50, res.P99, res.Max = percentile(lat, 50), percentile(lat, 99), percentile(lat, 100)
	res.FloorP50, res.FloorP99 = percentile(floor.latencies, 50), percentile(floor.latencies, 99)
	res.FloorSamples, res.FloorValueBytes, res.FloorCarried = len(floor.latencies), floor.valueBytes, floor.carried
	res.KeyFloorP50, res.KeyFloorP99 = percentile(keyFloor, 50), percentile(keyFloor, 99)
	res.RSS = rss()
	if r.real != nil {
		if err := r.realChurn(context.WithoutCancel(ctx), res.Real, realChanges, realWrites, realCPU, elapsed); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// realChurn takes the real clusters' churn figures, once every change
// reached every real cluster (or 30 s passed).
func (r *sizeRun) realChurn(ctx context.Context, res *realResult, changes int, writes0 map[string]int, cpu0 []float64, elapsed time.Duration) error {
	cpu := r.real.usage()
	for i := range cpu {
		res.CPU = max(res.CPU, (cpu[i]-cpu0[i])/elapsed.Seconds())
	}
	if err := waitFor(ctx, 30*time.Second, "every change in every real cluster", r.real.arrivedAll); err != nil {
		return fmt.Errorf("%w (%s)", err, r.real.missing(5))
	}
	lat, floor := r.real.latencies()
	res.Changes, res.Samples = changes, len(lat)
	res.P50, res.P99 = percentile(lat, 50), percentile(lat, 99)
	res.APIFloorP50, res.APIFloorP99 = percentile(floor, 50), percentile(floor, 99)
	res.APIFloorSamples, res.APIFloorMin = len(floor), percentile(floor, 0)
	sizes, err := r.real.clusters[0].objectBytes(ctx, harness.FloorNamespace)
	if err != nil {
		return fmt.Errorf("the API floor's slice size: %w", err)
	}
	res.APIFloorSliceBytes = sizes["EndpointSlice"]
	writes, err := r.real.settledWrites(ctx)
	if err != nil {
		return err
	}
	d := testbed.DiffWrites(writes0, writes)
	if changes > 0 {
		res.SliceWritesPerChange = float64(d["endpointslices"]) / float64(changes*len(r.real.clusters))
	}
	delete(d, "endpointslices")
	res.OtherWrites = d
	res.PeakRSS = r.real.peakRSS()
	return nil
}

// floorKey is where floor writes: under the clusterset's prefix, so that
// every watcher of the clusterset is sent it, at a key no cluster's (a
// cluster's name is a DNS label), which each ignores.
var floorKey = clustersPrefix + "~bench-floor"

// clustersPrefix is the prefix of every key of the members' clusterset, as
// their backends (etcd.Options' default Prefix) lay it out.
const clustersPrefix = etcd.DefaultPrefix + "/" + clusterSet + "/clusters/"

// registryFloor is what floor measured: each put → watch, the size of its
// values (an endpoint record's), and how many other changes its watch
// carried.
type registryFloor struct {
	latencies           []time.Duration
	valueBytes, carried int
}

// floor is the registry's own put → watch during the churn, as a watcher of
// the clusterset has it: every 200 ms, a put of a value the size of an
// endpoint record at floorKey, reaching the registry as the members and
// the controllers do (r.urls: through the gate, where the registry is one
// member), timed to its arrival on a watch of the whole clusterset. etcd
// sends it to every watcher of the clusterset, as it sends every change,
// and this watch carries every change, as the controllers' do (how many
// others it carried: registryFloor.carried).
func (r *sizeRun) floor(ctx context.Context) registryFloor {
	cli, err := clientv3.New(clientv3.Config{Endpoints: r.urls, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return registryFloor{}
	}
	defer func() { _ = cli.Close() }()
	size := 0
	if resp, err := cli.Get(ctx, clustersPrefix+r.memberID(0)+"/endpoints/", clientv3.WithPrefix(), clientv3.WithLimit(1)); err == nil && len(resp.Kvs) > 0 {
		size = len(resp.Kvs[0].Value)
	}
	out := registryFloor{valueBytes: size}
	out.latencies, out.carried = putWatchFloor(ctx, cli, floorKey, size, 200*time.Millisecond, clustersPrefix, clientv3.WithPrefix())
	// The clusterset as the members wrote it, for the phases after.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_, _ = cli.Delete(dctx, floorKey)
	return out
}

// keyFloor is the registry's put → watch as the floor was before
// 2026-11-29's last session: every 50 ms, a put of a small value at a key
// outside the clusterset, which no other client watches, timed to its
// arrival on a watch of that key alone, from a client of etcd's own
// address (not through the gate).
func (r *sizeRun) keyFloor(ctx context.Context) []time.Duration {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{r.url}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil
	}
	defer func() { _ = cli.Close() }()
	out, _ := putWatchFloor(ctx, cli, "/scale-floor", 0, 50*time.Millisecond, "/scale-floor")
	return out
}

// putWatchFloor puts key every period until ctx ends, each put a value of
// at least size bytes that names it, and times each to its arrival on a
// watch of watched (with watchOpts), which holds key. It also returns how
// many events of other keys the watch carried.
func putWatchFloor(ctx context.Context, cli *clientv3.Client, key string, size int, period time.Duration, watched string, watchOpts ...clientv3.OpOption) ([]time.Duration, int) {
	wch := cli.Watch(ctx, watched, watchOpts...)
	sent := map[string]time.Time{}
	var mu sync.Mutex
	var out []time.Duration
	others := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		for resp := range wch {
			now := time.Now()
			for _, ev := range resp.Events {
				if string(ev.Kv.Key) != key {
					others++
					continue
				}
				name, _, _ := strings.Cut(string(ev.Kv.Value), " ")
				mu.Lock()
				if t, ok := sent[name]; ok {
					out = append(out, now.Sub(t))
				}
				mu.Unlock()
			}
		}
	}()
	for i := 0; ctx.Err() == nil; i++ {
		name := strconv.Itoa(i)
		v := name
		if pad := size - len(v) - 1; pad > 0 {
			v += " " + strings.Repeat("x", pad)
		}
		mu.Lock()
		sent[name] = time.Now()
		mu.Unlock()
		if _, err := cli.Put(ctx, key, v); err != nil {
			break
		}
		_ = harness.Sleep(ctx, period)
	}
	<-done
	mu.Lock()
	defer mu.Unlock()
	return out, others
}

// idle counts the requests the members send while nothing changes.
func (r *sizeRun) idle(res *runResult) {
	before := int64(0)
	for _, m := range r.members {
		before += m.calls.n.Load()
	}
	time.Sleep(r.cfg.Idle)
	after := int64(0)
	for _, m := range r.members {
		after += m.calls.n.Load()
	}
	res.IdlePerMemberPerMinute = float64(after-before) / float64(r.n) / r.cfg.Idle.Minutes()
}

// restart stops etcd (every member of it) and starts it again: every watch
// ends, and each member resumes it (the client does, from its revision) or
// reads the clusterset again. A change is written as soon as etcd serves;
// until every member has it.
func (r *sizeRun) restart(ctx context.Context, res *runResult) error {
	d, err := r.disrupt(ctx, "the restart", func() error {
		r.cluster.KillAll()
		return r.cluster.RestartAll(ctx)
	})
	res.Resynced, res.RestartDeletions, res.RestartReports = d.Took, d.Deletions, d.Reports
	if res.Real != nil {
		res.Real.RestartWrites, res.Real.RestartDeletions = d.RealWrites, d.RealDeletions
	}
	return err
}

// killLeader kills the leader of the three-member registry: the watches on
// it end and move to another member once one is elected. A change is
// written as soon as the registry takes writes; until every member has
// it. The member starts again afterwards.
func (r *sizeRun) killLeader(ctx context.Context, res *runResult) error {
	leader, err := r.cluster.WaitLeader(ctx)
	if err != nil {
		return err
	}
	d, err := r.disrupt(ctx, "the leader's death", func() error {
		r.cluster.Kill(leader)
		return nil
	})
	res.LeaderKill = &d
	if err != nil {
		return err
	}
	if err := r.cluster.Restart(leader); err != nil {
		return err
	}
	return r.cluster.WaitHealthy(ctx)
}

// compactionWrites is how many writes the registry takes while its clients
// are cut off, before it is compacted past their watches.
const compactionWrites = 100

// compact cuts every member and real cluster off the single-member
// registry (their connections closed, new ones refused), writes to it and
// compacts it at its new revision, and lets them back: each watch resumes
// from a revision the registry no longer has, and its client reads the
// clusterset again, in pages. A change is written as soon as they are back;
// until every member has it. The cut lasts well under the lease TTL.
func (r *sizeRun) compact(ctx context.Context, res *runResult) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{r.url}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer func() { _ = cli.Close() }()
	if r.cfg.ProfileCompaction && r.cfg.Out != "" {
		stop, err := profileCPU(filepath.Join(r.cfg.Out, fmt.Sprintf("cpu-compaction-N%d.pprof", r.n)))
		if err != nil {
			return err
		}
		defer stop()
	}
	d, err := r.disrupt(ctx, "the compaction", func() (err error) {
		if err := r.gate.close(); err != nil {
			return err
		}
		defer func() { err = errors.Join(err, r.gate.open()) }()
		var rev int64
		for i := range compactionWrites {
			resp, err := cli.Put(ctx, "/mcsd-bench-scale/compaction", strconv.Itoa(i))
			if err != nil {
				return err
			}
			rev = resp.Header.Revision
		}
		_, err = cli.Compact(ctx, rev, clientv3.WithCompactPhysical())
		return err
	})
	res.Compaction = &d
	return err
}

// disruption is what a disruption of the registry cost.
type disruption struct {
	// Took is from the registry taking writes again until every member
	// had the change written then; Median, until half of them had it;
	// Written, until the change itself was written (its writer is a member
	// that was cut off too).
	Took    time.Duration `json:"took"`
	Median  time.Duration `json:"median"`
	Written time.Duration `json:"written"`
	// Deletions and Reports are the records delivered as deleted and the
	// outages reported (OnConnection(false)) meanwhile, over every member;
	// Rereads, the members that read the clusterset again (rather than
	// resume their watch); Received, the bytes every member received from
	// the registry meanwhile, summed.
	Deletions int   `json:"deletions"`
	Reports   int   `json:"reports"`
	Rereads   int   `json:"rereads"`
	Received  int64 `json:"receivedBytes"`
	// RealDeletions and RealWrites are what it cost the real clusters.
	RealDeletions int            `json:"realDeletions"`
	RealWrites    map[string]int `json:"realWrites,omitempty"`
}

// disrupt runs do, writes a change, and waits until every member, and
// every real cluster, has that change.
func (r *sizeRun) disrupt(ctx context.Context, what string, do func() error) (disruption, error) {
	var d disruption
	type stat struct {
		deletions, down int
		reads, bytes    int64
	}
	before := make([]stat, r.n)
	for i, m := range r.members {
		if m != nil {
			before[i].deletions, before[i].down = m.stats()
			before[i].reads, before[i].bytes = m.traffic()
			m.mark()
		}
	}
	writer, e := r.n-1, 0
	var realDeleted, realWrites map[string]int
	if r.real != nil {
		// The change written afterwards is in a real cluster's namespace,
		// so that it shows when they have caught up.
		writer, e = r.realExport()
		realDeleted = r.real.deletions()
		var err error
		if realWrites, err = r.real.writes(ctx); err != nil {
			return d, err
		}
	}
	if err := do(); err != nil {
		return d, fmt.Errorf("%s: %w", what, err)
	}
	start := time.Now()
	r.version[writer]++
	groups := r.groups(writer, e, r.version[writer])
	if r.real != nil {
		r.real.put(groups[0].Endpoints[0].Addresses[0])
	}
	wctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	for {
		err := r.members[writer].reg.PutEndpoints(wctx, r.owned[writer][e], groups)
		if err == nil {
			break
		}
		if wctx.Err() != nil {
			return d, fmt.Errorf("write after %s: %w", what, err)
		}
	}
	d.Written = time.Since(start)
	if err := r.waitAll("every member resumed or read again after "+what, func(m *member) bool {
		_, ok := m.markedAt()
		return ok
	}); err != nil {
		return d, err
	}
	var took []time.Duration
	for i, m := range r.members {
		if m == nil {
			continue
		}
		t, _ := m.markedAt()
		took = append(took, t.Sub(start))
		dels, down := m.stats()
		reads, bytes := m.traffic()
		if reads > before[i].reads {
			d.Rereads++
		}
		d.Received += bytes - before[i].bytes
		d.Deletions += dels - before[i].deletions
		d.Reports += down - before[i].down
	}
	slices.Sort(took)
	d.Took, d.Median = took[len(took)-1], took[(len(took)-1)/2]
	if r.real == nil {
		return d, nil
	}
	if err := waitFor(ctx, r.cfg.Timeout, "the change after "+what+" in every real cluster", r.real.arrivedAll); err != nil {
		return d, err
	}
	want := r.realImports()
	for _, rc := range r.real.clusters {
		if !rc.whole(want, r.cfg.Endpoints) {
			return d, fmt.Errorf("after %s, %s's imports are not whole", what, rc.c.ID)
		}
	}
	writes, err := r.real.settledWrites(ctx)
	if err != nil {
		return d, err
	}
	d.RealWrites = testbed.DiffWrites(realWrites, writes)
	d.RealDeletions = total(testbed.DiffWrites(realDeleted, r.real.deletions()))
	return d, nil
}

// realExport is a member and the index of one of its exports that the
// real clusters import.
func (r *sizeRun) realExport() (int, int) {
	for m := r.n - 1; m > 0; m-- {
		for e, key := range r.owned[m] {
			if r.inReal(key) {
				return m, e
			}
		}
	}
	return r.n - 1, 0
}

// leave stops member 0 as a crashed controller stops; until every other
// member saw it gone (its lease expired).
func (r *sizeRun) leave(ctx context.Context, res *runResult) error {
	leaver := r.members[0]
	res.LeaverRecords = len(r.owned[0])
	before := make([]int, r.n)
	for i, m := range r.members {
		before[i], _ = m.stats()
	}
	var realDeleted, realWrites map[string]int
	if r.real != nil {
		realDeleted = r.real.deletions()
		var err error
		if realWrites, err = r.real.writes(ctx); err != nil {
			return err
		}
		res.Real.LeaverSlices = r.real.leaverSlices(leaver.id)
	}
	leaver.stop()
	r.members[0] = nil
	start := time.Now()
	if err := r.waitAll("every member saw m000 gone", func(m *member) bool {
		_, ok := m.goneAt(leaver.id)
		return ok
	}); err != nil {
		return err
	}
	var last time.Time
	for i, m := range r.members {
		if m == nil {
			continue
		}
		t, _ := m.goneAt(leaver.id)
		if t.After(last) {
			last = t
		}
		d, _ := m.stats()
		res.LeaveDeletions = max(res.LeaveDeletions, d-before[i])
	}
	res.LeaveSeen = last.Sub(start)
	if r.real == nil {
		return nil
	}
	if err := waitFor(ctx, r.cfg.Timeout, "the leaver's EndpointSlices deleted in every real cluster", func() bool {
		return r.real.leaverSlices(leaver.id) == 0
	}); err != nil {
		return err
	}
	res.Real.LeaveGone = time.Since(start)
	writes, err := r.real.settledWrites(ctx)
	if err != nil {
		return err
	}
	res.Real.LeaveWrites = testbed.DiffWrites(realWrites, writes)
	d := testbed.DiffWrites(realDeleted, r.real.deletions())
	delete(d, "EndpointSlice of "+leaver.id)
	res.Real.LeaveOtherDeletions = total(d)
	return nil
}

func rss() uint64 {
	n, _ := harness.ProcRSS(os.Getpid())
	return n
}

// profileCPU writes a CPU profile of this process to path until the
// returned function is called.
func profileCPU(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}, nil
}
