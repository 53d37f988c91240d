package cloudmap

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	sd "github.com/aws/aws-sdk-go-v2/service/servicediscovery"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/cloudmap/mototest"
	"github.com/mcsd-io/mcsd/pkg/registry/registrytest"
)

// countingAPI counts the calls made through it, by operation.
type countingAPI struct {
	API
	// hideOps makes ListOperations list nothing.
	hideOps atomic.Bool
	mu      sync.Mutex
	calls   map[string]int
}

func (c *countingAPI) count(op, _ string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.calls == nil {
		c.calls = map[string]int{}
	}
	c.calls[op]++
}

func (c *countingAPI) get(op string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[op]
}

func (c *countingAPI) RegisterInstance(ctx context.Context, in *sd.RegisterInstanceInput, optFns ...func(*sd.Options)) (*sd.RegisterInstanceOutput, error) {
	c.count(OpRegisterInstance, aws.ToString(in.InstanceId))
	return c.API.RegisterInstance(ctx, in, optFns...)
}

func (c *countingAPI) DeregisterInstance(ctx context.Context, in *sd.DeregisterInstanceInput, optFns ...func(*sd.Options)) (*sd.DeregisterInstanceOutput, error) {
	c.count(OpDeregisterInstance, aws.ToString(in.InstanceId))
	return c.API.DeregisterInstance(ctx, in, optFns...)
}

func (c *countingAPI) CreateHttpNamespace(ctx context.Context, in *sd.CreateHttpNamespaceInput, optFns ...func(*sd.Options)) (*sd.CreateHttpNamespaceOutput, error) { //nolint:revive // the SDK method's name
	c.count(OpCreateHTTPNamespace, "")
	return c.API.CreateHttpNamespace(ctx, in, optFns...)
}

func (c *countingAPI) CreateService(ctx context.Context, in *sd.CreateServiceInput, optFns ...func(*sd.Options)) (*sd.CreateServiceOutput, error) {
	c.count(OpCreateService, "")
	return c.API.CreateService(ctx, in, optFns...)
}

func (c *countingAPI) ListInstances(ctx context.Context, in *sd.ListInstancesInput, optFns ...func(*sd.Options)) (*sd.ListInstancesOutput, error) {
	c.count(OpListInstances, "")
	return c.API.ListInstances(ctx, in, optFns...)
}

// newCountingAPI is a countingAPI over a client of opts.
func newCountingAPI(t *testing.T, opts Options) *countingAPI {
	t.Helper()
	client, err := NewClient(t.Context(), opts)
	mustDo(t, err)
	return &countingAPI{API: client}
}

// countingBackend opens a backend of opts over a countingAPI.
func countingBackend(t *testing.T, opts Options) (*Backend, *countingAPI) {
	t.Helper()
	counting := newCountingAPI(t, opts)
	newFn := func(ctx context.Context, opts Options) (*Backend, error) { return NewFromAPI(ctx, counting, opts) }
	return openClosed(t, newFn, opts), counting
}

func webGroups(addrs ...string) []registry.EndpointGroup {
	g := registry.EndpointGroup{
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []registry.EndpointPort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 8080}},
	}
	for _, a := range addrs {
		g.Endpoints = append(g.Endpoints, registry.Endpoint{Addresses: []string{a}, Ready: true, Serving: true})
	}
	return []registry.EndpointGroup{g}
}

var webSpec = registry.ServiceSpec{Type: registry.ClusterSetIP, Ports: []registry.Port{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}}

// putWeb exports key from b with webSpec and endpoints at addrs.
func putWeb(t *testing.T, b *Backend, key registry.ServiceKey, addrs ...string) {
	t.Helper()
	mustDo(t, b.PutExport(t.Context(), key, webSpec))
	mustDo(t, b.PutEndpoints(t.Context(), key, webGroups(addrs...)))
}

// openExporting opens the backend of opts and exports a new web Service
// from it, with webSpec and endpoints at addrs.
func openExporting(t *testing.T, opts Options, addrs ...string) (*Backend, registry.ServiceKey) {
	t.Helper()
	b, key := openBackend(t, opts), randWebKey()
	putWeb(t, b, key, addrs...)
	return b, key
}

// waitFirstUpdate waits for rec's first update, and returns the events
// consumed.
func waitFirstUpdate(t *testing.T, rec *registrytest.Recorder) []registrytest.Event {
	t.Helper()
	return rec.WaitFor(t, 15*time.Second, "the first update", func(e registrytest.Event, _ *registrytest.View) bool { return e.Update != nil })
}

// hasOneGroupOf reports whether v holds the endpoints of id as one group of
// n endpoints.
func hasOneGroupOf(v *registrytest.View, id registry.RecordID, n int) bool {
	g := v.Endpoints[id].Groups
	return len(g) == 1 && len(g[0].Endpoints) == n
}

// TestForeignAttributesDoNotCauseWrites checks that attributes someone else
// added to mcsd's instances neither make it write them again, including
// after a restart, nor get lost when it does write them.
func TestForeignAttributesDoNotCauseWrites(t *testing.T) {
	srv := moto(t)
	c := rawClient(t, srv)
	ctx := t.Context()
	id := registry.Identity{ClusterSet: randName("foreign"), Cluster: "east"}
	opts := motoOptions(srv, id, 30*time.Second)
	a, key := openExporting(t, opts, "10.0.0.1")

	// Another tool re-registers mcsd's instances with an attribute of its own.
	prefix := ownerPrefix(id)
	svcID := a.own[key].svc.ID
	for instID, at := range rawInstances(t, c, key.Namespace, key.Name) {
		at["TEAM_TAG"] = "blue"
		_, err := c.RegisterInstance(ctx, &sd.RegisterInstanceInput{ServiceId: aws.String(svcID), InstanceId: aws.String(instID), Attributes: at})
		mustDo(t, err)
	}
	mustDo(t, a.Close())

	b, counting := countingBackend(t, opts)
	for range 3 {
		putWeb(t, b, key, "10.0.0.1")
	}
	if n := counting.get(OpRegisterInstance); n != 0 {
		t.Errorf("identical puts after a restart made %d registrations, want 0", n)
	}

	groups := webGroups("10.0.0.1")
	groups[0].Endpoints[0].Ready = false
	mustDo(t, b.PutEndpoints(ctx, key, groups))
	if n := counting.get(OpRegisterInstance); n != 2 {
		t.Errorf("one changed endpoint made %d registrations, want 2 (the endpoint, and the service record's stamp)", n)
	}
	inst := rawInstances(t, c, key.Namespace, key.Name)[endpointInstanceID(prefix, "10.0.0.1", &groups[0].Ports[0], false)]
	if inst[attrReady] != "false" || inst["TEAM_TAG"] != "blue" {
		t.Errorf("rewritten instance: %v, want READY=false and TEAM_TAG kept", inst)
	}
}

// TestExpiredRecordsDeletedOnStart checks that a cluster that starts again
// after its heartbeat expired deletes what it had written.
func TestExpiredRecordsDeletedOnStart(t *testing.T) {
	srv := moto(t)
	c := rawClient(t, srv)
	ctx := t.Context()
	id := registry.Identity{ClusterSet: randName("stale"), Cluster: "east"}
	opts := motoOptions(srv, id, time.Second)
	a, key := openExporting(t, opts, "10.0.0.1", "10.0.0.2")
	if n, r := len(rawInstances(t, c, key.Namespace, key.Name)), len(rawRecords(t, c, id.ClusterSet, key)); n != 2 || r != 1 {
		t.Fatalf("%d instances and %d service records, want 2 and 1", n, r)
	}
	mustDo(t, a.Close())

	// Started again, by a clock past the TTL of the last heartbeat.
	opts.now = func() time.Time { return time.Now().Add(1500 * time.Millisecond) }
	b := openBackend(t, opts)
	if n, r := len(rawInstances(t, c, key.Namespace, key.Name)), len(rawRecords(t, c, id.ClusterSet, key)); n != 0 || r != 0 {
		t.Errorf("%d instances and %d service records left after a start past the TTL, want 0", n, r)
	}
	got, err := b.Exported(ctx)
	mustDo(t, err)
	if len(got) != 0 {
		t.Errorf("Exported() = %v, want none", got)
	}
}

// TestCleanupEmpty checks that the last export withdrawn deletes the Cloud
// Map service and namespace mcsd created, and only those.
func TestCleanupEmpty(t *testing.T) {
	srv := moto(t)
	c := rawClient(t, srv)
	ctx := t.Context()
	cs := randName("tidy")
	key := randWebKey()
	open := func(cluster string) *Backend {
		opts := motoOptions(srv, registry.Identity{ClusterSet: cs, Cluster: cluster}, 30*time.Second)
		opts.CleanupEmpty = true
		return openBackend(t, opts)
	}
	a, b := open("a"), open("b")
	mustDo(t, a.PutExport(ctx, key, webSpec))
	putWeb(t, b, key, "10.0.0.1")

	mustDo(t, a.DeleteExport(ctx, key))
	if len(namespacesNamed(t, c, key.Namespace)) != 1 || len(rawInstances(t, c, key.Namespace, key.Name)) != 1 || len(rawRecords(t, c, cs, key)) != 1 {
		t.Fatalf("a's withdrawal removed b's records")
	}
	mustDo(t, b.DeleteExport(ctx, key))
	if got := namespacesNamed(t, c, key.Namespace); len(got) != 0 {
		t.Errorf("namespace %s left after the last withdrawal", key.Namespace)
	}

	// A namespace someone else created stays.
	other := randName("theirs")
	_, err := c.CreateHttpNamespace(ctx, &sd.CreateHttpNamespaceInput{Name: aws.String(other)})
	mustDo(t, err)
	okey := registry.ServiceKey{Namespace: other, Name: "web"}
	mustDo(t, a.PutExport(ctx, okey, webSpec))
	mustDo(t, a.DeleteExport(ctx, okey))
	if got := namespacesNamed(t, c, other); len(got) != 1 {
		t.Errorf("namespace %s that mcsd did not create was deleted", other)
	}
}

// throttlingProxy forwards to moto, or, while throttling is set, answers
// every call of ops (every call, with no ops) with a ThrottlingException.
type throttlingProxy struct {
	*httptest.Server
	ops        []string
	throttling atomic.Bool
	throttled  atomic.Int64
}

func newThrottlingProxy(t *testing.T, target string, ops ...string) *throttlingProxy {
	u, err := url.Parse(target)
	mustDo(t, err)
	rp := httputil.NewSingleHostReverseProxy(u)
	p := &throttlingProxy{ops: ops}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p.throttles(r) {
			p.throttled.Add(1)
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/x-amz-json-1.1")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"__type":"ThrottlingException","message":"Rate exceeded"}`))
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(p.Close)
	return p
}

// throttles reports whether p answers r with a ThrottlingException.
func (p *throttlingProxy) throttles(r *http.Request) bool {
	if !p.throttling.Load() {
		return false
	}
	if len(p.ops) == 0 {
		return true
	}
	target := r.Header.Get("X-Amz-Target")
	return slices.ContainsFunc(p.ops, func(op string) bool { return strings.HasSuffix(target, "."+op) })
}

// TestThrottling puts Cloud Map behind a proxy that throttles every call for
// a while: writes retry with backoff and succeed after, the watcher reports
// the connection lost and back, and no import is lost on the way.
func TestThrottling(t *testing.T) {
	srv := moto(t)
	proxy := newThrottlingProxy(t, srv.URL)
	ctx := t.Context()
	cs := randName("throttle")
	key := randWebKey()

	aOpts := motoOptions(srv, registry.Identity{ClusterSet: cs, Cluster: "a"}, 30*time.Second)
	aOpts.Endpoint = proxy.URL
	aOpts.MaxAttempts = 50
	aOpts.MaxBackoff = 300 * time.Millisecond
	a := openBackend(t, aOpts)
	bOpts := motoOptions(srv, registry.Identity{ClusterSet: cs, Cluster: "b"}, 30*time.Second)
	bOpts.Endpoint = proxy.URL
	bOpts.MaxAttempts = 1
	b := openBackend(t, bOpts)

	rec := registrytest.StartWatch(t, b)
	aID := registry.RecordID{Cluster: "a", Service: key}
	putWeb(t, a, key, "10.0.0.1")
	rec.WaitFor(t, 15*time.Second, "a's records", func(_ registrytest.Event, v *registrytest.View) bool {
		return hasOneGroupOf(v, aID, 1)
	})

	const window = 3 * time.Second
	proxy.throttling.Store(true)
	time.AfterFunc(window, func() { proxy.throttling.Store(false) })
	start := time.Now()
	mustDo(t, a.PutEndpoints(ctx, key, webGroups("10.0.0.1", "10.0.0.2")))
	took := time.Since(start)
	if took < window/2 {
		t.Errorf("PutEndpoints returned after %s, before the throttling was over", took)
	}

	var disconnected bool
	events := rec.WaitFor(t, 20*time.Second, "reconnection and a's new endpoints", func(e registrytest.Event, v *registrytest.View) bool {
		if e.Update == nil && !e.Connected {
			disconnected = true
		}
		return disconnected && v.Connected && hasOneGroupOf(v, aID, 2)
	})
	for _, e := range events {
		if u := e.Update; u != nil && (u.Full || len(u.DeletedExports) > 0 || len(u.DeletedEndpoints) > 0 || len(u.DeletedClusters) > 0) {
			t.Errorf("throttling deleted or replaced imports: %s", e)
		}
	}
	t.Logf("%d calls throttled; PutEndpoints took %s through a %s throttling window", proxy.throttled.Load(), took.Round(100*time.Millisecond), window)
	if proxy.throttled.Load() < 3 {
		t.Errorf("only %d calls throttled", proxy.throttled.Load())
	}
}

// TestPaginationPast1000 checks that a Service with 1,000 instances (the
// most Cloud Map holds in a service), as many as one DiscoverInstances call
// returns at most, is read in full through ListInstances pages. It has a moto server of its own: every other
// test's watchers would check the large service's revision, which moto
// computes slowly.
func TestPaginationPast1000(t *testing.T) {
	moto(t)
	srv := mototest.Start(t)
	cs := randName("many")
	key := randWebKey()
	fast := func(cluster string) Options {
		o := motoOptions(srv, registry.Identity{ClusterSet: cs, Cluster: cluster}, 30*time.Second)
		o.RateLimits = map[string]RateLimit{
			OpRegisterInstance: {QPS: 10000, Burst: 1000},
			OpGetOperation:     {QPS: 10000, Burst: 1000},
		}
		o.Concurrency = 16
		o.PollInterval = time.Second
		return o
	}
	a := openBackend(t, fast("a"))
	const n = 1000
	addrs := make([]string, n)
	for i := range addrs {
		addrs[i] = fmt.Sprintf("10.1.%d.%d", i/250, i%250+1)
	}
	putWeb(t, a, key, addrs...)

	b, counting := countingBackend(t, fast("b"))
	rec := registrytest.StartWatch(t, b)
	rec.WaitFor(t, 30*time.Second, fmt.Sprintf("a's %d endpoints", n), func(_ registrytest.Event, v *registrytest.View) bool {
		return hasOneGroupOf(v, registry.RecordID{Cluster: "a", Service: key}, n)
	})
	if got := counting.get(OpListInstances); got < (n+1)/100 {
		t.Errorf("%d ListInstances calls, want the pages of %d instances", got, n+1)
	}
}

// TestWatcherWritesNothing opens a read-only watcher of a clusterset whose
// system namespace does not exist yet: it creates nothing and registers
// nothing, finds no cluster, and finds the heartbeats once a member has
// created them.
func TestWatcherWritesNothing(t *testing.T) {
	srv := moto(t)
	id := registry.Identity{ClusterSet: randName("reader")}
	opts := motoOptions(srv, id, 30*time.Second)
	opts.SystemNamespace = randName("sys") + ".system"
	w, counting := countingWatcher(t, opts)
	rec := registrytest.StartWatch(t, w)
	events := waitFirstUpdate(t, rec)
	if u := events[len(events)-1].Update; !u.Full || len(u.Clusters) > 0 {
		t.Errorf("first update of an empty clusterset: %+v", *u)
	}
	if got := namespacesNamed(t, rawClient(t, srv), opts.SystemNamespace); len(got) != 0 {
		t.Errorf("the watcher created the system namespace")
	}

	member := opts
	member.Identity.Cluster = "a"
	a := openBackend(t, member)
	key := randWebKey()
	putWeb(t, a, key, "10.0.0.1")
	rec.WaitFor(t, 15*time.Second, "cluster a and its endpoints", func(_ registrytest.Event, v *registrytest.View) bool {
		_, live := v.Clusters["a"]
		return live && len(v.Endpoints[registry.RecordID{Cluster: "a", Service: key}].Groups) == 1
	})
	c := rec.View().Clusters["a"]
	if c.LastSeen.IsZero() || c.Since.IsZero() || c.TTL != 30*time.Second {
		t.Errorf("cluster a = %+v, want its heartbeat, since and TTL", c)
	}
	for _, op := range []string{OpRegisterInstance, OpDeregisterInstance, OpCreateHTTPNamespace, OpCreateService} {
		if n := counting.get(op); n != 0 {
			t.Errorf("the watcher made %d %s calls", n, op)
		}
	}
}

func (c *countingAPI) ListOperations(ctx context.Context, in *sd.ListOperationsInput, optFns ...func(*sd.Options)) (*sd.ListOperationsOutput, error) {
	c.count(OpListOperations, "")
	out, err := c.API.ListOperations(ctx, in, optFns...)
	if err == nil && c.hideOps.Load() {
		// Cloud Map no longer lists them, or lists them too late.
		out.Operations = nil
	}
	return out, err
}

func (c *countingAPI) GetOperation(ctx context.Context, in *sd.GetOperationInput, optFns ...func(*sd.Options)) (*sd.GetOperationOutput, error) {
	c.count(OpGetOperation, "")
	return c.API.GetOperation(ctx, in, optFns...)
}

func (c *countingAPI) DiscoverInstancesRevision(ctx context.Context, in *sd.DiscoverInstancesRevisionInput, optFns ...func(*sd.Options)) (*sd.DiscoverInstancesRevisionOutput, error) {
	c.count(OpDiscoverInstancesRevision, "")
	return c.API.DiscoverInstancesRevision(ctx, in, optFns...)
}

func (c *countingAPI) ListNamespaces(ctx context.Context, in *sd.ListNamespacesInput, optFns ...func(*sd.Options)) (*sd.ListNamespacesOutput, error) {
	c.count(OpListNamespaces, "")
	return c.API.ListNamespaces(ctx, in, optFns...)
}

func (c *countingAPI) ListServices(ctx context.Context, in *sd.ListServicesInput, optFns ...func(*sd.Options)) (*sd.ListServicesOutput, error) {
	c.count(OpListServices, "")
	return c.API.ListServices(ctx, in, optFns...)
}
