package etcd_test

import (
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/etcd"
	"github.com/mcsd-io/mcsd/pkg/registry/registrytest"
)

// switchProxy forwards TCP connections to one etcd, then, once switched,
// to another: what a client sees of an etcd replaced at its address.
type switchProxy struct {
	ln     net.Listener
	mu     sync.Mutex
	target string
	conns  []net.Conn
}

func newSwitchProxy(t *testing.T, target string) *switchProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	p := &switchProxy{ln: ln, target: target}
	t.Cleanup(func() {
		_ = ln.Close()
		p.cut()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			u, err := net.Dial("tcp", p.target)
			if err != nil {
				p.mu.Unlock()
				_ = c.Close()
				continue
			}
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(u, c); _ = u.Close() }()
			go func() { _, _ = io.Copy(c, u); _ = c.Close() }()
		}
	}()
	return p
}

func (p *switchProxy) url() string { return "http://" + p.ln.Addr().String() }

// cut closes every connection forwarded so far.
func (p *switchProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

// switchTo forwards new connections to target, and cuts the others.
func (p *switchProxy) switchTo(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
	p.cut()
}

func hostOf(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	must(t, err)
	return u.Host
}

// TestAnotherEtcdUnderARunningWatch: the etcd at the registry's address is
// replaced by another (restored, or a new member after its data was lost)
// between two health checks. The client reconnects and goes on watching
// without the watch ending; the health check finds the other history, and
// the clusterset is read again in full.
func TestAnotherEtcdUnderARunningWatch(t *testing.T) {
	t.Parallel()
	first := startServer(t, filepath.Join(t.TempDir(), "etcd"), "")
	second := startServer(t, filepath.Join(t.TempDir(), "etcd"), "")
	a := open(t, first.ClientURL(), registry.Identity{ClusterSet: "set1", Cluster: "a"})
	putWeb(t, a)
	c := open(t, second.ClientURL(), registry.Identity{ClusterSet: "set1", Cluster: "c"})
	putWeb(t, c)
	// The two test etcds have one cluster id (their names, addresses and
	// tokens alike, as a restore with the same flags has): the first's
	// history is longer, so the other's revision is seen to go back.
	raw := client(t, first.ClientURL())
	for range 20 {
		_, err := raw.Put(t.Context(), "/elsewhere", "x")
		must(t, err)
	}

	p := newSwitchProxy(t, hostOf(t, first.ClientURL()))
	w := openClosed(t, etcd.NewWatcher, etcd.Options{Identity: registry.Identity{ClusterSet: "set1"}, Endpoints: []string{p.url()}, Prefix: prefix,
		HealthInterval: 500 * time.Millisecond})
	rec := registrytest.StartWatch(t, w)
	aID, cID := registry.RecordID{Cluster: "a", Service: web}, registry.RecordID{Cluster: "c", Service: web}
	waitRecords(t, rec, "a's records", aID)

	p.switchTo(hostOf(t, second.ClientURL()))
	rec.WaitFor(t, 15*time.Second, "the other etcd's clusterset: c's records, not a's", func(_ registrytest.Event, v *registrytest.View) bool {
		_, ok := v.Exports[cID]
		_, old := v.Exports[aID]
		return ok && !old
	})
}

// TestRestoredBackupOwnRecordsWrittenAgain: etcd is restored from a backup
// taken before the cluster's last change of its endpoints. The watch reads
// the restored clusterset; the backend no longer takes its records for
// written, so the export controller's put of its present endpoints (which
// it makes on seeing the old ones) writes them again.
func TestRestoredBackupOwnRecordsWrittenAgain(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "etcd")
	srv := startServer(t, dir, "")
	url := srv.ClientURL()
	a := open(t, url, registry.Identity{ClusterSet: "set1", Cluster: "a"}, func(o *etcd.Options) {
		o.HealthInterval = 200 * time.Millisecond
		o.RequestTimeout = time.Second
	})
	putWeb(t, a)
	rec := registrytest.StartWatch(t, a)
	id := registry.RecordID{Cluster: "a", Service: web}
	waitRecords(t, rec, "a's records", id)

	srv.Close()
	backup := filepath.Join(t.TempDir(), "backup")
	must(t, os.CopyFS(backup, os.DirFS(dir)))
	srv = startServer(t, dir, url)

	// After the backup: a's endpoints change, more often than the backup
	// has revisions.
	at := func(addr string) []registry.EndpointGroup {
		return []registry.EndpointGroup{{AddressType: "IPv4", Endpoints: []registry.Endpoint{{Addresses: []string{addr}, Ready: true, Serving: true}}}}
	}
	// Each tried again when it fails within the request timeout (the
	// first, while the client reconnects), as the controllers do.
	put := func(g []registry.EndpointGroup) {
		t.Helper()
		mustEventually(t, "a's put", func() error { return a.PutEndpoints(t.Context(), web, g) })
	}
	for range 20 {
		put(at("10.0.0.2"))
		put(groups)
	}
	// The last, an address of its own: the events after it are the
	// restore's.
	moved := at("10.0.0.3")
	put(moved)
	rec.WaitFor(t, 10*time.Second, "the moved endpoints", func(_ registrytest.Event, v *registrytest.View) bool {
		return cmp.Equal(v.Endpoints[id].Groups, moved)
	})

	srv.Close()
	must(t, os.RemoveAll(dir))
	startServer(t, backup, url)
	rec.WaitFor(t, 20*time.Second, "the backup's endpoints", func(e registrytest.Event, v *registrytest.View) bool {
		return e.Update != nil && cmp.Equal(v.Endpoints[id].Groups, groups)
	})
	put(moved)
	if kv := getKey(t, client(t, url), prefix+"/set1/clusters/a/endpoints/shop/web"); !strings.Contains(string(kv.Value), "10.0.0.3") {
		t.Errorf("after the put of the moved endpoints, etcd holds the backup's: %s", kv.Value)
	}
}

// TestRestoredBackupWithBumpedRevision: etcd is restored from a backup with
// its revisions bumped past the live ones and compacted (etcdutl snapshot
// restore --bump-revision --mark-compacted, as Kubernetes recommends): the
// same cluster id, a later revision, and older values of keys the watch
// holds at later revisions. The watch, compacted away, reads again: the
// keys changed since its revision alone would miss the backup's values; it
// finds the other history and reads everything.
func TestRestoredBackupWithBumpedRevision(t *testing.T) {
	t.Parallel()
	live := startServer(t, filepath.Join(t.TempDir(), "etcd"), "")
	restored := startServer(t, filepath.Join(t.TempDir(), "etcd"), "")
	at := func(addr string) []registry.EndpointGroup {
		return []registry.EndpointGroup{{AddressType: "IPv4", Endpoints: []registry.Endpoint{{Addresses: []string{addr}, Ready: true, Serving: true}}}}
	}
	id := registry.Identity{ClusterSet: "set1", Cluster: "a"}
	// The backup: a's web at 10.0.0.1.
	b := open(t, restored.ClientURL(), id)
	must(t, b.PutExport(t.Context(), web, spec))
	must(t, b.PutEndpoints(t.Context(), web, at("10.0.0.1")))
	// The live etcd: the same, then a change the backup does not have.
	a := open(t, live.ClientURL(), id)
	must(t, a.PutExport(t.Context(), web, spec))
	must(t, a.PutEndpoints(t.Context(), web, at("10.0.0.1")))
	must(t, a.PutEndpoints(t.Context(), web, at("10.0.0.2")))

	p := newSwitchProxy(t, hostOf(t, live.ClientURL()))
	w := openClosed(t, etcd.NewWatcher, etcd.Options{Identity: registry.Identity{ClusterSet: "set1"}, Endpoints: []string{p.url()}, Prefix: prefix,
		HealthInterval: 500 * time.Millisecond})
	rec := registrytest.StartWatch(t, w)
	rid := registry.RecordID{Cluster: "a", Service: web}
	rec.WaitFor(t, 10*time.Second, "the live endpoints", func(_ registrytest.Event, v *registrytest.View) bool {
		return cmp.Equal(v.Endpoints[rid].Groups, at("10.0.0.2"))
	})

	// The restore: its revision bumped past the live one, and compacted.
	bumpPast(t, restored.ClientURL(), live.ClientURL())
	p.switchTo(hostOf(t, restored.ClientURL()))
	rec.WaitFor(t, 15*time.Second, "the backup's endpoints", func(_ registrytest.Event, v *registrytest.View) bool {
		return cmp.Equal(v.Endpoints[rid].Groups, at("10.0.0.1"))
	})
}

// TestRestoredBackupWithBumpedRevisionKeyBack: as above, from a backup of
// the data itself (its keys at the revisions the watch holds them at): the
// export withdrawn after the backup is back in it. The watch's latest key
// is as held; the number of keys tells that the history is another.
func TestRestoredBackupWithBumpedRevisionKeyBack(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "etcd")
	srv := startServer(t, dir, "")
	url := srv.ClientURL()
	a := open(t, url, registry.Identity{ClusterSet: "set1", Cluster: "a"})
	putWeb(t, a)
	gone := registry.ServiceKey{Namespace: "shop", Name: "gone"}
	must(t, a.PutExport(t.Context(), gone, spec))

	srv.Close()
	backup := filepath.Join(t.TempDir(), "backup")
	must(t, os.CopyFS(backup, os.DirFS(dir)))
	startServer(t, dir, url)
	mustEventually(t, "a's withdrawal", func() error { return a.DeleteExport(t.Context(), gone) })

	p := newSwitchProxy(t, hostOf(t, url))
	w := openClosed(t, etcd.NewWatcher, etcd.Options{Identity: registry.Identity{ClusterSet: "set1"}, Endpoints: []string{p.url()}, Prefix: prefix,
		HealthInterval: 500 * time.Millisecond})
	rec := registrytest.StartWatch(t, w)
	webID, goneID := registry.RecordID{Cluster: "a", Service: web}, registry.RecordID{Cluster: "a", Service: gone}
	rec.WaitFor(t, 10*time.Second, "the live records", func(_ registrytest.Event, v *registrytest.View) bool {
		_, ok := v.Exports[webID]
		_, old := v.Exports[goneID]
		return ok && !old
	})

	restored := startServer(t, backup, "")
	bumpPast(t, restored.ClientURL(), url)
	p.switchTo(hostOf(t, restored.ClientURL()))
	rec.WaitFor(t, 15*time.Second, "the backup's export back", func(_ registrytest.Event, v *registrytest.View) bool {
		_, ok := v.Exports[goneID]
		return ok
	})
}

// bumpPast writes the etcd at url until its revision is past that of the
// etcd at live, then compacts it there: what etcdutl snapshot restore
// --bump-revision --mark-compacted makes of a backup.
func bumpPast(t *testing.T, url, live string) {
	t.Helper()
	raw := client(t, url)
	head, err := client(t, live).Get(t.Context(), "/elsewhere")
	must(t, err)
	for {
		resp, err := raw.Put(t.Context(), "/elsewhere", "x")
		must(t, err)
		if resp.Header.Revision > head.Header.Revision+10 {
			_, err := raw.Compact(t.Context(), resp.Header.Revision)
			must(t, err)
			return
		}
	}
}
