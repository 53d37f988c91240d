package harness

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/controller/export"
	"github.com/mcsd-io/mcsd/internal/wellknown"
	"github.com/mcsd-io/mcsd/test/testbed"
)

// The tracker times changes from watches: for each Service the harness
// says what every cluster should end up with (an expectation), and the
// watches of every cluster record when the source cluster shows the change
// and when each cluster's import first matches it. Nothing is polled.

// exportFinalizer is the finalizer mcsd puts on a ServiceExport while it
// publishes it.
const exportFinalizer = export.Finalizer

// startOn is the source-side event that starts an expectation's clock.
type startOn int

const (
	// startGiven: the phase sets the start (cold start, bursts).
	startGiven startOn = iota
	// startExport: the ServiceExport appears in the source cluster.
	startExport
	// startUnexport: the ServiceExport is being deleted in the source cluster.
	startUnexport
	// startReady: the source EndpointSlice holds the expected ready count.
	startReady
)

// expectation is what every cluster's import of one Service should become.
type expectation struct {
	// tag names the phase that set it.
	tag      string
	service  string
	exported bool
	source   string
	// total and ready are the endpoints the source's slices hold, and how
	// many of them are ready.
	total, ready int
	startOn      startOn
	start        time.Time
	// done is, by cluster, when its import first matched.
	done map[string]time.Time
	// stages are, by cluster, when the watches first saw each step on the
	// way (see the stage* names); the source cluster's are its export's.
	stages map[string]map[string]time.Time
}

// Steps on the way from an export to its imports, as the watches see them.
const (
	stageFinalizer = "1 source: ServiceExport has mcsd's finalizer"
	// The registry's steps are seen by a watch of the registry (etcd only)
	// and count as the source's.
	stageRegExport    = "2 registry: the source's export record written"
	stageRegEndpoints = "3 registry: the source's endpoints record written"
	stageExported     = "4 source: ServiceExport Ready (published to the registry)"
	stageCreated      = "5 importer: ServiceImport created"
	stageIP           = "6 importer: ServiceImport has its cluster IP"
	stageSlices       = "7 importer: EndpointSlices hold every endpoint"
)

// importerStage reports whether step is one of an importing cluster's.
func importerStage(step string) bool { return strings.Contains(step, " importer: ") }

// stage records the first time the watches of cluster saw step. t.mu is held.
func (e *expectation) stage(cluster, step string, at time.Time) {
	if e.stages[cluster] == nil {
		e.stages[cluster] = map[string]time.Time{}
	}
	if _, ok := e.stages[cluster][step]; !ok {
		e.stages[cluster][step] = at
	}
}

// importState is what one cluster's watches show of one Service's import.
type importState struct {
	siExists bool
	ip       string
	slices   map[string]sliceSummary
}

type sliceSummary struct {
	source       string
	total, ready int
}

// outcome is how one expectation went.
type outcome struct {
	service string
	source  string
	start   time.Time
	done    map[string]time.Time
	stages  map[string]map[string]time.Time
}

type tracker struct {
	clusters []string

	mu      sync.Mutex
	want    map[string]*expectation            // the current one, by service
	all     []*expectation                     // every one, in order
	state   map[string]map[string]*importState // cluster -> service
	pending map[string]int                     // service -> clusters not done
	// addrs are the waits for a ready endpoint address, by service.
	addrs map[string][]*addrWait
	// changed is closed, and replaced, whenever a Service converges.
	changed chan struct{}
}

func newTracker(clusters []string) *tracker {
	t := &tracker{
		clusters: clusters,
		want:     map[string]*expectation{},
		state:    map[string]map[string]*importState{},
		pending:  map[string]int{},
		addrs:    map[string][]*addrWait{},
		changed:  make(chan struct{}),
	}
	for _, c := range clusters {
		t.state[c] = map[string]*importState{}
	}
	return t
}

// watch starts the watches of one cluster and waits until they have synced.
func (t *tracker) watch(ctx context.Context, c *testbed.Cluster, qps float32) error {
	cfg := restConfig(c, qps)
	ca, err := cache.New(cfg, cache.Options{Scheme: testbed.Scheme, DefaultNamespaces: map[string]cache.Config{namespace: {}}})
	if err != nil {
		return err
	}
	handle := func(obj client.Object, f func(o client.Object, deleted bool)) toolscache.ResourceEventHandlerFuncs {
		get := func(o any) (client.Object, bool) {
			if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			co, ok := o.(client.Object)
			return co, ok
		}
		return toolscache.ResourceEventHandlerFuncs{
			AddFunc: func(o any) {
				if co, ok := get(o); ok {
					f(co, false)
				}
			},
			UpdateFunc: func(_, o any) {
				if co, ok := get(o); ok {
					f(co, false)
				}
			},
			DeleteFunc: func(o any) {
				if co, ok := get(o); ok {
					f(co, true)
				}
			},
		}
	}
	for _, w := range []struct {
		obj client.Object
		f   func(o client.Object, deleted bool)
	}{
		{&mcsv1beta1.ServiceImport{}, func(o client.Object, del bool) { t.onImport(c.ID, o.(*mcsv1beta1.ServiceImport), del) }},
		{&discoveryv1.EndpointSlice{}, func(o client.Object, del bool) { t.onSlice(c.ID, o.(*discoveryv1.EndpointSlice), del) }},
		{&mcsv1beta1.ServiceExport{}, func(o client.Object, del bool) { t.onExport(c.ID, o.(*mcsv1beta1.ServiceExport), del) }},
	} {
		inf, err := ca.GetInformer(ctx, w.obj)
		if err != nil {
			return fmt.Errorf("watch %T in %s: %w", w.obj, c.ID, err)
		}
		if _, err := inf.AddEventHandler(handle(w.obj, w.f)); err != nil {
			return err
		}
	}
	go func() { _ = ca.Start(ctx) }()
	if !ca.WaitForCacheSync(ctx) {
		return fmt.Errorf("watches of %s did not sync", c.ID)
	}
	return nil
}

func (t *tracker) stateOf(cluster, svc string) *importState {
	st := t.state[cluster][svc]
	if st == nil {
		st = &importState{slices: map[string]sliceSummary{}}
		t.state[cluster][svc] = st
	}
	return st
}

func (t *tracker) onImport(cluster string, si *mcsv1beta1.ServiceImport, deleted bool) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.stateOf(cluster, si.Name)
	st.siExists = !deleted
	st.ip = ""
	if !deleted && len(si.Spec.IPs) > 0 {
		st.ip = si.Spec.IPs[0]
	}
	if e := t.want[si.Name]; e != nil && e.exported && !deleted {
		e.stage(cluster, stageCreated, now)
		if st.ip != "" {
			e.stage(cluster, stageIP, now)
		}
	}
	t.evaluate(cluster, si.Name, now)
}

// onRegistry records when the source cluster's export or endpoints record
// of an expected export is first seen written to the registry.
func (t *tracker) onRegistry(cluster, service, step string) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.want[service]; e != nil && e.exported && e.source == cluster {
		e.stage(cluster, step, now)
	}
}

func (t *tracker) onSlice(cluster string, s *discoveryv1.EndpointSlice, deleted bool) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	l := s.Labels
	switch l[discoveryv1.LabelManagedBy] {
	case wellknown.ManagedBy:
		svc := l[mcsv1beta1.LabelServiceName]
		if !deleted {
			t.seeAddresses(cluster, svc, s, now)
		}
		st := t.stateOf(cluster, svc)
		if deleted {
			delete(st.slices, s.Name)
		} else {
			total, ready := countEndpoints(s)
			st.slices[s.Name] = sliceSummary{source: l[mcsv1beta1.LabelSourceCluster], total: total, ready: ready}
		}
		t.evaluate(cluster, svc, now)
	case managedBy:
		svc := l[discoveryv1.LabelServiceName]
		e := t.want[svc]
		if deleted || e == nil || e.startOn != startReady || !e.start.IsZero() || e.source != cluster {
			return
		}
		if _, ready := countEndpoints(s); ready == e.ready {
			e.start = now
		}
	}
}

func (t *tracker) onExport(cluster string, se *mcsv1beta1.ServiceExport, deleted bool) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.want[se.Name]
	if e == nil || e.source != cluster {
		return
	}
	if e.exported && !deleted {
		if slices.Contains(se.Finalizers, exportFinalizer) {
			e.stage(cluster, stageFinalizer, now)
		}
		if meta.IsStatusConditionTrue(se.Status.Conditions, string(mcsv1beta1.ServiceExportConditionReady)) {
			e.stage(cluster, stageExported, now)
		}
	}
	if !e.start.IsZero() {
		return
	}
	switch {
	case e.startOn == startExport && !deleted && se.DeletionTimestamp == nil,
		e.startOn == startUnexport && (deleted || se.DeletionTimestamp != nil):
		e.start = now
	}
}

// addrWait is a wait for a ready endpoint address of a Service to appear
// in the imports of every cluster.
type addrWait struct {
	addr string
	// done is when each cluster's watches first saw it.
	done map[string]time.Time
	// all is closed once every cluster has.
	all chan struct{}
}

// awaitAddress starts a wait for a ready endpoint addr in the imports of
// svc in every cluster.
func (t *tracker) awaitAddress(svc, addr string) *addrWait {
	t.mu.Lock()
	defer t.mu.Unlock()
	w := &addrWait{addr: addr, done: map[string]time.Time{}, all: make(chan struct{})}
	t.addrs[svc] = append(t.addrs[svc], w)
	return w
}

// seeAddresses completes the waits of svc that the imported slice s of
// cluster satisfies. t.mu is held.
func (t *tracker) seeAddresses(cluster, svc string, s *discoveryv1.EndpointSlice, now time.Time) {
	waits := t.addrs[svc]
	if len(waits) == 0 {
		return
	}
	for _, ep := range s.Endpoints {
		if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
			continue
		}
		for _, w := range waits {
			if _, ok := w.done[cluster]; ok || !slices.Contains(ep.Addresses, w.addr) {
				continue
			}
			w.done[cluster] = now
			if len(w.done) == len(t.clusters) {
				close(w.all)
			}
		}
	}
	t.addrs[svc] = slices.DeleteFunc(waits, func(w *addrWait) bool { return len(w.done) == len(t.clusters) })
}

func countEndpoints(s *discoveryv1.EndpointSlice) (total, ready int) {
	for _, ep := range s.Endpoints {
		total++
		if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
			ready++
		}
	}
	return total, ready
}

// evaluate records when cluster's import of svc first matches what is
// expected of it. t.mu is held.
func (t *tracker) evaluate(cluster, svc string, now time.Time) {
	e := t.want[svc]
	if e == nil {
		return
	}
	if _, done := e.done[cluster]; done || !matches(t.state[cluster][svc], e) {
		return
	}
	if e.exported {
		e.stage(cluster, stageSlices, now)
	}
	e.done[cluster] = now
	t.pending[svc]--
	if t.pending[svc] == 0 {
		delete(t.pending, svc)
		// Wake every waiter.
		close(t.changed)
		t.changed = make(chan struct{})
	}
}

func matches(st *importState, e *expectation) bool {
	if !e.exported {
		return st == nil || (!st.siExists && len(st.slices) == 0)
	}
	if st == nil || !st.siExists || st.ip == "" {
		return false
	}
	var total, ready int
	for _, s := range st.slices {
		if s.source == e.source {
			total += s.total
			ready += s.ready
		}
	}
	return total == e.total && ready == e.ready
}

// expect sets what every cluster's import of svc should become. A start
// of zero waits for the source-side event startOn names.
func (t *tracker) expect(svc string, e expectation) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e.service = svc
	e.done = map[string]time.Time{}
	e.stages = map[string]map[string]time.Time{}
	t.want[svc] = &e
	t.all = append(t.all, &e)
	t.pending[svc] = len(t.clusters)
}

// setStart sets the start of every given Service's expectation.
func (t *tracker) setStart(svcs []string, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range svcs {
		if e := t.want[s]; e != nil {
			e.start = at
		}
	}
}

// isPending reports whether some cluster's import of svc has not matched
// its expectation yet.
func (t *tracker) isPending(svc string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.pending[svc] > 0
}

// pendingCount returns how many Services some cluster has not converged.
func (t *tracker) pendingCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.pending)
}

// waitAll waits until every expectation is met, or timeout.
func (t *tracker) waitAll(ctx context.Context, timeout time.Duration) error {
	err := t.waitFor(ctx, timeout, func() bool { return len(t.pending) == 0 })
	if err != nil {
		return fmt.Errorf("%d services not converged in every cluster: %w (e.g. %s)", t.pendingCount(), err, t.example())
	}
	return nil
}

// waitOne waits until svc's expectation is met, or timeout.
func (t *tracker) waitOne(ctx context.Context, svc string, timeout time.Duration) error {
	err := t.waitFor(ctx, timeout, func() bool { return t.pending[svc] == 0 })
	if err != nil {
		return fmt.Errorf("%s not converged in every cluster: %w (%s)", svc, err, t.example())
	}
	return nil
}

// waitFor waits until cond, called with t.mu held, is true; every met
// expectation wakes it.
func (t *tracker) waitFor(ctx context.Context, timeout time.Duration, cond func() bool) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		t.mu.Lock()
		ok, changed := cond(), t.changed
		t.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-changed:
		case <-deadline.C:
			return fmt.Errorf("timed out after %s", timeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (t *tracker) example() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	for svc := range t.pending {
		e := t.want[svc]
		for _, c := range t.clusters {
			if _, ok := e.done[c]; !ok {
				st := t.state[c][svc]
				return fmt.Sprintf("%s in %s: want exported=%v source=%s %d/%d ready, have %+v", svc, c, e.exported, e.source, e.ready, e.total, st)
			}
		}
	}
	return "none"
}

// outcomes returns how the expectations tagged tag went.
func (t *tracker) outcomes(tag string) []outcome {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []outcome
	for _, e := range t.all {
		if e.tag != tag {
			continue
		}
		o := outcome{service: e.service, source: e.source, start: e.start, done: map[string]time.Time{}}
		for c, d := range e.done {
			o.done[c] = d
		}
		o.stages = map[string]map[string]time.Time{}
		for c, st := range e.stages {
			o.stages[c] = maps.Clone(st)
		}
		out = append(out, o)
	}
	return out
}

// importIP returns the cluster IP of cluster's import of svc, "" if none.
func (t *tracker) importIP(cluster, svc string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if st := t.state[cluster][svc]; st != nil {
		return st.ip
	}
	return ""
}
