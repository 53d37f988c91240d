package export

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/clusterset"
	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/memory"
)

// TestOwnRecordsWrittenBack: this cluster's records deleted or changed in
// the registry by another writer (here, the same identity opened again),
// also while this cluster cannot read the registry, reach the controller's
// queue through the View, and the reconcile they bring writes them back;
// Ready stays Exported only for what the registry holds.
func TestOwnRecordsWrittenBack(t *testing.T) {
	slice := newSlice("web-a", svcName, discoveryv1.AddressTypeIPv4, httpPort(), ep("10.1.0.1", nil))
	e := newEnv(t, newServiceExport(), newService(), slice)
	// The View follows the store, as the manager's registry watch feeds it,
	// and its changes reach a queue, as View.Source feeds the controller.
	watcher := e.reg.store.Watcher(clusterSet)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = watcher.Watch(ctx, e.view) }()
	t.Cleanup(func() { cancel(); <-done })
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	t.Cleanup(q.ShutDown)
	if err := e.view.Source(e.r.changeToExport).Start(ctx, q); err != nil {
		t.Fatal(err)
	}
	// drain reconciles every request the View queued until none is left,
	// and reports how many there were.
	drain := func() int {
		n := 0
		for q.Len() > 0 {
			req, _ := q.Get()
			if req.NamespacedName != (types.NamespacedName{Namespace: ns, Name: svcName}) {
				t.Fatalf("request for %s", req)
			}
			e.mustReconcile()
			q.Done(req)
			n++
		}
		return n
	}
	held := func(want bool) func() (bool, string) {
		return func() (bool, string) {
			own, eps := e.r.published(webKey)
			return (own != nil && eps != nil) == want, fmt.Sprintf("export %v, endpoints %v", own != nil, eps != nil)
		}
	}
	exported := func() {
		t.Helper()
		poll.Until(t, 5*time.Second, "the View to hold this cluster's records", func() (bool, string) {
			drain()
			return held(true)()
		})
		drain()
		if _, ok := e.reg.export(webKey); !ok {
			t.Fatal("export not in the registry")
		}
		assertCondition(t, e.serviceExport(), readyType, metav1.ConditionTrue, string(mcsv1beta1.ServiceExportReasonExported))
	}
	e.mustReconcile()
	exported()

	other, err := e.reg.store.Open(memory.Options{Identity: registry.Identity{ClusterSet: clusterSet, Cluster: thisID}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })

	// Deleted by another writer: the View's change brings a reconcile,
	// which writes the records back.
	if err := other.DeleteExport(context.Background(), webKey); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 5*time.Second, "the View to see the records gone and queue the export", func() (bool, string) {
		return q.Len() > 0, "nothing queued"
	})
	exported()

	// Changed by another writer: written back as the Service says.
	changed := newService().Spec.Ports
	if err := other.PutExport(context.Background(), webKey, registry.ServiceSpec{Type: registry.Headless}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 5*time.Second, "the View to see the change", func() (bool, string) {
		own, _ := e.r.published(webKey)
		return own != nil && own.Spec.Type == registry.Headless, ""
	})
	drain()
	poll.Until(t, 5*time.Second, "the export written back", func() (bool, string) {
		spec, ok := e.reg.export(webKey)
		return ok && spec.Type == registry.ClusterSetIP && len(spec.Ports) == len(changed), fmt.Sprintf("%+v", spec)
	})

	// Deleted while this cluster cannot read the registry: nothing is done
	// meanwhile; the full read at reconnection shows the gap, and the
	// records are written back.
	poll.Until(t, 5*time.Second, "the View to hold the records", held(true))
	drain()
	watcher.Disconnect(nil)
	poll.Until(t, 5*time.Second, "the View to see the registry unreachable", func() (bool, string) {
		c, _ := e.view.Connected()
		return !c, ""
	})
	if err := other.DeleteExport(context.Background(), webKey); err != nil {
		t.Fatal(err)
	}
	drain()
	watcher.Reconnect()
	poll.Until(t, 5*time.Second, "the View to see the records gone after reconnection", held(false))
	exported()
	if keys := e.reg.store.Snapshot(clusterSet).Exports; !slices.ContainsFunc(keys, func(x registry.Export) bool { return x.Cluster == thisID }) {
		t.Errorf("registry holds no export of %s: %v", thisID, keys)
	}
}

// A change of a Service's records in the registry reaches the export
// controller's queue only where it can concern this cluster's export: a
// ServiceExport of the Service, or records of this cluster to withdraw.
// Another cluster's change of a Service this cluster does not export
// reconciles nothing.
func TestChangeToExportConcernsThisClustersExportsOnly(t *testing.T) {
	e := newEnv(t, newServiceExport(), newService())
	elsewhere := registry.ServiceKey{Namespace: ns, Name: "elsewhere"}
	stale := registry.ServiceKey{Namespace: ns, Name: "stale"}
	spec := registry.ServiceSpec{Type: registry.ClusterSetIP}
	e.syncView(
		registry.Export{Cluster: otherID, Service: webKey, Spec: spec, Order: otherOrd},
		registry.Export{Cluster: otherID, Service: elsewhere, Spec: spec, Order: otherOrd},
		registry.Export{Cluster: thisID, Service: stale, Spec: spec, Order: ownOrder},
	)
	for _, tc := range []struct {
		what string
		key  registry.ServiceKey
		want bool
	}{
		{"a Service this cluster exports", webKey, true},
		{"a Service only another cluster exports", elsewhere, false},
		{"this cluster's records with no ServiceExport (to withdraw)", stale, true},
	} {
		got := len(e.r.changeToExport(context.Background(), clusterset.Change{Service: tc.key})) > 0
		if got != tc.want {
			t.Errorf("%s: queued %v, want %v", tc.what, got, tc.want)
		}
	}

	// Records of this cluster the View does not show, found by the startup
	// cleanup (unguarded): queued, to be withdrawn.
	unseen := registry.ServiceKey{Namespace: ns, Name: "unseen"}
	e.r.setUnguarded(unseen, true)
	if len(e.r.changeToExport(context.Background(), clusterset.Change{Service: unseen})) == 0 {
		t.Error("a change of a Service the startup cleanup found this cluster's records of was not queued")
	}

	// A cache that cannot tell whether the ServiceExport exists: queued.
	e.r.Client = unsyncedExports{e.c}
	if len(e.r.changeToExport(context.Background(), clusterset.Change{Service: elsewhere})) == 0 {
		t.Error("a change was not queued though the cache could not tell whether its ServiceExport exists")
	}

	// A View that has not read the registry yet cannot tell which records
	// are this cluster's: queued.
	unsynced := newEnv(t)
	if len(unsynced.r.changeToExport(context.Background(), clusterset.Change{Service: elsewhere})) == 0 {
		t.Error("a change was not queued before the View read the registry")
	}
}
