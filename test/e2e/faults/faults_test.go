package faults

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/conditions"
	"github.com/mcsd-io/mcsd/internal/controller/export"
	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	fw "github.com/mcsd-io/mcsd/test/framework"
	"github.com/mcsd-io/mcsd/test/testbed"
)

// A cluster that is down (its controller and its API server) for longer
// than the TTL drops out of every import: its lease expires and the other
// clusters remove its endpoints. When it comes back, so do they.
func TestClusterDownPastTTL(t *testing.T) {
	restoreOnCleanup(t)
	const ns, name = "fault-cluster-down", "web"
	env.EnsureNamespaceEverywhere(t, ns)
	want := map[string][]string{
		"c1": deployAndExport(t, "c1", fw.App{Namespace: ns, Name: name, Replicas: 2}),
		"c2": deployAndExport(t, "c2", fw.App{Namespace: ns, Name: name, Replicas: 2}),
	}
	waitImportEverywhere(t, ns, name, want)

	env.StopController("c2")
	down := time.Now()
	stopCluster(t, "c2")
	t.Logf("c2's controller and cluster stopped in %s", time.Since(down).Round(time.Millisecond))

	onlyC1 := map[string][]string{"c1": want["c1"]}
	for _, id := range []string{"c1", "c3"} {
		waitImport(t, id, ns, name, onlyC1, env.TTL()+timeout)
	}
	gone := time.Since(down)
	t.Logf("c2's endpoints gone from c1 and c3 %s after c2 went down (TTL %s)", gone.Round(time.Millisecond), env.TTL())
	// The lease was renewed at most TTL/3 before the stop: a drop much
	// earlier would mean the stopped controller withdrew its records.
	if gone < env.TTL()/2 {
		t.Errorf("c2 dropped out %s after it went down, before its lease (TTL %s) could expire", gone, env.TTL())
	}

	restartCluster(t, "c2")
	startController(t, "c2")
	want["c2"] = waitPods(t, "c2", ns, name, 2)
	waitImportEverywhere(t, ns, name, want)
}

// A controller restarted within the TTL finds everything as it left it: it
// writes nothing, and the other clusters see nothing change.
func TestControllerRestartWithinTTL(t *testing.T) {
	restoreOnCleanup(t)
	const ns = "fault-restart"
	env.EnsureNamespaceEverywhere(t, ns)
	want := deployAndImport(t, ns,
		exported{"c1", fw.App{Name: "api", Replicas: 2}},
		exported{"c2", fw.App{Name: "api", Replicas: 2}},
		exported{"c2", fw.App{Name: "db", Replicas: 2, Headless: true, StatefulSet: true}},
		exported{"c3", fw.App{Name: "cache", Replicas: 1}},
	)
	waitQuiet(t, 3*time.Second, timeout)

	const restarted = "c2"
	before := allWrites()
	recsBefore := registryRecords(t, restarted)
	env.StopController(restarted)
	down := time.Now()
	c := startController(t, restarted)
	t.Logf("%s's controller restarted and ready %s after it stopped", restarted, time.Since(down).Round(time.Millisecond))
	// The restarted controller has reconciled every object of its cluster:
	// whatever it would write, it has written.
	waitReconciled(t, restarted, timeout)

	own := c.Writes()
	t.Logf("writes of the restarted controller in %s: %v", restarted, own)
	if w := churn(own); len(w) != 0 {
		t.Errorf("the controller restarted in %s wrote %v (all writes: %v), want no writes to %v", restarted, w, own, churnResources)
	}
	after := allWrites()
	for _, id := range env.ClusterIDs() {
		if id == restarted {
			continue
		}
		d := testbed.DiffWrites(before[id], after[id])
		if w := churn(d); len(w) != 0 {
			t.Errorf("while %s's controller restarted, %s's controller wrote %v (all writes: %v)", restarted, id, w, d)
		}
	}
	// Nor did the registry change: the restarted controller took over its
	// lease and rewrote no record.
	recsAfter := registryRecords(t, restarted)
	if !maps.Equal(leasesAndRevisions(recsBefore), leasesAndRevisions(recsAfter)) {
		t.Errorf("%s's registry records changed across the restart:\nbefore %v\nafter  %v", restarted,
			leasesAndRevisions(recsBefore), leasesAndRevisions(recsAfter))
	}
	for _, id := range env.ClusterIDs() {
		for name, w := range want {
			if ok, msg := importMatches(t, id, ns, name, w); !ok {
				t.Errorf("%s: import %s after the restart: %s", id, name, msg)
			}
		}
	}
}

func leasesAndRevisions(recs map[string]fw.Record) map[string]string {
	out := map[string]string{}
	for k, r := range recs {
		out[k] = fmt.Sprintf("lease %x rev %d", r.Lease, r.ModRevision)
	}
	return out
}

// While the registry is down, every cluster keeps its imports as last seen
// and says so in a RegistryReachable=False condition; when it is back, the
// records are all there and the imports converge without being recreated.
func TestRegistryOutage(t *testing.T) {
	restoreOnCleanup(t)
	const ns = "fault-registry"
	env.EnsureNamespaceEverywhere(t, ns)
	want := deployAndImport(t, ns,
		exported{"c1", fw.App{Name: "web", Replicas: 2}},
		exported{"c3", fw.App{Name: "web", Replicas: 1}},
		exported{"c2", fw.App{Name: "db", Replicas: 2, Headless: true, StatefulSet: true}},
	)
	names := slices.Sorted(maps.Keys(want))
	objects := derivedEverywhere(t)
	// nothingDeleted fails when mcsd deleted (or recreated) anything it
	// made in any cluster, in any namespace.
	nothingDeleted := func() (bool, string) { return sameEverywhere(t, objects) }

	leases := map[string]int64{}
	for _, id := range env.ClusterIDs() {
		leases[id] = registryRecords(t, id)["alive"].Lease
	}
	// Past the TTL, and the request timeout of the look at the lease that
	// follows, by a few seconds: every export says its records lapsed.
	outage := 2*env.TTL() + 3*time.Second
	down := time.Now()
	env.StopRegistry()
	t.Logf("registry stopped in %s", time.Since(down).Round(time.Millisecond))
	// When each import first reported the outage, by "cluster import"; when
	// each export first said its records may have lapsed (its lease
	// unrenewed for a TTL), by "cluster export".
	reported := map[string]time.Duration{}
	lapsed := map[string]time.Duration{}
	poll.Throughout(t, outage, "no import, derived Service or EndpointSlice deleted during the outage", func() (bool, string) {
		if ok, msg := nothingDeleted(); !ok {
			return false, msg
		}
		for name, from := range want {
			for id := range from {
				k := id + " " + name
				if _, seen := lapsed[k]; seen {
					continue
				}
				se := fw.GetOrNil[mcsv1beta1.ServiceExport](t, clientOf(t, id), ns, name)
				if c := exportReady(se); c != nil && c.Status == metav1.ConditionUnknown && c.Reason == string(mcsv1beta1.ServiceExportReasonPending) {
					lapsed[k] = time.Since(down).Round(100 * time.Millisecond)
				}
			}
		}
		for _, id := range env.ClusterIDs() {
			for _, name := range names {
				si := fw.GetImport(t, clientOf(t, id), ns, name)
				c := conditionOf(si, conditions.RegistryReachable)
				k := id + " " + name
				if _, seen := reported[k]; !seen && c != nil && c.Status == metav1.ConditionFalse && c.Reason == conditions.ReasonRegistryUnreachable {
					reported[k] = time.Since(down).Round(100 * time.Millisecond)
				}
			}
		}
		return true, ""
	})
	t.Logf("outage reported after: %v; exports' records said lapsed after: %v", reported, lapsed)
	for name, from := range want {
		for id := range from {
			if _, ok := lapsed[id+" "+name]; !ok {
				t.Errorf("%s: export %s never said its records may have lapsed (no Ready=Unknown Pending within %s, the lease's TTL %s)", id, name, outage, env.TTL())
			}
		}
	}
	for _, id := range env.ClusterIDs() {
		for _, name := range names {
			if _, ok := reported[id+" "+name]; !ok {
				t.Errorf("%s: import %s never reported the outage (no %s=False %s condition within %s)",
					id, name, conditions.RegistryReachable, conditions.ReasonRegistryUnreachable, outage)
			}
		}
	}

	if err := env.StartRegistry(context.Background()); err != nil {
		t.Fatal(err)
	}
	up := time.Now()
	poll.Until(t, timeout, "imports converged again with the condition cleared", func() (bool, string) {
		if ok, msg := nothingDeleted(); !ok {
			t.Fatalf("after the registry came back: %s (%s)", msg, leaseReport(leases))
		}
		for _, id := range env.ClusterIDs() {
			for _, name := range names {
				if ok, msg := importMatches(t, id, ns, name, want[name]); !ok {
					return false, fmt.Sprintf("%s: %s: %s", id, name, msg)
				}
				si := fw.GetImport(t, clientOf(t, id), ns, name)
				if c := conditionOf(si, conditions.RegistryReachable); c != nil {
					return false, fmt.Sprintf("%s: %s: %s", id, name, fw.CondString(si.Status.Conditions))
				}
			}
		}
		for name, from := range want {
			for id := range from {
				se := fw.GetOrNil[mcsv1beta1.ServiceExport](t, clientOf(t, id), ns, name)
				if c := exportReady(se); c == nil || c.Status != metav1.ConditionTrue {
					return false, fmt.Sprintf("%s: export %s: Ready %+v", id, name, c)
				}
			}
		}
		return true, ""
	})
	t.Logf("converged %s after the registry came back", time.Since(up).Round(time.Millisecond))
	// Leases that were about to expire when etcd stopped get a new TTL when it
	// starts; a backend whose lease was lost anyway writes its records again.
	// Either way the records are there, on a live lease, and they stay.
	for _, id := range env.ClusterIDs() {
		poll.Until(t, timeout, id+"'s records back in the registry", func() (bool, string) {
			return recordsLive(t, id, ns, want)
		})
	}
	t.Log(leaseReport(leases))
	poll.Throughout(t, env.TTL()+2*time.Second, "imports and records stay after the outage", func() (bool, string) {
		if ok, msg := nothingDeleted(); !ok {
			return false, msg + " (" + leaseReport(leases) + ")"
		}
		for _, id := range env.ClusterIDs() {
			if ok, msg := recordsLive(t, id, ns, want); !ok {
				return false, msg
			}
			for _, name := range names {
				if ok, msg := importMatches(t, id, ns, name, want[name]); !ok {
					return false, fmt.Sprintf("%s: %s: %s", id, name, msg)
				}
			}
		}
		return true, ""
	})
}

// leaseReport says, for every cluster, whether its records are still on
// the lease they had (by the alive key), or on a new one: then the lease
// expired and the backend wrote the records again, and watchers may have
// seen them deleted.
func leaseReport(before map[string]int64) string {
	var out []string
	for _, id := range env.ClusterIDs() {
		recs, err := env.RegistryRecords(context.Background(), id)
		switch l := recs["alive"].Lease; {
		case err != nil:
			out = append(out, fmt.Sprintf("%s: %v", id, err))
		case l == before[id]:
			out = append(out, fmt.Sprintf("%s: lease %x kept", id, l))
		default:
			out = append(out, fmt.Sprintf("%s: lease %x lost, records written again on lease %x", id, before[id], l))
		}
	}
	return strings.Join(out, "; ")
}

// recordsLive reports whether cluster id's alive key and its export and
// endpoints of every Service it exports in want are in the registry on a
// live lease.
func recordsLive(t *testing.T, id, ns string, want map[string]map[string][]string) (bool, string) {
	recs, err := env.RegistryRecords(context.Background(), id)
	if err != nil {
		return false, err.Error()
	}
	keys := []string{"alive"}
	for name, w := range want {
		if _, ok := w[id]; ok {
			keys = append(keys, "exports/"+ns+"/"+name, "endpoints/"+ns+"/"+name)
		}
	}
	for _, k := range keys {
		r, ok := recs[k]
		if !ok {
			return false, fmt.Sprintf("%s: no record %s", id, k)
		}
		if r.TTL <= 0 {
			return false, fmt.Sprintf("%s: record %s on lease %x with TTL %d", id, k, r.Lease, r.TTL)
		}
	}
	return true, ""
}

// A ServiceExport deleted while its cluster's controller is down is
// withdrawn when the controller starts: by its finalizer when the
// ServiceExport still waits for it, by the startup cleanup when it is gone
// altogether (its finalizer removed by hand). The restart is within the TTL,
// so the records go because mcsd withdraws them, not because they expire.
func TestExportDeletedWhileControllerDown(t *testing.T) {
	restoreOnCleanup(t)
	const ns, owner = "fault-orphan", "c3"
	env.EnsureNamespaceEverywhere(t, ns)
	want := map[string]map[string][]string{}
	for _, name := range []string{"forced", "pending", "keep"} {
		want[name] = map[string][]string{owner: deployAndExport(t, owner, fw.App{Namespace: ns, Name: name, Replicas: 1})}
	}
	for name, w := range want {
		waitImportEverywhere(t, ns, name, w)
	}
	keepUIDs := map[string]types.UID{}
	for _, id := range env.ClusterIDs() {
		keepUIDs[id] = fw.GetImport(t, clientOf(t, id), ns, "keep").UID
	}
	lease := registryRecords(t, owner)["alive"].Lease

	cl := clientOf(t, owner)
	ctx := context.Background()
	env.StopController(owner)
	down := time.Now()
	fw.Unexport(t, cl, ns, "pending")
	fw.Unexport(t, cl, ns, "forced")
	se := &mcsv1beta1.ServiceExport{}
	if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: "forced"}, se); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(se.Finalizers, export.Finalizer) {
		t.Fatalf("ServiceExport forced has no %s finalizer: %v", export.Finalizer, se.Finalizers)
	}
	base := se.DeepCopy()
	se.Finalizers = slices.DeleteFunc(se.Finalizers, func(f string) bool { return f == export.Finalizer })
	if err := cl.Patch(ctx, se, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: "forced"}, se); !apierrors.IsNotFound(err) {
		t.Fatalf("ServiceExport forced should be gone: %v", err)
	}
	startController(t, owner)
	if since := time.Since(down); since >= env.TTL() {
		t.Fatalf("the controller was down %s, not within the TTL %s: the test proves nothing", since, env.TTL())
	}

	for _, id := range env.ClusterIDs() {
		waitImportGone(t, id, ns, "forced", timeout)
		waitImportGone(t, id, ns, "pending", timeout)
		if ok, msg := importMatches(t, id, ns, "keep", want["keep"]); !ok {
			t.Errorf("%s: import keep: %s", id, msg)
		}
		if si := fw.GetImport(t, clientOf(t, id), ns, "keep"); si == nil || si.UID != keepUIDs[id] {
			t.Errorf("%s: import keep was deleted", id)
		}
	}
	poll.Until(t, timeout, "ServiceExport pending deleted (finalizer ran)", func() (bool, string) {
		err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: "pending"}, &mcsv1beta1.ServiceExport{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	recs := registryRecords(t, owner)
	var left []string
	for k := range recs {
		if strings.HasSuffix(k, "/"+ns+"/forced") || strings.HasSuffix(k, "/"+ns+"/pending") {
			left = append(left, k)
		}
	}
	if len(left) > 0 {
		t.Errorf("%s's records of deleted exports are still in the registry: %v", owner, left)
	}
	for _, k := range []string{"alive", "exports/" + ns + "/keep", "endpoints/" + ns + "/keep"} {
		if r, ok := recs[k]; !ok || r.Lease != lease {
			t.Errorf("%s's record %s: %+v, want it on the lease it had before the restart (%x)", owner, k, r, lease)
		}
	}
	// The derived Service of the dropped imports is gone too (waitImportGone);
	// the local Services are untouched.
	for _, name := range []string{"forced", "pending"} {
		if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &corev1.Service{}); err != nil {
			t.Errorf("local Service %s: %v", name, err)
		}
	}
}
