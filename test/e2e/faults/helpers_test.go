package faults

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/controller/imports"
	"github.com/mcsd-io/mcsd/internal/metrics/metricstest"
	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	"github.com/mcsd-io/mcsd/internal/wellknown"
	fw "github.com/mcsd-io/mcsd/test/framework"
	"github.com/mcsd-io/mcsd/test/testbed"
)

const (
	timeout      = 30 * time.Second
	readyTimeout = 30 * time.Second
)

// churnResources are the resources a controller must not write when
// nothing changed. Events and leases are left out: events are notes about
// changes (and the recorder may patch an event's count), and leases are
// leader election's heartbeat, which writes by design (off in these tests).
var churnResources = []string{
	"serviceimports", "serviceimports/status",
	"services",
	"endpointslices",
	"serviceexports", "serviceexports/status",
}

var (
	clientsMu sync.Mutex
	clients   = map[string]client.Client{}
	// stopped are the clusters a test stopped and has not restarted.
	stopped = map[string]bool{}
)

// clientOf returns an admin client of cluster id, made once.
func clientOf(t *testing.T, id string) client.Client {
	t.Helper()
	clientsMu.Lock()
	defer clientsMu.Unlock()
	if cl := clients[id]; cl != nil {
		return cl
	}
	cl := env.Client(t, id)
	clients[id] = cl
	return cl
}

// restoreOnCleanup makes sure that whatever the test stops is running again
// when it ends, pass or fail: the registry, every cluster and every
// controller.
func restoreOnCleanup(t *testing.T) {
	t.Cleanup(func() {
		ctx := context.Background()
		if err := env.StartRegistry(ctx); err != nil {
			t.Errorf("restore: start registry: %v", err)
		}
		for _, id := range env.ClusterIDs() {
			if !stopped[id] {
				continue
			}
			if err := env.RestartCluster(ctx, id); err != nil {
				t.Errorf("restore: restart cluster %s: %v", id, err)
				continue
			}
			delete(stopped, id)
		}
		if err := env.StartControllers(ctx); err != nil {
			t.Errorf("restore: start controllers: %v", err)
		}
		for _, id := range env.ClusterIDs() {
			if c := env.Controller(id); c != nil {
				if err := c.WaitReady(ctx, readyTimeout); err != nil {
					t.Errorf("restore: %v", err)
				}
			}
		}
	})
}

func stopCluster(t *testing.T, id string) {
	t.Helper()
	stopped[id] = true
	if err := env.StopCluster(context.Background(), id); err != nil {
		t.Fatalf("stop cluster %s: %v", id, err)
	}
}

func restartCluster(t *testing.T, id string) {
	t.Helper()
	if err := env.RestartCluster(context.Background(), id); err != nil {
		t.Fatalf("restart cluster %s: %v", id, err)
	}
	delete(stopped, id)
}

// startController starts cluster id's mcsd and waits until it is ready.
func startController(t *testing.T, id string) *fw.Controller {
	t.Helper()
	c, err := env.StartController(context.Background(), id)
	if err != nil {
		t.Fatalf("start controller %s: %v", id, err)
	}
	if err := c.WaitReady(context.Background(), readyTimeout); err != nil {
		t.Fatal(err)
	}
	return c
}

// deployAndExport deploys app in cluster id and exports it once its pods
// run; it returns the pods' IPs.
func deployAndExport(t *testing.T, id string, app fw.App) []string {
	t.Helper()
	cl := clientOf(t, id)
	fw.Deploy(t, cl, app)
	ips := waitPods(t, id, app.Namespace, app.Name, int(app.Replicas))
	fw.Export(t, cl, app.Namespace, app.Name)
	return ips
}

// waitPods waits until n pods of app run in cluster id and returns their IPs.
func waitPods(t *testing.T, id, ns, app string, n int) []string {
	t.Helper()
	cl := clientOf(t, id)
	var ips []string
	poll.Until(t, timeout, fmt.Sprintf("%d pods of %s running in %s", n, app, id), func() (bool, string) {
		ips = fw.PodIPs(t, cl, ns, app)
		return len(ips) == n, fmt.Sprintf("%d pods running: %v", len(ips), ips)
	})
	return ips
}

// importMatches reports whether cluster id's import ns/name lists exactly
// the clusters of want in status.clusters, and has slices from exactly
// those clusters with their ready endpoints.
func importMatches(t *testing.T, id, ns, name string, want map[string][]string) (bool, string) {
	t.Helper()
	cl := clientOf(t, id)
	si := fw.GetImport(t, cl, ns, name)
	if si == nil {
		return false, "no ServiceImport"
	}
	var got []string
	for _, c := range si.Status.Clusters {
		got = append(got, c.Cluster)
	}
	slices.Sort(got) // in no particular order
	if wantIDs := slices.Sorted(maps.Keys(want)); !slices.Equal(got, wantIDs) {
		return false, fmt.Sprintf("status.clusters %v, want %v", got, wantIDs)
	}
	bySource, err := fw.ImportedSlices(cl, ns, name)
	if err != nil {
		return false, err.Error()
	}
	for src := range bySource {
		if _, ok := want[src]; !ok {
			return false, fmt.Sprintf("slices from %s are still there", src)
		}
	}
	for src, ips := range want {
		if got := fw.ReadyAddresses(bySource[src]); !slices.Equal(got, ips) {
			return false, fmt.Sprintf("endpoints from %s %v, want %v", src, got, ips)
		}
	}
	return true, ""
}

// waitImport waits until cluster id's import ns/name matches want (see
// importMatches).
func waitImport(t *testing.T, id, ns, name string, want map[string][]string, within time.Duration) {
	t.Helper()
	poll.Until(t, within, fmt.Sprintf("import %s/%s in %s from %v", ns, name, id, slices.Sorted(maps.Keys(want))), func() (bool, string) {
		return importMatches(t, id, ns, name, want)
	})
}

// waitImportEverywhere waits until every cluster's import ns/name matches
// want (see importMatches).
func waitImportEverywhere(t *testing.T, ns, name string, want map[string][]string) {
	t.Helper()
	for _, id := range env.ClusterIDs() {
		waitImport(t, id, ns, name, want, timeout)
	}
}

// exported is an app that cluster deploys and exports.
type exported struct {
	cluster string
	app     fw.App
}

// deployAndImport deploys and exports each app from its cluster, in
// namespace ns, then waits until every cluster's import of each Service
// matches; it returns the pods' IPs by Service name and cluster, as
// importMatches wants them.
func deployAndImport(t *testing.T, ns string, apps ...exported) map[string]map[string][]string {
	t.Helper()
	want := map[string]map[string][]string{}
	for _, e := range apps {
		e.app.Namespace = ns
		if want[e.app.Name] == nil {
			want[e.app.Name] = map[string][]string{}
		}
		want[e.app.Name][e.cluster] = deployAndExport(t, e.cluster, e.app)
	}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		waitImportEverywhere(t, ns, name, want[name])
	}
	return want
}

// waitImportGone waits until cluster id has neither the import ns/name nor
// anything mcsd derived for it.
func waitImportGone(t *testing.T, id, ns, name string, within time.Duration) {
	t.Helper()
	cl := clientOf(t, id)
	poll.Until(t, within, fmt.Sprintf("import %s/%s gone from %s", ns, name, id), func() (bool, string) {
		if fw.GetImport(t, cl, ns, name) != nil {
			return false, "ServiceImport still there"
		}
		bySource, err := fw.ImportedSlices(cl, ns, name)
		if err != nil {
			return false, err.Error()
		}
		if len(bySource) != 0 {
			return false, fmt.Sprintf("slices from %v still there", slices.Sorted(maps.Keys(bySource)))
		}
		err = cl.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: imports.DerivedServiceName(name)}, &corev1.Service{})
		if client.IgnoreNotFound(err) != nil {
			return false, err.Error()
		}
		if err == nil {
			return false, "derived Service still there"
		}
		return true, ""
	})
}

// derivedObjects returns the UIDs of everything mcsd made in cluster id:
// ServiceImports, derived Services and EndpointSlices, keyed
// "kind/namespace/name". An object deleted and created again gets a new UID.
func derivedObjects(t *testing.T, id string) (map[string]types.UID, error) {
	t.Helper()
	cl := clientOf(t, id)
	ctx := context.Background()
	out := map[string]types.UID{}
	var sis mcsv1beta1.ServiceImportList
	if err := cl.List(ctx, &sis); err != nil {
		return nil, err
	}
	for _, o := range sis.Items {
		out["ServiceImport/"+o.Namespace+"/"+o.Name] = o.UID
	}
	var svcs corev1.ServiceList
	if err := cl.List(ctx, &svcs); err != nil {
		return nil, err
	}
	for _, o := range svcs.Items {
		if o.Annotations[wellknown.AnnotationManaged] == "true" {
			out["Service/"+o.Namespace+"/"+o.Name] = o.UID
		}
	}
	var eps discoveryv1.EndpointSliceList
	if err := cl.List(ctx, &eps, client.MatchingLabels{discoveryv1.LabelManagedBy: wellknown.ManagedBy}); err != nil {
		return nil, err
	}
	for _, o := range eps.Items {
		out["EndpointSlice/"+o.Namespace+"/"+o.Name] = o.UID
	}
	return out, nil
}

// derivedEverywhere returns the derivedObjects of every cluster, by cluster
// id.
func derivedEverywhere(t *testing.T) map[string]map[string]types.UID {
	t.Helper()
	out := map[string]map[string]types.UID{}
	for _, id := range env.ClusterIDs() {
		objs, err := derivedObjects(t, id)
		if err != nil {
			t.Fatal(err)
		}
		out[id] = objs
	}
	return out
}

// sameEverywhere reports whether the derivedObjects of every cluster are
// the same as before (derivedEverywhere), describing what changed (see
// sameObjects).
func sameEverywhere(t *testing.T, before map[string]map[string]types.UID) (bool, string) {
	for _, id := range env.ClusterIDs() {
		objs, err := derivedObjects(t, id)
		if err != nil {
			return false, err.Error()
		}
		if ok, msg := sameObjects(before[id], objs); !ok {
			return false, id + ": " + msg
		}
	}
	return true, ""
}

// sameObjects compares derivedObjects results: it describes what was
// deleted (or recreated) and what appeared.
func sameObjects(before, now map[string]types.UID) (bool, string) {
	var diffs []string
	for k, uid := range before {
		switch got, ok := now[k]; {
		case !ok:
			diffs = append(diffs, k+" deleted")
		case got != uid:
			diffs = append(diffs, k+" deleted and created again")
		}
	}
	for k := range now {
		if _, ok := before[k]; !ok {
			diffs = append(diffs, k+" created")
		}
	}
	slices.Sort(diffs)
	return len(diffs) == 0, strings.Join(diffs, "; ")
}

// allWrites returns every running controller's write counts, by cluster.
func allWrites() map[string]map[string]int {
	out := map[string]map[string]int{}
	for _, id := range env.ClusterIDs() {
		if c := env.Controller(id); c != nil {
			out[id] = c.Writes()
		}
	}
	return out
}

// churn returns the writes of d to churnResources, and the failed attempts
// of such writes.
func churn(d map[string]int) map[string]int {
	out := map[string]int{}
	for _, r := range churnResources {
		for _, k := range []string{r, r + testbed.Failed} {
			if d[k] != 0 {
				out[k] = d[k]
			}
		}
	}
	return out
}

// waitQuiet waits until no running controller has written anything for
// quiet.
func waitQuiet(t *testing.T, quiet, within time.Duration) {
	t.Helper()
	last := allWrites()
	since := time.Now()
	poll.Until(t, within, fmt.Sprintf("no controller write for %s", quiet), func() (bool, string) {
		if now := allWrites(); fmt.Sprint(now) != fmt.Sprint(last) {
			last, since = now, time.Now()
		}
		return time.Since(since) >= quiet, fmt.Sprintf("still writing: %v", last)
	})
}

// registryRecords reads cluster id's records from etcd.
func registryRecords(t *testing.T, id string) map[string]fw.Record {
	t.Helper()
	recs, err := env.RegistryRecords(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// conditionOf returns a condition of the import, or nil.
func conditionOf(si *mcsv1beta1.ServiceImport, typ string) *metav1.Condition {
	if si == nil {
		return nil
	}
	return fw.Condition(si.Status.Conditions, typ)
}

// exportReady returns se's Ready condition, nil when se is nil or has none.
func exportReady(se *mcsv1beta1.ServiceExport) *metav1.Condition {
	if se == nil {
		return nil
	}
	return fw.Condition(se.Status.Conditions, string(mcsv1beta1.ServiceExportConditionReady))
}

// waitReconciled waits until cluster id's controller has reconciled every
// ServiceExport and ServiceImport of the cluster since it started: its
// export and import gauges, which start empty with each run, count them all.
func waitReconciled(t *testing.T, id string, within time.Duration) {
	t.Helper()
	cl := clientOf(t, id)
	poll.Until(t, within, id+"'s controller reconciled every export and import", func() (bool, string) {
		var ses mcsv1beta1.ServiceExportList
		var sis mcsv1beta1.ServiceImportList
		if err := cl.List(context.Background(), &ses); err != nil {
			return false, err.Error()
		}
		if err := cl.List(context.Background(), &sis); err != nil {
			return false, err.Error()
		}
		exports, err := metricstest.Sum(ctrlmetrics.Registry, "mcsd_service_exports", map[string]string{"cluster": id, "condition": "Ready"})
		if err != nil {
			return false, err.Error()
		}
		imports, err := metricstest.Sum(ctrlmetrics.Registry, "mcsd_service_imports", map[string]string{"cluster": id})
		if err != nil {
			return false, err.Error()
		}
		return int(exports) == len(ses.Items) && int(imports) == len(sis.Items),
			fmt.Sprintf("exports counted %v of %d, imports counted %v of %d", exports, len(ses.Items), imports, len(sis.Items))
	})
}
