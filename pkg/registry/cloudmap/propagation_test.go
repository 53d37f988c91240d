package cloudmap

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	sd "github.com/aws/aws-sdk-go-v2/service/servicediscovery"
	"github.com/aws/aws-sdk-go-v2/service/servicediscovery/types"

	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/cloudmap/mototest"
	"github.com/mcsd-io/mcsd/pkg/registry/registrytest"
)

// lagAPI answers a DeregisterInstance of an instance registered less than
// lag ago with InstanceNotFound, and deletes nothing: Cloud Map's answer
// while a registration has not propagated yet.
type lagAPI struct {
	API
	lag time.Duration
	mu  sync.Mutex
	at  map[string]time.Time
}

func (l *lagAPI) RegisterInstance(ctx context.Context, in *sd.RegisterInstanceInput, optFns ...func(*sd.Options)) (*sd.RegisterInstanceOutput, error) {
	out, err := l.API.RegisterInstance(ctx, in, optFns...)
	if err == nil {
		l.mu.Lock()
		l.at[aws.ToString(in.InstanceId)] = time.Now()
		l.mu.Unlock()
	}
	return out, err
}

func (l *lagAPI) DeregisterInstance(ctx context.Context, in *sd.DeregisterInstanceInput, optFns ...func(*sd.Options)) (*sd.DeregisterInstanceOutput, error) {
	l.mu.Lock()
	at, ok := l.at[aws.ToString(in.InstanceId)]
	l.mu.Unlock()
	if ok && time.Since(at) < l.lag {
		return nil, &types.InstanceNotFound{Message: aws.String("the instance was recently registered")}
	}
	return l.API.DeregisterInstance(ctx, in, optFns...)
}

// TestDeregisterSoonAfterRegister: an endpoint that goes seconds after it
// came, while Cloud Map answers InstanceNotFound for its instance (the
// registration not propagated yet), is deregistered once it has: the put
// that removes it fails, and the one after it deregisters it, rather than
// the instance staying in Cloud Map for good.
func TestDeregisterSoonAfterRegister(t *testing.T) {
	srv := moto(t)
	id := registry.Identity{ClusterSet: randName("lag"), Cluster: "east"}
	opts := motoOptions(srv, id, 30*time.Second)
	client, err := NewClient(t.Context(), opts)
	mustDo(t, err)
	api := &lagAPI{API: client, lag: 2 * time.Second, at: map[string]time.Time{}}
	a := openClosed(t, func(ctx context.Context, opts Options) (*Backend, error) { return NewFromAPI(ctx, api, opts) }, opts)
	key := randWebKey()
	putWeb(t, a, key, "10.0.0.1", "10.0.0.2")

	err = a.PutEndpoints(t.Context(), key, webGroups("10.0.0.1"))
	if !errors.Is(err, errNotPropagated) {
		t.Errorf("put removing an instance registered just before: %v, want errNotPropagated", err)
	}
	c := rawClient(t, srv)
	poll.Until(t, 15*time.Second, "10.0.0.2 deregistered by a put tried again", func() (bool, string) {
		_ = a.PutEndpoints(t.Context(), key, webGroups("10.0.0.1"))
		got := rawAddrs(t, c, key)
		return slices.Equal(got, []string{"10.0.0.1"}), "instances at " + strings.Join(got, ",")
	})
}

// lagging tells, by key, whether it was first asked of less than lag ago.
type lagging struct {
	lag   time.Duration
	mu    sync.Mutex
	first map[string]time.Time
}

// young reports whether key was first asked of less than lag ago.
func (l *lagging) young(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.first == nil {
		l.first = map[string]time.Time{}
	}
	first, ok := l.first[key]
	if !ok {
		first = time.Now()
		l.first[key] = first
	}
	return time.Since(first) < l.lag
}

// unpropagatedAPI answers each GetInstance of an instance with
// InstanceNotFound until lag after the first GetInstance of it: Cloud
// Map's answer while a registration has not propagated yet.
type unpropagatedAPI struct {
	API
	lagging
}

func (u *unpropagatedAPI) GetInstance(ctx context.Context, in *sd.GetInstanceInput, optFns ...func(*sd.Options)) (*sd.GetInstanceOutput, error) {
	if u.young(aws.ToString(in.ServiceId) + "/" + aws.ToString(in.InstanceId)) {
		return nil, &types.InstanceNotFound{Message: aws.String("the instance was recently registered, and has not propagated yet")}
	}
	return u.API.GetInstance(ctx, in, optFns...)
}

// TestRecordReadBeforeItPropagated: a watcher reads a new service record
// (its registration's operation listed) before Cloud Map's information of
// it has propagated, and is told InstanceNotFound: it looks for it again
// at the next polls, and delivers the export once it is there, without
// waiting for another write of the record or the sweep.
func TestRecordReadBeforeItPropagated(t *testing.T) {
	a, rec := watchThrough(t, "unpropagated", func(c API) API {
		return &unpropagatedAPI{API: c, lagging: lagging{lag: 3 * time.Second}}
	})

	key := randWebKey()
	mustDo(t, a.PutExport(t.Context(), key, webSpec))
	rec.WaitFor(t, 20*time.Second, "east's export", func(_ registrytest.Event, v *registrytest.View) bool {
		_, ok := v.Exports[registry.RecordID{Cluster: "east", Service: key}]
		return ok
	})
}

// laggingDiscovery leaves out of each DiscoverInstances answer the
// instances it first saw less than lag ago: Cloud Map's discovery data,
// which a registration reaches after its operation has succeeded.
type laggingDiscovery struct {
	API
	lagging
}

func (l *laggingDiscovery) DiscoverInstances(ctx context.Context, in *sd.DiscoverInstancesInput, optFns ...func(*sd.Options)) (*sd.DiscoverInstancesOutput, error) {
	out, err := l.API.DiscoverInstances(ctx, in, optFns...)
	if err != nil || aws.ToString(in.NamespaceName) == DefaultSystemNamespace {
		return out, err // the service records lag in GetInstance's test
	}
	out.Instances = slices.DeleteFunc(out.Instances, func(inst types.HttpInstanceSummary) bool {
		return l.young(aws.ToString(in.NamespaceName) + "/" + aws.ToString(in.ServiceName) + "/" + aws.ToString(inst.InstanceId))
	})
	return out, nil
}

// TestEndpointsReadBeforeTheyPropagated: the feed lists the registration
// of an endpoint, and the read of its service does not show it yet: the
// service is read again at the next polls until it does.
func TestEndpointsReadBeforeTheyPropagated(t *testing.T) {
	a, rec := watchThrough(t, "lagging", func(c API) API {
		return &laggingDiscovery{API: c, lagging: lagging{lag: 3 * time.Second}}
	})

	key, id := exportWeb(t, a, "10.0.0.1")
	rec.WaitFor(t, 20*time.Second, "east's endpoints", func(_ registrytest.Event, v *registrytest.View) bool {
		return slices.Equal(addrsOf(v, id), []string{"10.0.0.1"})
	})
	putWeb(t, a, key, "10.0.0.2")
	rec.WaitFor(t, 20*time.Second, "east's endpoints moved", func(_ registrytest.Event, v *registrytest.View) bool {
		return slices.Equal(addrsOf(v, id), []string{"10.0.0.2"})
	})
}

// TestExpectInstance: what the operations of one window expect of each
// instance; a registration and a deregistration of one instance expect
// nothing of it.
func TestExpectInstance(t *testing.T) {
	expect := map[string]map[string]wanted{}
	now := time.Now()
	old := map[string]string{"READY": "true"}
	for _, op := range []*feedOp{
		{target: opTarget{service: "s", instance: "a"}, was: old, rev: 3},
		{target: opTarget{service: "s", instance: "b", deregister: true}, rev: 3},
		{target: opTarget{service: "s", instance: "c"}, rev: 3},
		{target: opTarget{service: "s", instance: "c", deregister: true}, rev: 3},
		{target: opTarget{service: "t"}},
	} {
		expectInstance(expect, op, now)
	}
	want := map[string]map[string]wanted{"s": {
		"a": {present: true, was: old, rev: 3, since: now},
		"b": {rev: 3, since: now},
		"c": {rev: 3, ambiguous: true, since: now},
	}}
	if !reflect.DeepEqual(expect, want) {
		t.Errorf("expect = %+v, want %+v", expect, want)
	}
}

// TestOwnEndpointsReadBeforeTheyPropagated: the backend's own watch reads
// its Service before Cloud Map's discovery data shows the endpoint it just
// registered (the one it deregistered already gone): that read does not
// mark the Service lost (its next put would register every instance
// again); the next polls read it again until it shows the endpoint.
func TestOwnEndpointsReadBeforeTheyPropagated(t *testing.T) {
	a := openLagging(t, "ownlag")
	rec := registrytest.StartWatch(t, a)
	key, id := exportWeb(t, a, "10.0.0.1")
	rec.WaitFor(t, time.Minute, "the endpoints", func(_ registrytest.Event, v *registrytest.View) bool {
		return slices.Equal(addrsOf(v, id), []string{"10.0.0.1"})
	})

	putWeb(t, a, key, "10.0.0.2")
	markedLost := false
	rec.WaitFor(t, time.Minute, "the endpoints moved", func(_ registrytest.Event, v *registrytest.View) bool {
		a.ownWatch.mu.Lock()
		markedLost = markedLost || a.ownWatch.lost[key]
		a.ownWatch.mu.Unlock()
		return slices.Equal(addrsOf(v, id), []string{"10.0.0.2"})
	})
	if markedLost {
		t.Error("a read before the registration propagated marked the Service lost")
	}
}

// discoverCounter counts the DiscoverInstances calls of each service, by
// namespace/name.
type discoverCounter struct {
	API
	mu    sync.Mutex
	calls map[string]int
}

func (d *discoverCounter) DiscoverInstances(ctx context.Context, in *sd.DiscoverInstancesInput, optFns ...func(*sd.Options)) (*sd.DiscoverInstancesOutput, error) {
	d.mu.Lock()
	d.calls[aws.ToString(in.NamespaceName)+"/"+aws.ToString(in.ServiceName)]++
	d.mu.Unlock()
	return d.API.DiscoverInstances(ctx, in, optFns...)
}

func (d *discoverCounter) get(key registry.ServiceKey) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls[key.String()]
}

// TestAnotherClustersetsInstanceNotAwaited: another clusterset exports the
// same Service in the account: its instance is in the Cloud Map service
// this clusterset's watcher reads, which never shows it (its reads are
// filtered on the clusterset). The watcher reads the service once for the
// operation, not again at every poll as for an instance yet to propagate.
func TestAnotherClustersetsInstanceNotAwaited(t *testing.T) {
	var api *discoverCounter
	a, rec := watchThrough(t, "mine", func(c API) API {
		api = &discoverCounter{API: c, calls: map[string]int{}}
		return api
	})
	key, id := exportWeb(t, a, "10.0.0.1")
	rec.WaitFor(t, 20*time.Second, "east's endpoints", func(_ registrytest.Event, v *registrytest.View) bool {
		return slices.Equal(addrsOf(v, id), []string{"10.0.0.1"})
	})

	other := openMember(t, moto(t), randName("other"), "east", 30*time.Second)
	before := api.get(key)
	putWeb(t, other, key, "10.0.0.9")
	poll.Until(t, 10*time.Second, "the watcher's read of the service for the other clusterset's registration", func() (bool, string) {
		n := api.get(key) - before
		return n > 0, fmt.Sprintf("%d reads", n)
	})
	// At a 250 ms poll, a service awaited is read some 12 times in 3 s.
	poll.Throughout(t, 3*time.Second, "the service read no more than a few times", func() (bool, string) {
		n := api.get(key) - before
		return n <= 3, fmt.Sprintf("%d reads", n)
	})
}

// watchThrough opens member east of a new clusterset named after name, and
// a watcher of it (cluster west) over the API wrap makes of a client; it
// returns east and the watch's recorder once its first read is delivered.
func watchThrough(t *testing.T, name string, wrap func(API) API) (*Backend, *registrytest.Recorder) {
	t.Helper()
	srv := moto(t)
	cs := randName(name)
	a := openMember(t, srv, cs, "east", 30*time.Second)
	rec := startWestThrough(t, srv, cs, wrap)
	rec.WaitFor(t, 20*time.Second, "the watch's first read", func(e registrytest.Event, _ *registrytest.View) bool { return e.Update != nil })
	return a, rec
}

// staleDiscovery answers DiscoverInstances of a service, once its answer
// changed, with the answer before (instances, attributes and revision) for
// lag: Cloud Map's discovery data, which a registration of an instance it
// holds already (its attributes changed) reaches after the operation.
type staleDiscovery struct {
	API
	lag   time.Duration
	mu    sync.Mutex
	shown map[string]*shownAnswer // by namespace/service
}

// shownAnswer is the answer staleDiscovery gives, and since when it is
// stale (zero while it is not).
type shownAnswer struct {
	out   *sd.DiscoverInstancesOutput
	stale time.Time
}

func (s *staleDiscovery) DiscoverInstances(ctx context.Context, in *sd.DiscoverInstancesInput, optFns ...func(*sd.Options)) (*sd.DiscoverInstancesOutput, error) {
	out, err := s.API.DiscoverInstances(ctx, in, optFns...)
	if err != nil || aws.ToString(in.NamespaceName) == DefaultSystemNamespace {
		return out, err
	}
	key := aws.ToString(in.NamespaceName) + "/" + aws.ToString(in.ServiceName)
	s.mu.Lock()
	defer s.mu.Unlock()
	prev := s.shown[key]
	switch {
	case prev == nil || aws.ToInt64(prev.out.InstancesRevision) == aws.ToInt64(out.InstancesRevision):
	case prev.stale.IsZero():
		prev.stale = time.Now()
		return prev.out, nil
	case time.Since(prev.stale) < s.lag:
		return prev.out, nil
	}
	s.shown[key] = &shownAnswer{out: out}
	return out, nil
}

// readyOf reports the readiness of each endpoint of id in v, by address.
func readyOf(v *registrytest.View, id registry.RecordID) map[string]bool {
	out := map[string]bool{}
	for _, g := range v.Endpoints[id].Groups {
		for _, e := range g.Endpoints {
			for _, a := range e.Addresses {
				out[a] = e.Ready
			}
		}
	}
	return out
}

// TestChangedEndpointReadBeforeItPropagated: an endpoint turns not ready,
// its instance registered again with other attributes under the same id,
// and the watcher's read of its service (the operation listed) still
// answers the attributes and revision from before: the service is read
// again at the next polls until its revision shows the registration, not
// left with the old readiness until the sweep.
func TestChangedEndpointReadBeforeItPropagated(t *testing.T) {
	a, rec := watchThrough(t, "stale", func(c API) API {
		return &staleDiscovery{API: c, lag: 2 * time.Second, shown: map[string]*shownAnswer{}}
	})
	key, id := exportWeb(t, a, "10.0.0.1", "10.0.0.2")
	rec.WaitFor(t, 20*time.Second, "east's endpoints, ready", func(_ registrytest.Event, v *registrytest.View) bool {
		return reflect.DeepEqual(readyOf(v, id), map[string]bool{"10.0.0.1": true, "10.0.0.2": true})
	})
	groups := webGroups("10.0.0.1", "10.0.0.2")
	groups[0].Endpoints[1].Ready = false
	mustDo(t, a.PutEndpoints(t.Context(), key, groups))
	rec.WaitFor(t, 15*time.Second, "10.0.0.2 not ready", func(_ registrytest.Event, v *registrytest.View) bool {
		return reflect.DeepEqual(readyOf(v, id), map[string]bool{"10.0.0.1": true, "10.0.0.2": false})
	})
}

// TestSettleOnAttributes: an instance read present before, registered
// again, shows by other attributes, or, its the one operation listed of
// the service, by a later revision; never by its presence alone, nor by a
// read older than what was read before. Each instance waits for
// propagation after its own last operation; one named by two operations at
// once waits for all of it, whatever it reads.
func TestSettleOnAttributes(t *testing.T) {
	now := time.Now()
	ready, notReady := map[string]string{"READY": "true"}, map[string]string{"READY": "false"}
	c := &serviceCache{read: true, revision: 7, instances: []instance{{ID: "a", Attrs: ready}, {ID: "b", Attrs: ready}}}
	w := &watcher{
		b:         &reader{now: func() time.Time { return now }},
		services:  map[string]*serviceCache{"s": c},
		unsettled: map[string]*unsettled{},
	}
	// poll is one poll listing ops, whose read of the service does read.
	poll := func(read func(), ops ...opTarget) (reread bool) {
		expect := map[string]map[string]wanted{}
		for _, t := range ops {
			op := &feedOp{target: t}
			w.noteBaseline(op, now)
			expectInstance(expect, op, now)
		}
		again := w.unsettledServices(expect)
		read()
		w.settle(expect)
		return len(again) > 0
	}
	same := func() {}
	set := func(rev int64, a, b map[string]string) func() {
		return func() { c.revision, c.instances = rev, []instance{{ID: "a", Attrs: a}, {ID: "b", Attrs: b}} }
	}
	awaited := func() []string {
		if u := w.unsettled["s"]; u != nil {
			return slices.Sorted(maps.Keys(u.expect))
		}
		return nil
	}
	check := func(what string, want ...string) {
		t.Helper()
		if got := awaited(); !slices.Equal(got, want) {
			t.Errorf("%s: awaited %v, want %v", what, got, want)
		}
	}

	poll(same, opTarget{service: "s", instance: "a"})
	check("a registered again, read with its attributes and revision from before", "a")
	if !poll(set(6, notReady, ready)) {
		t.Error("an unsettled service not read again")
	}
	check("a read with other attributes at an older revision", "a")
	poll(set(8, ready, ready))
	check("the one operation listed, read at a later revision", []string{}...)

	// Both registered again; the revision moved by one of them: the other
	// waits for its attributes.
	poll(set(9, notReady, ready), opTarget{service: "s", instance: "a"}, opTarget{service: "s", instance: "b"})
	check("a's registration read, b's not", "b")
	now = now.Add(50 * time.Second)
	poll(same, opTarget{service: "s", instance: "a"}) // a flaps back while b waits
	check("a registered again, read as before", "a", "b")
	now = now.Add(20 * time.Second)
	poll(same)
	check(fmt.Sprintf("%s after b's operation, %s after a's", 70*time.Second, 20*time.Second), "a")
	poll(set(10, ready, ready))
	check("a read with its new attributes", []string{}...)

	// Another clusterset's operation on the service moves the revision too.
	now = now.Add(2 * propagation) // the operations above forgotten
	other := &feedOp{target: opTarget{service: "s", instance: "other"}}
	w.noteBaseline(other, now)
	poll(same, opTarget{service: "s", instance: "a"})
	poll(set(11, ready, ready))
	check("a later revision, with another operation listed", "a")

	// Two operations on one instance, their order unknown: awaited until
	// the wait ends, whatever the reads.
	now = now.Add(2 * propagation)
	poll(set(12, ready, notReady), opTarget{service: "s", instance: "b", deregister: true}, opTarget{service: "s", instance: "b"})
	check("b deregistered and registered at once, read changed", "b")
	// An instance named again while an earlier operation on it is awaited.
	now = now.Add(2 * propagation)
	poll(set(13, ready, ready))
	poll(same, opTarget{service: "s", instance: "a"})
	poll(set(14, notReady, ready), opTarget{service: "s", instance: "a"})
	check("a registered again while awaited, read changed", "a")
	now = now.Add(propagation / 2)
	poll(same)
	check("half the wait after", "a")
	now = now.Add(propagation)
	if poll(same) {
		t.Error("read again after the wait ended")
	}
	check("after the wait", []string{}...)
}

// TestOwnOperationsSettleByWhatWasWritten: the backend's own registration
// shows when a read has the attributes it wrote, even those read before
// its operation was listed; of two of its own operations on one instance,
// the later is awaited, not both.
func TestOwnOperationsSettleByWhatWasWritten(t *testing.T) {
	now := time.Now()
	ready, notReady := map[string]string{"READY": "true"}, map[string]string{"READY": "false"}
	c := &serviceCache{read: true, revision: 7, instances: []instance{{ID: "a", Attrs: notReady}}}
	w := &watcher{
		b:         &reader{now: func() time.Time { return now }},
		services:  map[string]*serviceCache{"s": c},
		unsettled: map[string]*unsettled{},
	}
	poll := func(ops ...opTarget) {
		expect := map[string]map[string]wanted{}
		for _, t := range ops {
			op := &feedOp{target: t}
			w.noteBaseline(op, now)
			expectInstance(expect, op, now)
		}
		w.unsettledServices(expect)
		w.settle(expect)
	}
	// Read already, before the operation was listed.
	poll(opTarget{service: "s", instance: "a", attrs: notReady, at: now})
	if u := w.unsettled["s"]; u != nil {
		t.Errorf("own registration read with the attributes written: awaited %+v", u.expect)
	}
	// Two of its own: the later, not yet read.
	poll(opTarget{service: "s", instance: "a", attrs: ready, at: now.Add(time.Second)},
		opTarget{service: "s", instance: "a", attrs: notReady, at: now})
	if u := w.unsettled["s"]; u == nil || u.expect["a"].ambiguous || !maps.Equal(u.expect["a"].attrs, ready) {
		t.Fatalf("two own registrations, the later not read: awaited %+v, want a with the later's attributes", u)
	}
	c.revision, c.instances = 8, []instance{{ID: "a", Attrs: ready}}
	poll()
	if u := w.unsettled["s"]; u != nil {
		t.Errorf("the later registration read: awaited %+v", u.expect)
	}
}

// TestUnsettledKeysForTheGuard: the guard leaves alone a service whose
// reads do not show yet an operation of the backend's own, and judges one
// where only another's, or another's beside its own on one instance
// (someone else deleted it, say), is awaited.
func TestUnsettledKeysForTheGuard(t *testing.T) {
	now := time.Now()
	svc := func(name string) *serviceCache {
		return &serviceCache{svc: service{Name: name, NS: namespace{Name: "shop"}}, read: true}
	}
	w := &watcher{
		services: map[string]*serviceCache{"own": svc("own"), "other": svc("other"), "both": svc("both")},
		unsettled: map[string]*unsettled{
			"own":   {expect: map[string]wanted{"a": {present: true, at: now}}},
			"other": {expect: map[string]wanted{"a": {present: true}}},
			"both":  {expect: map[string]wanted{"a": {present: true, at: now, ambiguous: true}}},
		},
	}
	want := map[registry.ServiceKey]bool{{Namespace: "shop", Name: "own"}: true}
	if got := w.unsettledKeys(); !reflect.DeepEqual(got, want) {
		t.Errorf("unsettledKeys() = %v, want %v", got, want)
	}
}

// TestOwnEndpointsWrittenJustBeforeTheWatch: the backend registers an
// endpoint, and its watch starts before Cloud Map's discovery data shows
// it. The watch's first read misses it, and the operation was done before
// the feed began: the feed still judges it (its target is the backend's
// own, known without a call), and the next polls read the Service again
// until the endpoint shows, not the sweep minutes later.
func TestOwnEndpointsWrittenJustBeforeTheWatch(t *testing.T) {
	a := openLagging(t, "ownfirst")
	_, id := exportWeb(t, a, "10.0.0.1")
	rec := registrytest.StartWatch(t, a)
	rec.WaitFor(t, time.Minute, "the endpoints", func(_ registrytest.Event, v *registrytest.View) bool {
		return slices.Equal(addrsOf(v, id), []string{"10.0.0.1"})
	})
}

// TestOthersEndpointsWrittenJustBeforeTheWatch: another cluster's
// endpoints, registered just before a watcher starts and not yet in
// Cloud Map's discovery data when its first sweep reads them, are read
// again by the polls until they show, not left to the next sweep.
func TestOthersEndpointsWrittenJustBeforeTheWatch(t *testing.T) {
	srv := moto(t)
	cs := randName("othersfirst")
	a := openMember(t, srv, cs, "east", 30*time.Second)
	_, id := exportWeb(t, a, "10.0.0.1")
	rec := startWestThrough(t, srv, cs, func(c API) API {
		return &laggingDiscovery{API: c, lagging: lagging{lag: 3 * time.Second}}
	})
	rec.WaitFor(t, time.Minute, "east's endpoints", func(_ registrytest.Event, v *registrytest.View) bool {
		return slices.Equal(addrsOf(v, id), []string{"10.0.0.1"})
	})
}

// TestOthersEndpointWithdrawnJustBeforeTheWatch: another cluster's
// endpoint, deregistered just before a watcher starts and still in Cloud
// Map's discovery data when its first sweep reads the service (the answer
// from before the deregistration, staleDiscovery), is gone from the watch
// once the data is current, through the polls, not left to the next sweep.
func TestOthersEndpointWithdrawnJustBeforeTheWatch(t *testing.T) {
	srv := moto(t)
	cs := randName("othersgone")
	a := openMember(t, srv, cs, "east", 30*time.Second)
	key, id := exportWeb(t, a, "10.0.0.1", "10.0.0.2")
	old, err := rawClient(t, srv).DiscoverInstances(t.Context(), &sd.DiscoverInstancesInput{
		NamespaceName: aws.String(key.Namespace), ServiceName: aws.String(key.Name), HealthStatus: types.HealthStatusFilterAll,
	})
	mustDo(t, err)
	var attrs []map[string]string
	for _, in := range old.Instances {
		attrs = append(attrs, in.Attributes)
	}
	if got := ipv4s(slices.Values(attrs)); !slices.Equal(got, []string{"10.0.0.1", "10.0.0.2"}) {
		t.Fatalf("Cloud Map's discovery data of %s shows endpoints %v, want both of east's", key, got)
	}
	mustDo(t, a.PutEndpoints(t.Context(), key, webGroups("10.0.0.1")))
	rec := startWestThrough(t, srv, cs, func(c API) API {
		// The answer from before, until 3 s after the first read.
		return &staleDiscovery{API: c, lag: 3 * time.Second, shown: map[string]*shownAnswer{key.Namespace + "/" + key.Name: {out: old}}}
	})
	rec.WaitFor(t, 20*time.Second, "the first read, from before the withdrawal", func(_ registrytest.Event, v *registrytest.View) bool {
		return slices.Equal(addrsOf(v, id), []string{"10.0.0.1", "10.0.0.2"})
	})
	rec.WaitFor(t, time.Minute, "east's endpoint 10.0.0.2 withdrawn", func(_ registrytest.Event, v *registrytest.View) bool {
		return slices.Equal(addrsOf(v, id), []string{"10.0.0.1"})
	})
}

// exportWeb exports a new web Service from a, with endpoints at addrs, and
// returns its key and the id of a's records of it.
func exportWeb(t *testing.T, a *Backend, addrs ...string) (registry.ServiceKey, registry.RecordID) {
	t.Helper()
	key := randWebKey()
	putWeb(t, a, key, addrs...)
	return key, registry.RecordID{Cluster: a.opts.Identity.Cluster, Service: key}
}

// startWestThrough starts a watch of cluster west of clusterset cs on srv,
// through wrap of its Cloud Map client, its sweep minutes away: what the
// watch sees after its first read, it sees through its polls.
func startWestThrough(t *testing.T, srv *mototest.Server, cs string, wrap func(API) API) *registrytest.Recorder {
	t.Helper()
	wOpts := motoOptions(srv, registry.Identity{ClusterSet: cs, Cluster: "west"}, 30*time.Second)
	wOpts.SweepInterval = 10 * time.Minute
	client, err := NewClient(t.Context(), wOpts)
	mustDo(t, err)
	api := wrap(client)
	w := openClosed(t, func(ctx context.Context, opts Options) (*Watcher, error) { return NewWatcherFromAPI(ctx, api, opts) }, wOpts)
	return registrytest.StartWatch(t, w)
}

// openLagging opens cluster east of a new clusterset named after name,
// whose reads of Cloud Map's discovery data show an instance 3 s after
// they first could (laggingDiscovery), and whose sweep is minutes away:
// what the backend's watch sees, it sees through its polls.
func openLagging(t *testing.T, name string) *Backend {
	t.Helper()
	opts := motoOptions(moto(t), registry.Identity{ClusterSet: randName(name), Cluster: "east"}, 30*time.Second)
	opts.SweepInterval = 10 * time.Minute
	client, err := NewClient(t.Context(), opts)
	mustDo(t, err)
	api := &laggingDiscovery{API: client, lagging: lagging{lag: 3 * time.Second}}
	return openClosed(t, func(ctx context.Context, opts Options) (*Backend, error) { return NewFromAPI(ctx, api, opts) }, opts)
}
