package etcd_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/etcd"
	"github.com/mcsd-io/mcsd/pkg/registry/registrytest"
)

// TestLeaseLostWhileAnotherClusterTookTheID: east's backend loses its
// lease in a partition longer than its TTL, and another Kubernetes cluster
// given east's id starts meanwhile. When the partition ends, east's backend
// does not take the id back: the other's alive record and export stay, and
// east's backend says why.
func TestLeaseLostWhileAnotherClusterTookTheID(t *testing.T) {
	t.Parallel()
	srv := startServer(t, filepath.Join(t.TempDir(), "etcd"), "")
	proxy := newSwitchProxy(t, hostOf(t, srv.ClientURL()))
	var (
		mu   sync.Mutex
		logs []string
	)
	logged := func(s string) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, l := range logs {
			if strings.Contains(l, s) {
				return true
			}
		}
		return false
	}
	ctx := logr.NewContext(t.Context(), funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		logs = append(logs, prefix+" "+args)
	}, funcr.Options{}))
	const set = "tookid"
	east, err := etcd.New(ctx, etcd.Options{Identity: registry.Identity{ClusterSet: set, Cluster: "east", Instance: "uid-first"},
		Endpoints: []string{proxy.url()}, Prefix: prefix, TTL: 2 * time.Second, DialTimeout: time.Second, RequestTimeout: time.Second})
	must(t, err)
	t.Cleanup(func() { _ = east.Close() })
	putWeb(t, east)
	rec := registrytest.StartWatch(t, openWatcher(t, srv.ClientURL(), registry.Identity{ClusterSet: set}))
	rid := registry.RecordID{Cluster: "east", Service: web}
	rec.WaitFor(t, 15*time.Second, "east's export", func(_ registrytest.Event, v *registrytest.View) bool {
		_, ok := v.Exports[rid]
		return ok
	})

	// The partition: east's lease expires.
	proxy.switchTo("127.0.0.1:1")
	rec.WaitFor(t, 15*time.Second, "east expired", func(_ registrytest.Event, v *registrytest.View) bool {
		_, live := v.Clusters["east"]
		return !live
	})
	other := open(t, srv.ClientURL(), registry.Identity{ClusterSet: set, Cluster: "east", Instance: "uid-other"})
	must(t, other.PutExport(t.Context(), web, spec2))
	rec.WaitFor(t, 15*time.Second, "the other cluster's export", func(_ registrytest.Event, v *registrytest.View) bool {
		return v.Exports[rid].Spec.Ports != nil && v.Exports[rid].Spec.Ports[0].Port == spec2.Ports[0].Port
	})

	// The partition ends: east's backend finds the id taken, and says so.
	proxy.switchTo(hostOf(t, srv.ClientURL()))
	poll.Until(t, 20*time.Second, "east's backend to find its id in use", func() (bool, string) {
		return logged("in use by another cluster"), "not logged yet"
	})
	if err := east.Fenced(); !errors.Is(err, registry.ErrClusterIDInUse) {
		t.Errorf("east's Fenced() = %v, want ErrClusterIDInUse", err)
	}
	// Its writes and withdrawals are refused: the keys are the other's.
	if err := east.PutExport(t.Context(), web, spec); !errors.Is(err, registry.ErrClusterIDInUse) {
		t.Errorf("east's put while the id is another's: %v, want ErrClusterIDInUse", err)
	}
	if err := east.DeleteExport(t.Context(), web); !errors.Is(err, registry.ErrClusterIDInUse) {
		t.Errorf("east's withdrawal while the id is another's: %v, want ErrClusterIDInUse", err)
	}
	// A marker written after them: once the watch has it, it has whatever
	// east's calls did.
	marker := registry.ServiceKey{Namespace: "barrier", Name: "b1"}
	must(t, other.PutExport(t.Context(), marker, spec))
	rec.WaitFor(t, 15*time.Second, "the marker", func(_ registrytest.Event, v *registrytest.View) bool {
		_, ok := v.Exports[registry.RecordID{Cluster: "east", Service: marker}]
		return ok
	})
	v := rec.View()
	if x, ok := v.Exports[rid]; !ok || x.Spec.Ports[0].Port != spec2.Ports[0].Port {
		t.Errorf("the other cluster's export after east's backend came back: %+v (present: %t)", x, ok)
	}
	if _, live := v.Clusters["east"]; !live {
		t.Error("the other cluster is no longer live")
	}
	resp, err := client(t, srv.ClientURL()).Get(t.Context(), prefix+"/"+set+"/clusters/east/alive")
	must(t, err)
	if len(resp.Kvs) != 1 || !strings.Contains(string(resp.Kvs[0].Value), `"instance":"uid-other"`) {
		t.Errorf("east's alive record: %v, want the other cluster's", resp.Kvs)
	}
}

// TestWithdrawalAfterLeaseLostBeforeRepair: east's lease is lost (revoked
// here, as an expiry would), and another Kubernetes cluster given east's id
// starts and exports web before east's backend has noticed (its lease
// renewals come every TTL/3). East's withdrawal of web then deletes
// nothing of the other's: its own records went with its lease.
func TestWithdrawalAfterLeaseLostBeforeRepair(t *testing.T) {
	t.Parallel()
	srv := startServer(t, filepath.Join(t.TempDir(), "etcd"), "")
	const set = "withdrawlost"
	id := registry.Identity{ClusterSet: set, Cluster: "east", Instance: "uid-first"}
	east := open(t, srv.ClientURL(), id)
	putWeb(t, east)
	raw := client(t, srv.ClientURL())
	alive := prefix + "/" + set + "/clusters/east/alive"
	resp, err := raw.Get(t.Context(), alive)
	must(t, err)
	if len(resp.Kvs) != 1 || resp.Kvs[0].Lease == 0 {
		t.Fatalf("east's alive record: %v, want one under a lease", resp.Kvs)
	}
	_, err = raw.Revoke(t.Context(), clientv3.LeaseID(resp.Kvs[0].Lease))
	must(t, err)

	id.Instance = "uid-other"
	other := open(t, srv.ClientURL(), id)
	must(t, other.PutExport(t.Context(), web, spec2))
	if err := east.DeleteExport(t.Context(), web); !errors.Is(err, registry.ErrClusterIDInUse) {
		t.Errorf("east's withdrawal with its lease lost and the id another's: %v, want ErrClusterIDInUse", err)
	}
	got, err := raw.Get(t.Context(), prefix+"/"+set+"/clusters/east/exports/shop/web")
	must(t, err)
	if len(got.Kvs) != 1 {
		t.Error("east's withdrawal deleted the other cluster's export")
	}
}

// TestWritesBoundedInAnOutage: with etcd out of reach, a write or a
// withdrawal whose context has no deadline (a controller's reconcile)
// fails within the request timeout, rather than waiting for etcd to come
// back while holding the backend's write lock.
func TestWritesBoundedInAnOutage(t *testing.T) {
	t.Parallel()
	srv := startServer(t, filepath.Join(t.TempDir(), "etcd"), "")
	proxy := newSwitchProxy(t, hostOf(t, srv.ClientURL()))
	east, err := etcd.New(t.Context(), etcd.Options{Identity: registry.Identity{ClusterSet: "outage", Cluster: "east"},
		Endpoints: []string{proxy.url()}, Prefix: prefix, TTL: 30 * time.Second, DialTimeout: time.Second, RequestTimeout: time.Second})
	must(t, err)
	t.Cleanup(func() { _ = east.Close() })
	putWeb(t, east)

	proxy.switchTo("127.0.0.1:1")
	t.Cleanup(func() { proxy.switchTo(hostOf(t, srv.ClientURL())) }) // unblocks a write still waiting
	for name, write := range map[string]func() error{
		"PutEndpoints": func() error {
			return east.PutEndpoints(context.Background(), web, []registry.EndpointGroup{{AddressType: "IPv4"}})
		},
		"DeleteExport": func() error { return east.DeleteExport(context.Background(), web) },
	} {
		done := make(chan error, 1)
		go func() { done <- write() }()
		var got error
		poll.Until(t, 15*time.Second, name+" to return in the outage", func() (bool, string) {
			select {
			case got = <-done:
				return true, ""
			default:
				return false, "still waiting"
			}
		})
		if got == nil {
			t.Errorf("%s succeeded with etcd out of reach", name)
		}
	}
}

// TestWithdrawalWhileAliveRecordGone: someone deletes the cluster's alive
// record while its lease lives; a withdrawal made before the backend has
// written it back deletes the export, and does not replace the live lease
// (a lease replaced while the old one was renewed went unrenewed, and took
// every record of the cluster with it a TTL later).
func TestWithdrawalWhileAliveRecordGone(t *testing.T) {
	t.Parallel()
	srv := startServer(t, filepath.Join(t.TempDir(), "etcd"), "")
	const set = "alivegone"
	east := open(t, srv.ClientURL(), registry.Identity{ClusterSet: set, Cluster: "east", Instance: "uid-first"}, func(o *etcd.Options) { o.TTL = 2 * time.Second })
	putWeb(t, east)
	api := registry.ServiceKey{Namespace: "shop", Name: "api"}
	must(t, east.PutExport(t.Context(), api, spec))
	raw := client(t, srv.ClientURL())
	_, err := raw.Delete(t.Context(), prefix+"/"+set+"/clusters/east/alive")
	must(t, err)
	must(t, east.DeleteExport(t.Context(), web))
	if got, _ := raw.Get(t.Context(), prefix+"/"+set+"/clusters/east/exports/shop/web"); len(got.Kvs) != 0 {
		t.Error("the withdrawn export is still in etcd")
	}
	// Two TTLs later the cluster's other export is still there: its lease
	// is renewed.
	apiKey := prefix + "/" + set + "/clusters/east/exports/shop/api"
	until := time.Now().Add(4 * time.Second)
	poll.Until(t, 10*time.Second, "two TTLs with east's api export in etcd", func() (bool, string) {
		got, err := raw.Get(t.Context(), apiKey)
		if err == nil && len(got.Kvs) == 0 {
			t.Fatal("east's api export expired: its lease was not renewed")
		}
		return time.Now().After(until), "waiting"
	})
}
