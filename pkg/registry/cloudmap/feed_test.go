package cloudmap

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	sd "github.com/aws/aws-sdk-go-v2/service/servicediscovery"
	"github.com/aws/smithy-go"

	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/cloudmap/mototest"
	"github.com/mcsd-io/mcsd/pkg/registry/registrytest"
)

// countingWatcher opens a read-only watcher of opts over a countingAPI.
func countingWatcher(t *testing.T, opts Options) (*Watcher, *countingAPI) {
	t.Helper()
	counting := newCountingAPI(t, opts)
	newFn := func(ctx context.Context, opts Options) (*Watcher, error) {
		return NewWatcherFromAPI(ctx, counting, opts)
	}
	return openClosed(t, newFn, opts), counting
}

// feedOptions are the options of a watcher of clusterset cs against srv
// that sweeps once an hour: it sees changes through the change feed alone.
func feedOptions(srv *mototest.Server, cs string, ttl time.Duration) Options {
	opts := motoOptions(srv, registry.Identity{ClusterSet: cs}, ttl)
	opts.SweepInterval = time.Hour
	return opts
}

// TestFeedSeesChanges checks that, once the first sweep has read
// everything, a watcher sees new exports, endpoint changes and withdrawals
// of mcsd and of an AWS-controller-shaped writer through the change feed
// alone: no listing, no revision check.
func TestFeedSeesChanges(t *testing.T) {
	srv := moto(t)
	c := rawClient(t, srv)
	ctx := t.Context()
	cs := randName("feed")
	key := randWebKey()
	a := openMember(t, srv, cs, "a", 30*time.Second)

	w, counting := countingWatcher(t, feedOptions(srv, cs, 30*time.Second))
	rec := registrytest.StartWatch(t, w)
	waitFirstUpdate(t, rec)
	sweep := map[string]int{}
	for _, op := range []string{OpListNamespaces, OpListServices, OpDiscoverInstancesRevision} {
		sweep[op] = counting.get(op)
	}

	aID := registry.RecordID{Cluster: "a", Service: key}
	putWeb(t, a, key, "10.0.0.1")
	rec.WaitFor(t, 10*time.Second, "a's new export and endpoint", func(_ registrytest.Event, v *registrytest.View) bool {
		_, x := v.Exports[aID]
		return x && hasOneGroupOf(v, aID, 1)
	})
	mustDo(t, a.PutEndpoints(ctx, key, webGroups("10.0.0.1", "10.0.0.2")))
	rec.WaitFor(t, 10*time.Second, "a's second endpoint", func(_ registrytest.Event, v *registrytest.View) bool {
		return hasOneGroupOf(v, aID, 2)
	})

	// The AWS controller's writes are ordinary instance operations.
	svcID := a.own[key].svc.ID
	awsInst := awsControllerInstance("aws-east", cs, "10.1.0.5", 8080, true, "1665108776000")
	_, err := c.RegisterInstance(ctx, &sd.RegisterInstanceInput{ServiceId: aws.String(svcID), InstanceId: aws.String(awsInst.ID), Attributes: awsInst.Attrs})
	mustDo(t, err)
	awsID := registry.RecordID{Cluster: "aws-east", Service: key}
	rec.WaitFor(t, 10*time.Second, "the AWS controller's endpoint", func(_ registrytest.Event, v *registrytest.View) bool {
		return len(v.Endpoints[awsID].Groups) == 1
	})
	_, err = c.DeregisterInstance(ctx, &sd.DeregisterInstanceInput{ServiceId: aws.String(svcID), InstanceId: aws.String(awsInst.ID)})
	mustDo(t, err)
	mustDo(t, a.DeleteExport(ctx, key))
	rec.WaitFor(t, 10*time.Second, "both withdrawals", func(_ registrytest.Event, v *registrytest.View) bool {
		_, x := v.Exports[aID]
		_, e := v.Endpoints[awsID]
		return !x && !e
	})

	for op, n := range sweep {
		if got := counting.get(op); got != n {
			t.Errorf("%d %s calls after the first sweep, want none: the feed alone sees changes", got-n, op)
		}
	}
	if counting.get(OpListOperations) == 0 || counting.get(OpGetOperation) == 0 {
		t.Errorf("no ListOperations or GetOperation calls: the changes were not seen through the feed")
	}
}

// TestSweepRepairsMissedOperations hides every operation from a watcher's
// change feed: what changed is still seen, by the next sweep.
func TestSweepRepairsMissedOperations(t *testing.T) {
	srv := moto(t)
	ctx := t.Context()
	cs := randName("sweep")
	a, key := openExporting(t, motoOptions(srv, registry.Identity{ClusterSet: cs, Cluster: "a"}, 30*time.Second), "10.0.0.1")

	opts := motoOptions(srv, registry.Identity{ClusterSet: cs}, 30*time.Second)
	opts.SweepInterval = 2 * time.Second
	w, counting := countingWatcher(t, opts)
	rec := registrytest.StartWatch(t, w)
	aID := registry.RecordID{Cluster: "a", Service: key}
	rec.WaitFor(t, 15*time.Second, "a's endpoint", func(_ registrytest.Event, v *registrytest.View) bool {
		return len(v.Endpoints[aID].Groups) == 1
	})

	counting.hideOps.Store(true)
	sweeps := counting.get(OpListNamespaces)
	mustDo(t, a.PutEndpoints(ctx, key, webGroups("10.0.0.1", "10.0.0.2")))
	newKey := registry.ServiceKey{Namespace: key.Namespace, Name: "api"}
	mustDo(t, a.PutExport(ctx, newKey, webSpec))
	rec.WaitFor(t, 15*time.Second, "the missed changes", func(_ registrytest.Event, v *registrytest.View) bool {
		_, x := v.Exports[registry.RecordID{Cluster: "a", Service: newKey}]
		return x && hasOneGroupOf(v, aID, 2)
	})
	if counting.get(OpListNamespaces) == sweeps {
		t.Errorf("the changes were seen without a sweep, though the feed listed no operation")
	}
}

// TestFeedClockSkew checks that watchers whose clocks are minutes ahead of
// or behind Cloud Map's see changes through the feed.
func TestFeedClockSkew(t *testing.T) {
	srv := moto(t)
	cs := randName("skew")
	key := randWebKey()
	// A TTL longer than the skew, so that a's heartbeat counts as alive.
	a := openMember(t, srv, cs, "a", 10*time.Minute)
	var recs []*registrytest.Recorder
	for _, skew := range []time.Duration{3 * time.Minute, -3 * time.Minute} {
		opts := feedOptions(srv, cs, 10*time.Minute)
		opts.now = func() time.Time { return time.Now().Add(skew) }
		w, _ := countingWatcher(t, opts)
		rec := registrytest.StartWatch(t, w)
		waitFirstUpdate(t, rec)
		recs = append(recs, rec)
	}
	aID := registry.RecordID{Cluster: "a", Service: key}
	for i := range 2 {
		addrs := []string{"10.0.0.1", "10.0.0.2"}[:i+1]
		putWeb(t, a, key, addrs...)
		for _, rec := range recs {
			rec.WaitFor(t, 10*time.Second, "a's endpoints", func(_ registrytest.Event, v *registrytest.View) bool {
				return hasOneGroupOf(v, aID, len(addrs))
			})
		}
	}
}

// TestFeedThrottling throttles the change feed's calls only (ListOperations,
// GetOperation) while another cluster changes its endpoints: the watcher
// reports the connection lost, deletes nothing, and sees the change once
// the throttling ends.
func TestFeedThrottling(t *testing.T) {
	srv := moto(t)
	ctx := t.Context()
	cs := randName("feedthrottle")
	a, key := openExporting(t, motoOptions(srv, registry.Identity{ClusterSet: cs, Cluster: "a"}, 30*time.Second), "10.0.0.1")

	proxy := newThrottlingProxy(t, srv.URL, OpListOperations, OpGetOperation)
	opts := feedOptions(srv, cs, 30*time.Second)
	opts.Endpoint = proxy.URL
	opts.MaxAttempts = 1
	rec := registrytest.StartWatch(t, openWatcher(t, opts))
	aID := registry.RecordID{Cluster: "a", Service: key}
	rec.WaitFor(t, 15*time.Second, "a's endpoint", func(_ registrytest.Event, v *registrytest.View) bool {
		return v.Connected && len(v.Endpoints[aID].Groups) == 1
	})

	proxy.throttling.Store(true)
	mustDo(t, a.PutEndpoints(ctx, key, webGroups("10.0.0.1", "10.0.0.2")))
	rec.WaitFor(t, 10*time.Second, "the connection lost", func(e registrytest.Event, v *registrytest.View) bool {
		return e.Update == nil && !v.Connected
	})
	proxy.throttling.Store(false)
	var disconnected bool
	events := rec.WaitFor(t, 15*time.Second, "reconnection and a's new endpoint", func(e registrytest.Event, v *registrytest.View) bool {
		disconnected = disconnected || e.Update == nil && !e.Connected
		return v.Connected && hasOneGroupOf(v, aID, 2)
	})
	for _, e := range events {
		if u := e.Update; u != nil && (u.Full || len(u.DeletedExports) > 0 || len(u.DeletedEndpoints) > 0 || len(u.DeletedClusters) > 0) {
			t.Errorf("throttling of the feed deleted or replaced imports: %s", e)
		}
	}
	if proxy.throttled.Load() == 0 {
		t.Errorf("no call throttled")
	}
}

// TestServiceRecordMoved checks that a backend that starts on a service
// record kept where mcsd kept it before (in the Service's Cloud Map
// service, read by the AWS controller as an endpoint) moves it to the
// records service, and that watchers see the export all along.
func TestServiceRecordMoved(t *testing.T) {
	srv := moto(t)
	c := rawClient(t, srv)
	ctx := t.Context()
	id := registry.Identity{ClusterSet: randName("move"), Cluster: "a"}
	opts := motoOptions(srv, id, 30*time.Second)
	a, key := openExporting(t, opts, "10.0.0.1")

	// Put the record back where an older mcsd wrote it.
	prefix := ownerPrefix(id)
	recs := rawRecords(t, c, id.ClusterSet, key)
	attrs := recs[recordID(prefix, key)]
	delete(attrs, attrNamespace)
	delete(attrs, attrService)
	svcID := a.own[key].svc.ID
	_, err := c.RegisterInstance(ctx, &sd.RegisterInstanceInput{ServiceId: aws.String(svcID), InstanceId: aws.String(serviceRecordID(prefix)), Attributes: attrs})
	mustDo(t, err)
	_, err = c.DeregisterInstance(ctx, &sd.DeregisterInstanceInput{ServiceId: aws.String(a.systemService(recordsService).ID), InstanceId: aws.String(recordID(prefix, key))})
	mustDo(t, err)
	mustDo(t, a.Close())

	w, _ := countingWatcher(t, motoOptions(srv, registry.Identity{ClusterSet: id.ClusterSet}, 30*time.Second))
	rec := registrytest.StartWatch(t, w)
	aID := registry.RecordID{Cluster: "a", Service: key}
	rec.WaitFor(t, 15*time.Second, "a's export from the record in the old place", func(_ registrytest.Event, v *registrytest.View) bool {
		_, x := v.Exports[aID]
		return x
	})

	openBackend(t, opts)
	if raw := rawInstances(t, c, key.Namespace, key.Name); len(raw) != 1 || raw[serviceRecordID(prefix)] != nil {
		t.Errorf("instances of %s after the restart: %v, want the endpoint only", key, raw)
	}
	if recs := rawRecords(t, c, id.ClusterSet, key); len(recs) != 1 {
		t.Errorf("service records after the restart: %v, want a's", recs)
	}
	events := rec.WaitFor(t, 10*time.Second, "the move seen", func(_ registrytest.Event, v *registrytest.View) bool {
		return len(v.Endpoints[aID].Groups) == 1
	})
	for _, e := range events {
		if u := e.Update; u != nil && len(u.DeletedExports) > 0 {
			t.Errorf("the move deleted the export: %s", e)
		}
	}
}

// TestGoneClusterReadsNoSooner: a cluster with a short TTL makes a
// watcher read the heartbeats more often while it lives, and no longer
// once it has expired.
func TestGoneClusterReadsNoSooner(t *testing.T) {
	srv := moto(t)
	cs := randName("gone")
	short := openMember(t, srv, cs, "short", time.Second)
	// This watcher's own heartbeats are read every 10 s.
	w, counting := countingWatcher(t, feedOptions(srv, cs, 30*time.Second))
	rec := registrytest.StartWatch(t, w)
	rec.WaitFor(t, 15*time.Second, "the short-lived cluster", func(_ registrytest.Event, v *registrytest.View) bool {
		_, ok := v.Clusters["short"]
		return ok
	})
	mustDo(t, short.Close())
	rec.WaitFor(t, 15*time.Second, "the short-lived cluster expired", func(e registrytest.Event, _ *registrytest.View) bool {
		return e.Update != nil && slices.Contains(e.Update.DeletedClusters, "short")
	})
	lists := counting.get(OpListServices)
	start := time.Now()
	rec.Quiet(t, 3*time.Second, "no change", func(e registrytest.Event) bool { return e.Update != nil })
	if n := counting.get(OpListServices) - lists; n > 1 {
		t.Errorf("%d ListServices calls in %s after the 1 s-TTL cluster expired, want at most 1: heartbeats are read every 10 s", n, time.Since(start).Round(time.Millisecond))
	}

	// It starts again, right after a periodic read of the heartbeats (the
	// next is 10 s away): its first export leads the feed to its heartbeat.
	read := counting.get(OpListServices)
	poll.Until(t, 15*time.Second, "a periodic read of the heartbeats", func() (bool, string) {
		return counting.get(OpListServices) != read, ""
	})
	restarted := time.Now()
	again := openMember(t, srv, cs, "short", time.Second)
	key := randWebKey()
	mustDo(t, again.PutExport(t.Context(), key, webSpec))
	rec.WaitFor(t, 15*time.Second, "the restarted cluster's export", func(_ registrytest.Event, v *registrytest.View) bool {
		_, ok := v.Exports[registry.RecordID{Cluster: "short", Service: key}]
		return ok
	})
	if d := time.Since(restarted); d > 8*time.Second {
		t.Errorf("the restarted cluster's export was seen %s after it started, want it within a few polls, before the next periodic read of the heartbeats", d.Round(time.Millisecond))
	}
}

// TestRecordsServiceCreatedAgain deletes the records service under a
// watcher that sees changes through the feed alone: the records written
// to the service made in its place are seen at the next poll, not at the
// next sweep.
func TestRecordsServiceCreatedAgain(t *testing.T) {
	srv := moto(t)
	c := rawClient(t, srv)
	ctx := t.Context()
	cs := randName("recreated")
	system := randName("sys") + ".system"
	member := func(cluster string) *Backend {
		opts := motoOptions(srv, registry.Identity{ClusterSet: cs, Cluster: cluster}, 30*time.Second)
		opts.SystemNamespace = system
		return openBackend(t, opts)
	}
	a, b := member("a"), member("b")
	opts := feedOptions(srv, cs, 30*time.Second)
	opts.SystemNamespace = system
	w, _ := countingWatcher(t, opts)
	rec := registrytest.StartWatch(t, w)
	waitFirstUpdate(t, rec)

	key := randWebKey()
	aID, bID := registry.RecordID{Cluster: "a", Service: key}, registry.RecordID{Cluster: "b", Service: key}
	putWeb(t, a, key, "10.0.0.1")
	rec.WaitFor(t, 10*time.Second, "a's export", func(_ registrytest.Event, v *registrytest.View) bool {
		_, x := v.Exports[aID]
		return x
	})

	// Somebody empties and deletes the records service.
	old := a.systemService(recordsService).ID
	for id := range rawInstances(t, c, system, recordsService) {
		_, err := c.DeregisterInstance(ctx, &sd.DeregisterInstanceInput{ServiceId: aws.String(old), InstanceId: aws.String(id)})
		mustDo(t, err)
	}
	_, err := c.DeleteService(ctx, &sd.DeleteServiceInput{Id: aws.String(old)})
	mustDo(t, err)

	// b's first record makes it again.
	putWeb(t, b, key, "10.0.0.2")
	if now := b.systemService(recordsService).ID; now == old {
		t.Fatalf("b wrote its record to the deleted records service %s", old)
	}
	rec.WaitFor(t, 10*time.Second, "b's export, in the records service made again", func(_ registrytest.Event, v *registrytest.View) bool {
		_, x := v.Exports[bID]
		return x
	})
	// a writes its record again on its next change.
	spec := webSpec
	spec.Ports = []registry.Port{{Name: "http", Protocol: webSpec.Ports[0].Protocol, Port: 81}}
	mustDo(t, a.PutExport(ctx, key, spec))
	rec.WaitFor(t, 10*time.Second, "a's export again", func(_ registrytest.Event, v *registrytest.View) bool {
		_, x := v.Exports[aID]
		_, y := v.Exports[bID]
		return x && y
	})
}

// TestHeartbeatsCostNoCallEach checks that other clusters' heartbeats cost
// an idle watcher no call per heartbeat (they are service descriptions,
// which the change feed does not list, read in one ListServices), that
// they keep the clusters alive, and that a cluster that starts is seen at
// once, not at the next periodic read of the heartbeats.
func TestHeartbeatsCostNoCallEach(t *testing.T) {
	srv := moto(t)
	ctx := t.Context()
	cs := randName("beats")
	// Heartbeats every 2 s, read every 2 s.
	const ttl = 6 * time.Second
	members := []string{"a", "b", "c", "d"}
	for _, id := range members {
		openMember(t, srv, cs, id, ttl)
	}
	w, counting := countingWatcher(t, feedOptions(srv, cs, ttl))
	rec := registrytest.StartWatch(t, w)
	rec.WaitFor(t, 15*time.Second, "every member alive", func(_ registrytest.Event, v *registrytest.View) bool {
		return len(v.Clusters) == len(members)
	})
	start := time.Now()
	getOps, lists := counting.get(OpGetOperation), counting.get(OpListServices)
	// Two and a half TTLs: a cluster whose heartbeats were not read would
	// be deleted.
	rec.Quiet(t, 5*ttl/2, "every member alive", func(e registrytest.Event) bool {
		return e.Update != nil && len(e.Update.DeletedClusters) > 0
	})
	elapsed := time.Since(start)
	if n := counting.get(OpGetOperation) - getOps; n != 0 {
		t.Errorf("%d GetOperation calls while %d clusters beat for %s, want none", n, len(members), elapsed.Round(time.Second))
	}
	if n, most := counting.get(OpListServices)-lists, int(elapsed/(ttl/3))+2; n > most {
		t.Errorf("%d ListServices calls in %s, want at most %d (one per read of the heartbeats)", n, elapsed.Round(time.Second), most)
	}

	// A new cluster, in a clusterset whose heartbeats are read every 10 s:
	// its first records lead the feed to its heartbeat at once.
	cs2 := randName("join")
	w2, counting2 := countingWatcher(t, feedOptions(srv, cs2, 30*time.Second))
	rec2 := registrytest.StartWatch(t, w2)
	waitFirstUpdate(t, rec2)
	// Right after a periodic read of the heartbeats: the next is 10 s away.
	read := counting2.get(OpListServices)
	deadline := time.Now().Add(15 * time.Second)
	for counting2.get(OpListServices) == read && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	joined := time.Now()
	key := randWebKey()
	e := openMember(t, srv, cs2, "e", 30*time.Second)
	mustDo(t, e.PutExport(ctx, key, webSpec))
	rec2.WaitFor(t, 15*time.Second, "the new cluster's export", func(_ registrytest.Event, v *registrytest.View) bool {
		_, ok := v.Exports[registry.RecordID{Cluster: "e", Service: key}]
		return ok
	})
	if d := time.Since(joined); d > 8*time.Second {
		t.Errorf("the new cluster's export was seen %s after its backend started, want it within a few polls, before the next periodic read of the heartbeats", d.Round(time.Millisecond))
	}
}

// denyingAPI refuses GetService on the services of deny, as an IAM policy
// that grants mcsd its own namespaces alone does.
type denyingAPI struct {
	API
	mu   sync.Mutex
	deny map[string]bool
}

func (d *denyingAPI) GetService(ctx context.Context, in *sd.GetServiceInput, optFns ...func(*sd.Options)) (*sd.GetServiceOutput, error) {
	d.mu.Lock()
	denied := d.deny[aws.ToString(in.Id)]
	d.mu.Unlock()
	if denied {
		return nil, &smithy.GenericAPIError{Code: "AccessDeniedException", Message: "not authorized to perform servicediscovery:GetService"}
	}
	return d.API.GetService(ctx, in, optFns...)
}

// TestFeedSkipsServicesItMayNotRead: another tool registers an instance in
// a service of its own, which mcsd's policy does not let it read. The feed
// skips that operation, as the sweep skips what it may not list, and goes
// on: a later change of a member arrives.
func TestFeedSkipsServicesItMayNotRead(t *testing.T) {
	srv := moto(t)
	c := rawClient(t, srv)
	ctx := t.Context()
	cs := randName("feed")
	key := randWebKey()
	a := openMember(t, srv, cs, "a", 30*time.Second)
	putWeb(t, a, key, "10.0.0.1")

	opts := feedOptions(srv, cs, 30*time.Second)
	client, err := NewClient(ctx, opts)
	mustDo(t, err)
	api := &denyingAPI{API: client, deny: map[string]bool{}}
	w := openClosed(t, func(ctx context.Context, opts Options) (*Watcher, error) { return NewWatcherFromAPI(ctx, api, opts) }, opts)
	rec := registrytest.StartWatch(t, w)
	aID := registry.RecordID{Cluster: "a", Service: key}
	rec.WaitFor(t, 10*time.Second, "a's endpoint", func(_ registrytest.Event, v *registrytest.View) bool { return hasOneGroupOf(v, aID, 1) })

	nsID, _ := createHTTPNamespace(t, c, randName("payments"))
	svc, err := c.CreateService(ctx, &sd.CreateServiceInput{Name: aws.String("api"), NamespaceId: aws.String(nsID)})
	mustDo(t, err)
	api.mu.Lock()
	api.deny[aws.ToString(svc.Service.Id)] = true
	api.mu.Unlock()
	_, err = c.RegisterInstance(ctx, &sd.RegisterInstanceInput{ServiceId: svc.Service.Id, InstanceId: aws.String("i-1"),
		Attributes: map[string]string{"AWS_INSTANCE_IPV4": "10.9.9.9"}})
	mustDo(t, err)

	mustDo(t, a.PutEndpoints(ctx, key, webGroups("10.0.0.1", "10.0.0.2")))
	rec.WaitFor(t, 10*time.Second, "a's second endpoint, past the operation it may not read", func(_ registrytest.Event, v *registrytest.View) bool {
		return hasOneGroupOf(v, aID, 2)
	})
}
