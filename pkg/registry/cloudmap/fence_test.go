package cloudmap

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"maps"
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
	"github.com/mcsd-io/mcsd/pkg/registry/registrytest"
)

// addrsOf lists the addresses of the endpoints of id in v, sorted.
func addrsOf(v *registrytest.View, id registry.RecordID) []string {
	var out []string
	for _, g := range v.Endpoints[id].Groups {
		for _, e := range g.Endpoints {
			out = append(out, e.Addresses...)
		}
	}
	slices.Sort(out)
	return out
}

// rawAddrs lists the IPv4 addresses of the instances of key in Cloud Map,
// sorted.
func rawAddrs(t *testing.T, c *sd.Client, key registry.ServiceKey) []string {
	t.Helper()
	return ipv4s(maps.Values(rawInstances(t, c, key.Namespace, key.Name)))
}

// ipv4s are the IPv4 addresses of instances with attributes attrs, sorted.
func ipv4s(attrs iter.Seq[map[string]string]) []string {
	var out []string
	for at := range attrs {
		if a := at[attrIPv4]; a != "" {
			out = append(out, a)
		}
	}
	slices.Sort(out)
	return out
}

// cutOff opens the backend of cluster east (kube-system UID uid-a) behind
// a proxy, exporting a web Service, and a watcher of the clusterset; then
// cuts east off Cloud Map until its records have expired for the watcher,
// and opens, directly, another Kubernetes cluster given the same id
// (uid-b), which deletes east's expired records and exports the same
// Service with another endpoint, and a second one.
func cutOff(t *testing.T) (proxy *throttlingProxy, a, b *Backend, rec *registrytest.Recorder, key, other registry.ServiceKey) {
	t.Helper()
	moto := moto(t)
	proxy = newThrottlingProxy(t, moto.URL)
	cs := randName("fence")
	const ttl = 3 * time.Second

	aOpts := motoOptions(moto, registry.Identity{ClusterSet: cs, Cluster: "east", Instance: "uid-a"}, ttl)
	aOpts.Endpoint = proxy.URL
	aOpts.MaxAttempts = 1
	a = openBackend(t, aOpts)
	rec = registrytest.StartWatch(t, openMember(t, moto, cs, "west", ttl))
	key, other = randWebKey(), randWebKey()
	putWeb(t, a, key, "10.0.0.1")
	id := registry.RecordID{Cluster: "east", Service: key}
	rec.WaitFor(t, 20*time.Second, "east's records", func(_ registrytest.Event, v *registrytest.View) bool {
		return slices.Equal(addrsOf(v, id), []string{"10.0.0.1"})
	})

	proxy.throttling.Store(true)
	rec.WaitFor(t, 20*time.Second, "east's records expired", func(_ registrytest.Event, v *registrytest.View) bool {
		_, ok := v.Exports[id]
		return !ok
	})
	// The backend says so (registry.Lapser), with a signal.
	poll.Until(t, 5*time.Second, "east's backend saying its records lapsed", func() (bool, string) {
		err := a.Lapsed()
		return errors.Is(err, registry.ErrRecordsLapsed) && strings.Contains(err.Error(), "heartbeat"), "Lapsed() = " + errString(err)
	})
	lapseSignalled(t, a)
	b = openBackend(t, motoOptions(moto, registry.Identity{ClusterSet: cs, Cluster: "east", Instance: "uid-b"}, ttl))
	putWeb(t, b, key, "10.0.0.9")
	putWeb(t, b, other, "10.0.0.8")
	rec.WaitFor(t, 20*time.Second, "the other cluster's records under east", func(_ registrytest.Event, v *registrytest.View) bool {
		return slices.Equal(addrsOf(v, id), []string{"10.0.0.9"}) &&
			slices.Equal(addrsOf(v, registry.RecordID{Cluster: "east", Service: other}), []string{"10.0.0.8"})
	})
	return proxy, a, b, rec, key, other
}

// TestHeartbeatExpiredWhileAnotherClusterTookTheID: a backend cut off
// Cloud Map for longer than its TTL, while another Kubernetes cluster given
// the same cluster id started under it, finds that cluster's heartbeat when
// it can reach Cloud Map again: it is fenced (Fenced), refuses every write
// and withdrawal, and leaves the other cluster's heartbeat and records
// alone. Once that cluster has stopped and its heartbeat expired, the
// backend deletes its leftovers and writes its own records again.
func TestHeartbeatExpiredWhileAnotherClusterTookTheID(t *testing.T) {
	proxy, a, b, rec, key, other := cutOff(t)
	c := rawClient(t, moto(t))
	ctx := t.Context()

	proxy.throttling.Store(false)
	poll.Until(t, 20*time.Second, "the first backend fenced", func() (bool, string) {
		err := a.Fenced()
		return errors.Is(err, registry.ErrClusterIDInUse), "Fenced() = " + errString(err)
	})
	poll.Until(t, 5*time.Second, "the first backend saying why its records lapsed", func() (bool, string) {
		err := a.Lapsed()
		return errors.Is(err, registry.ErrClusterIDInUse), "Lapsed() = " + errString(err)
	})
	lapseSignalled(t, a)
	if err := a.PutEndpoints(ctx, key, webGroups("10.0.0.1", "10.0.0.2")); !errors.Is(err, registry.ErrClusterIDInUse) {
		t.Errorf("put of a fenced backend: %v, want ErrClusterIDInUse", err)
	}
	if err := a.DeleteExport(ctx, key); !errors.Is(err, registry.ErrClusterIDInUse) {
		t.Errorf("withdrawal of a fenced backend: %v, want ErrClusterIDInUse", err)
	}
	out, err := c.GetService(ctx, &sd.GetServiceInput{Id: aws.String(b.systemService(beatServiceName(b.enc.prefix)).ID)})
	mustDo(t, err)
	if hb, _ := decodeHeartbeat(aws.ToString(out.Service.Description)); hb.Instance != "uid-b" {
		t.Errorf("heartbeat of instance %q, want the other cluster's uid-b", hb.Instance)
	}
	if got := rawAddrs(t, c, key); !slices.Equal(got, []string{"10.0.0.9"}) {
		t.Errorf("the other cluster's instances of %s: %v, want [10.0.0.9]", key, got)
	}
	if got := rawAddrs(t, c, other); !slices.Equal(got, []string{"10.0.0.8"}) {
		t.Errorf("the other cluster's instances of %s: %v, want [10.0.0.8]", other, got)
	}

	// The other cluster stops: once its heartbeat has expired, the first
	// takes its id back, whole.
	mustDo(t, b.Close())
	id := registry.RecordID{Cluster: "east", Service: key}
	rec.WaitFor(t, 30*time.Second, "east back with the first cluster's records alone", func(_ registrytest.Event, v *registrytest.View) bool {
		_, otherLeft := v.Exports[registry.RecordID{Cluster: "east", Service: other}]
		return slices.Equal(addrsOf(v, id), []string{"10.0.0.1"}) && !otherLeft
	})
	// The fence is lifted once the heartbeat is written, after the
	// records (a watcher measuring the other's last heartbeat on its own
	// clock may see them before).
	poll.Until(t, 10*time.Second, "the first backend no longer fenced", func() (bool, string) {
		err := a.Fenced()
		return err == nil, "Fenced() = " + errString(err)
	})
	poll.Until(t, 5*time.Second, "the first backend's records live", func() (bool, string) {
		err := a.Lapsed()
		return err == nil, "Lapsed() = " + errString(err)
	})
	lapseSignalled(t, a)
	if got := rawAddrs(t, c, other); len(got) > 0 {
		t.Errorf("the other cluster's instances of %s left: %v", other, got)
	}
	putWeb(t, a, key, "10.0.0.1", "10.0.0.3")
	rec.WaitFor(t, 20*time.Second, "the first cluster's put after the fence", func(_ registrytest.Event, v *registrytest.View) bool {
		return slices.Equal(addrsOf(v, id), []string{"10.0.0.1", "10.0.0.3"})
	})
}

// TestHeartbeatExpiredWhileAnotherClusterCameAndWent: the other cluster
// given the id has stopped, and its heartbeat expired, before the first
// can reach Cloud Map again: the first is not fenced, but deletes the other
// cluster's leftovers under the id before it beats again, and writes its
// own records again. Meanwhile its writes wait.
func TestHeartbeatExpiredWhileAnotherClusterCameAndWent(t *testing.T) {
	proxy, a, b, rec, key, other := cutOff(t)
	c := rawClient(t, moto(t))
	// Until the heartbeat is refreshed, nothing is written: not even tried.
	if err := a.PutEndpoints(t.Context(), key, webGroups("10.0.0.1", "10.0.0.2")); !errors.Is(err, errBeatExpired) {
		t.Errorf("put with the heartbeat expired: %v, want errBeatExpired", err)
	}
	mustDo(t, b.Close())
	id := registry.RecordID{Cluster: "east", Service: key}
	rec.WaitFor(t, 20*time.Second, "the other cluster's records expired", func(_ registrytest.Event, v *registrytest.View) bool {
		_, ok := v.Exports[id]
		return !ok
	})
	proxy.throttling.Store(false)
	rec.WaitFor(t, 30*time.Second, "east back with the first cluster's records alone", func(_ registrytest.Event, v *registrytest.View) bool {
		_, otherLeft := v.Exports[registry.RecordID{Cluster: "east", Service: other}]
		return slices.Equal(addrsOf(v, id), []string{"10.0.0.1"}) && !otherLeft
	})
	if got := rawAddrs(t, c, other); len(got) > 0 {
		t.Errorf("the other cluster's instances of %s left: %v", other, got)
	}
	mustDo(t, a.Fenced())
	poll.Until(t, 5*time.Second, "the first backend's records live", func() (bool, string) {
		err := a.Lapsed()
		return err == nil, "Lapsed() = " + errString(err)
	})
	lapseSignalled(t, a)
}

// lapseSignalled fails the test unless b has signalled a change of Lapsed
// since the last call.
func lapseSignalled(t *testing.T, b *Backend) {
	t.Helper()
	select {
	case <-b.Lapses():
	default:
		t.Error("no signal on Lapses")
	}
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}

// TestStaleHeartbeatServicesDeleted: with CleanupEmpty, a backend's watch
// deletes the heartbeat services of clusters (of any clusterset of the
// system namespace) whose last heartbeat is a day old, and no other; without
// it, none.
func TestStaleHeartbeatServicesDeleted(t *testing.T) {
	srv := moto(t)
	c := rawClient(t, srv)
	sys := randName("sys") + ".system"
	opts := func(cluster string, cleanup bool) Options {
		o := motoOptions(srv, registry.Identity{ClusterSet: randName("beats"), Cluster: cluster}, 30*time.Second)
		o.SystemNamespace, o.CleanupEmpty = sys, cleanup
		return o
	}
	keep := openBackend(t, opts("keep", false))
	nss := namespacesNamed(t, c, sys)
	if len(nss) != 1 {
		t.Fatalf("%d system namespaces %s", len(nss), sys)
	}
	beat := func(name string, age time.Duration) {
		desc := beatDescPrefix + fmt.Sprintf(`{"clusterSet":"gone","cluster":%q,"at":%d,"ttl":60000}`, name, time.Now().Add(-age).UnixMilli())
		_, err := c.CreateService(t.Context(), &sd.CreateServiceInput{Name: aws.String(beatServiceName(name)), NamespaceId: nss[0].Id, Description: aws.String(desc)})
		mustDo(t, err)
	}
	beat("dead", 25*time.Hour)
	beat("late", time.Hour) // expired, but not for a day
	names := func() map[string]bool {
		out, err := c.ListServices(t.Context(), &sd.ListServicesInput{Filters: []types.ServiceFilter{{Name: types.ServiceFilterNameNamespaceId, Values: []string{aws.ToString(nss[0].Id)}}}})
		mustDo(t, err)
		m := map[string]bool{}
		for _, s := range out.Services {
			m[aws.ToString(s.Name)] = true
		}
		return m
	}

	// Without CleanupEmpty: a watch that has read the heartbeats deletes
	// none.
	waitFirstUpdate(t, registrytest.StartWatch(t, keep))
	if !names()[beatServiceName("dead")] {
		t.Fatal("the stale heartbeat service deleted without CleanupEmpty")
	}

	clean := openBackend(t, opts("clean", true))
	registrytest.StartWatch(t, clean)
	poll.Until(t, 20*time.Second, "the day-old heartbeat service deleted", func() (bool, string) {
		return !names()[beatServiceName("dead")], fmt.Sprint(names())
	})
	if got := names(); !got[beatServiceName("late")] || !got[beatServiceName(keep.enc.prefix)] || !got[beatServiceName(clean.enc.prefix)] {
		t.Errorf("services left %v, want the hour-old and the live heartbeats", got)
	}
}

// heldDeregistrations holds every DeregisterInstance until release is
// closed, and tells of the first on held. It counts the registrations of
// each IPv4 address.
type heldDeregistrations struct {
	API
	once    sync.Once
	held    chan struct{}
	release chan struct{}
	mu      sync.Mutex
	byAddr  map[string]int
}

func (h *heldDeregistrations) RegisterInstance(ctx context.Context, in *sd.RegisterInstanceInput, optFns ...func(*sd.Options)) (*sd.RegisterInstanceOutput, error) {
	h.mu.Lock()
	h.byAddr[in.Attributes[attrIPv4]]++
	h.mu.Unlock()
	return h.API.RegisterInstance(ctx, in, optFns...)
}

func (h *heldDeregistrations) registrations(addr string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.byAddr[addr]
}

func (h *heldDeregistrations) DeregisterInstance(ctx context.Context, in *sd.DeregisterInstanceInput, optFns ...func(*sd.Options)) (*sd.DeregisterInstanceOutput, error) {
	h.once.Do(func() { close(h.held) })
	select {
	case <-h.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return h.API.DeregisterInstance(ctx, in, optFns...)
}

// TestClusterBackDuringAnotherClustersStart: east (uid-a) is cut off past
// its TTL; another Kubernetes cluster given its id (uid-b) starts, and
// while it deletes east's expired records (after its scan), east comes
// back, finds its own heartbeat, beats and exports another Service. The
// starting cluster reads the heartbeat before its first: east yields at
// its next read (fenced), and the other takes the id back once east has
// stopped beating, deleting the record east wrote after the scan.
func TestClusterBackDuringAnotherClustersStart(t *testing.T) {
	moto := moto(t)
	proxy := newThrottlingProxy(t, moto.URL)
	cs := randName("race")
	const ttl = 3 * time.Second
	aOpts := motoOptions(moto, registry.Identity{ClusterSet: cs, Cluster: "east", Instance: "uid-a"}, ttl)
	aOpts.Endpoint = proxy.URL
	aOpts.MaxAttempts = 1
	a := openBackend(t, aOpts)
	rec := registrytest.StartWatch(t, openMember(t, moto, cs, "west", ttl))
	key, late := randWebKey(), randWebKey()
	putWeb(t, a, key, "10.0.0.1")
	id := registry.RecordID{Cluster: "east", Service: key}
	rec.WaitFor(t, 20*time.Second, "east's records", func(_ registrytest.Event, v *registrytest.View) bool {
		_, ok := v.Exports[id]
		return ok
	})
	proxy.throttling.Store(true)
	rec.WaitFor(t, 20*time.Second, "east's records expired", func(_ registrytest.Event, v *registrytest.View) bool {
		_, ok := v.Exports[id]
		return !ok
	})

	// Expired by its own stamp too, as a start judges it (a beat whose
	// answer the cut lost may be younger than the watcher's judgement).
	c := rawClient(t, moto)
	poll.Until(t, 20*time.Second, "east's heartbeat expired by its stamp", func() (bool, string) {
		out, err := c.GetService(t.Context(), &sd.GetServiceInput{Id: aws.String(a.systemService(beatServiceName(a.enc.prefix)).ID)})
		mustDo(t, err)
		hb, _ := decodeHeartbeat(aws.ToString(out.Service.Description))
		return !hb.live(time.Now(), ttl), fmt.Sprint(hb)
	})

	bOpts := motoOptions(moto, registry.Identity{ClusterSet: cs, Cluster: "east", Instance: "uid-b"}, ttl)
	client, err := NewClient(t.Context(), bOpts)
	mustDo(t, err)
	api := &heldDeregistrations{API: client, held: make(chan struct{}), release: make(chan struct{}), byAddr: map[string]int{}}
	type opened struct {
		b   *Backend
		err error
	}
	done := make(chan opened, 1)
	go func() {
		b, err := NewFromAPI(t.Context(), api, bOpts)
		done <- opened{b, err}
	}()
	select {
	case <-api.held:
	case o := <-done:
		t.Fatalf("the other cluster's start deleted nothing: %v", o.err)
	case <-time.After(2 * time.Minute): // its scan reads every namespace of the account
		t.Fatal("the other cluster's start deleted nothing")
	}
	proxy.throttling.Store(false)
	poll.Until(t, 20*time.Second, "east's export after it came back", func() (bool, string) {
		err := a.PutExport(t.Context(), late, webSpec)
		return err == nil, fmt.Sprint(err)
	})
	close(api.release)
	o := <-done
	mustDo(t, o.err)
	t.Cleanup(func() { _ = o.b.Close() })
	own := randWebKey()
	putWeb(t, o.b, own, "10.0.0.7")

	poll.Until(t, 20*time.Second, "east fenced", func() (bool, string) {
		err := a.Fenced()
		return errors.Is(err, registry.ErrClusterIDInUse), fmt.Sprint(err)
	})
	// The take-back reads every namespace of the account.
	poll.Until(t, 2*time.Minute, "east's record written after the scan deleted", func() (bool, string) {
		got := rawRecords(t, c, cs, late)
		return len(got) == 0, fmt.Sprint(got)
	})
	// The other cluster's own export, as it wrote it, is not written
	// again, nor deleted (the take-back writes after it deletes).
	poll.Throughout(t, 3*time.Second, "the keeper's export as written", func() (bool, string) {
		got, n := rawAddrs(t, c, own), api.registrations("10.0.0.7")
		return slices.Equal(got, []string{"10.0.0.7"}) && n == 1, fmt.Sprintf("instances %v, the endpoint registered %d times", got, n)
	})
	if err := a.PutExport(t.Context(), late, webSpec); !errors.Is(err, registry.ErrClusterIDInUse) {
		t.Errorf("a put of the fenced cluster: %v, want %v", err, registry.ErrClusterIDInUse)
	}
}

// TestHeartbeatServiceDeletedDuringAnOutage: while a backend is cut off
// for longer than its TTL, another Kubernetes cluster given its id runs
// under it and stops, and its heartbeat service is deleted (as
// CleanupEmpty deletes one silent for a day). Back, the backend finds no
// heartbeat: it does not know who wrote under the id, and takes it back
// whole rather than make the other's leftovers live again.
func TestHeartbeatServiceDeletedDuringAnOutage(t *testing.T) {
	proxy, a, b, rec, key, other := cutOff(t)
	c := rawClient(t, moto(t))
	mustDo(t, b.Close())
	_, err := c.DeleteService(t.Context(), &sd.DeleteServiceInput{Id: aws.String(b.systemService(beatServiceName(b.enc.prefix)).ID)})
	mustDo(t, err)

	proxy.throttling.Store(false)
	id := registry.RecordID{Cluster: "east", Service: key}
	rec.WaitFor(t, 30*time.Second, "east back with its own records alone", func(_ registrytest.Event, v *registrytest.View) bool {
		_, otherLeft := v.Exports[registry.RecordID{Cluster: "east", Service: other}]
		return slices.Equal(addrsOf(v, id), []string{"10.0.0.1"}) && !otherLeft
	})
	if got := rawAddrs(t, c, other); len(got) > 0 {
		t.Errorf("the other cluster's instances of %s left: %v", other, got)
	}
	poll.Until(t, 10*time.Second, "the backend's heartbeat written", func() (bool, string) {
		err := a.writable()
		return err == nil, errString(err)
	})
}
