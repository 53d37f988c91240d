package faults

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	fw "github.com/mcsd-io/mcsd/test/framework"
	"github.com/mcsd-io/mcsd/test/testbed"
)

// The registry of this suite is a three-member etcd cluster (TestMain).
// Each test below breaks it one way while every cluster exports and
// imports, changes an export during the fault, and checks: no import,
// derived Service or EndpointSlice is deleted or recreated; the change
// arrives; once the fault is over, every import converges with every
// endpoint exactly once. What the fault cost (the time to carry the change,
// to converge after the repair, and the controllers' writes) is logged; the
// figures are in docs/design.md.

// etcdScenario is the clusterset that an etcd fault test breaks: web
// exported from c1 (2 pods) and c3 (1), imported everywhere.
type etcdScenario struct {
	ns      string
	want    map[string][]string
	objects map[string]map[string]types.UID
	writes  map[string]map[string]int
	start   time.Time
}

func newEtcdScenario(t *testing.T, ns string) *etcdScenario {
	t.Helper()
	if env.EtcdCluster() == nil {
		t.Fatal("the suite's registry is not an etcd cluster")
	}
	env.EnsureNamespaceEverywhere(t, ns)
	s := &etcdScenario{ns: ns, want: map[string][]string{
		"c1": deployAndExport(t, "c1", fw.App{Namespace: ns, Name: "web", Replicas: 2}),
		"c3": deployAndExport(t, "c3", fw.App{Namespace: ns, Name: "web", Replicas: 1}),
	}}
	waitImportEverywhere(t, ns, "web", s.want)
	waitQuiet(t, 2*time.Second, timeout)
	s.objects = derivedEverywhere(t)
	s.writes = allWrites()
	s.start = time.Now()
	return s
}

// intact reports whether every object mcsd made before the fault is still
// there, not recreated.
func (s *etcdScenario) intact(t *testing.T) (bool, string) {
	// The scale-up may add EndpointSlices; none may go.
	return sameEverywhere(t, s.objects)
}

// imported reports whether every cluster's import of web matches s.want
// (see importMatches).
func (s *etcdScenario) imported(t *testing.T) (bool, string) {
	for _, id := range env.ClusterIDs() {
		if ok, msg := importMatches(t, id, s.ns, "web", s.want); !ok {
			return false, id + ": " + msg
		}
	}
	return true, ""
}

// scale sets the replicas of web in c1 during the fault and returns how
// long until every cluster imported the new endpoints, failing if anything
// was deleted meanwhile.
func (s *etcdScenario) scale(t *testing.T, replicas int) time.Duration {
	t.Helper()
	cl := clientOf(t, "c1")
	dep := &appsv1.Deployment{}
	if err := cl.Get(context.Background(), client.ObjectKey{Namespace: s.ns, Name: "web"}, dep); err != nil {
		t.Fatal(err)
	}
	dep.Spec.Replicas = ptr.To(int32(replicas))
	if err := cl.Update(context.Background(), dep); err != nil {
		t.Fatal(err)
	}
	s.want["c1"] = waitPods(t, "c1", s.ns, "web", replicas)
	changed := time.Now()
	poll.Until(t, timeout, "the scale-up imported everywhere during the fault", func() (bool, string) {
		if ok, msg := s.intact(t); !ok {
			t.Fatalf("during the fault: %s", msg)
		}
		return s.imported(t)
	})
	return time.Since(changed)
}

// converge waits, after the repair, until every import matches again with
// nothing recreated, the registry holds the exporters' records on live
// leases, and it stays so; it logs what the whole fault cost.
func (s *etcdScenario) converge(t *testing.T, fault string, repaired time.Time, during time.Duration) {
	t.Helper()
	poll.Until(t, timeout, "converged after the repair", func() (bool, string) {
		if ok, msg := s.intact(t); !ok {
			t.Fatalf("after the repair: %s", msg)
		}
		if ok, msg := s.imported(t); !ok {
			return false, msg
		}
		for _, id := range env.ClusterIDs() {
			if c := conditionOf(fw.GetImport(t, clientOf(t, id), s.ns, "web"), "RegistryReachable"); c != nil {
				return false, id + ": RegistryReachable still set"
			}
		}
		for _, id := range []string{"c1", "c3"} {
			if ok, msg := recordsLive(t, id, s.ns, map[string]map[string][]string{"web": s.want}); !ok {
				return false, msg
			}
		}
		return true, ""
	})
	converged := time.Since(repaired)
	poll.Throughout(t, env.TTL()+time.Second, "imports and records stay after the repair", func() (bool, string) {
		if ok, msg := s.intact(t); !ok {
			return false, msg
		}
		return s.imported(t)
	})
	after := allWrites()
	var writes []string
	for _, id := range env.ClusterIDs() {
		d := testbed.DiffWrites(s.writes[id], after[id])
		writes = append(writes, fmt.Sprintf("%s %v", id, d))
		// The scale-up is one EndpointSlice update in each cluster; the
		// fault itself costs no write but, should etcd stay unreadable
		// longer than a retried read (a slow election), one
		// RegistryReachable report and its clearing on each import: never
		// a flapping condition, nor a failed registry write on the
		// ServiceExport.
		got := churn(d)
		n := got["endpointslices"]
		delete(got, "endpointslices")
		status := got["serviceimports/status"]
		delete(got, "serviceimports/status")
		var sis mcsv1beta1.ServiceImportList
		if err := clientOf(t, id).List(context.Background(), &sis); err != nil {
			t.Fatal(err)
		}
		if len(got) > 0 || n < 1 || n > 2 || status%2 != 0 || status > 2*len(sis.Items) {
			t.Errorf("%s: %s's controller wrote %v, want 1 or 2 EndpointSlice updates, at most one report and clearing of each of its %d imports' status, and nothing else",
				fault, id, churn(d), len(sis.Items))
		}
	}
	t.Logf("%s: a scale-up in c1 reached every cluster in %s during the fault; converged %s after the repair; writes from the start: %s",
		fault, during.Round(time.Millisecond), converged.Round(time.Millisecond), writes)
}

// leaderFault is a fault of the etcd leader.
type leaderFault struct {
	// name names the fault in the logs: "leader killed".
	name string
	// inject breaks the leader, member leader; repair mends it.
	inject func(leader int)
	repair func(leader int) error
	// hold is how long after the fault nothing may be deleted.
	hold time.Duration
}

// breakLeader injects f into the etcd leader and checks the scenario
// through it: another member leads, nothing is deleted for f.hold, and a
// scale-up in c1 reaches every cluster; then it repairs the fault and waits
// until everything converges (converge).
func (s *etcdScenario) breakLeader(t *testing.T, f leaderFault) {
	t.Helper()
	etcd := env.EtcdCluster()
	ctx := context.Background()
	leader, err := etcd.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	broken := time.Now()
	f.inject(leader)
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	next, err := etcd.WaitLeader(wctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: member %d broken; member %d leads %s later", f.name, leader, next, time.Since(broken).Round(time.Millisecond))
	poll.Throughout(t, f.hold, "nothing deleted after the fault: "+f.name, func() (bool, string) { return s.intact(t) })
	during := s.scale(t, 3)

	if err := f.repair(leader); err != nil {
		t.Fatal(err)
	}
	if err := etcd.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	s.converge(t, f.name, time.Now(), during)
}

// The etcd leader is killed (SIGKILL) and restarted later.
func TestEtcdLeaderKilled(t *testing.T) {
	restoreOnCleanup(t)
	s := newEtcdScenario(t, "fault-etcd-leader")
	etcd := env.EtcdCluster()
	s.breakLeader(t, leaderFault{name: "leader killed", inject: etcd.Kill, repair: etcd.Restart, hold: 2 * time.Second})
}

// The etcd leader is cut off from the other members, then let back: the
// others elect a new leader; clients of the old one must move on.
func TestEtcdLeaderPartitioned(t *testing.T) {
	restoreOnCleanup(t)
	s := newEtcdScenario(t, "fault-etcd-partition")
	etcd := env.EtcdCluster()
	s.breakLeader(t, leaderFault{
		name: "leader partitioned",
		inject: func(leader int) {
			etcd.Partition(leader)
			t.Cleanup(func() { etcd.Heal(leader) })
		},
		repair: func(leader int) error {
			etcd.Heal(leader)
			return nil
		},
		// Longer than the lease TTL: a controller that kept renewing through
		// the cut-off member only would lose its lease, and its records.
		hold: env.TTL() + 2*time.Second,
	})
}

// An importing cluster's API server restarts under a running mcsd: mcsd
// reconnects, takes a change that happened meanwhile, and writes nothing
// that did not change.
func TestAPIServerRestartUnderController(t *testing.T) {
	restoreOnCleanup(t)
	const ns, restarted = "fault-apiserver", "c2"
	env.EnsureNamespaceEverywhere(t, ns)
	want := map[string][]string{"c1": deployAndExport(t, "c1", fw.App{Namespace: ns, Name: "web", Replicas: 2})}
	waitImportEverywhere(t, ns, "web", want)
	waitQuiet(t, 2*time.Second, timeout)
	objects, err := derivedObjects(t, restarted)
	if err != nil {
		t.Fatal(err)
	}
	before := env.Controller(restarted).Writes()

	down := time.Now()
	stopCluster(t, restarted)
	// A change while the API server is away.
	cl := clientOf(t, "c1")
	dep := &appsv1.Deployment{}
	if err := cl.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "web"}, dep); err != nil {
		t.Fatal(err)
	}
	dep.Spec.Replicas = ptr.To[int32](3)
	if err := cl.Update(context.Background(), dep); err != nil {
		t.Fatal(err)
	}
	want["c1"] = waitPods(t, "c1", ns, "web", 3)
	restartCluster(t, restarted)
	up := time.Now()
	t.Logf("%s's control plane was down %s", restarted, up.Sub(down).Round(time.Millisecond))
	waitImport(t, restarted, ns, "web", want, timeout)
	t.Logf("%s's import took the change %s after its API server was back", restarted, time.Since(up).Round(time.Millisecond))
	waitReconciled(t, restarted, timeout)

	now, err := derivedObjects(t, restarted)
	if err != nil {
		t.Fatal(err)
	}
	if ok, msg := sameObjects(objects, now); !ok {
		t.Errorf("%s: objects recreated across the API server's restart: %s", restarted, msg)
	}
	d := testbed.DiffWrites(before, env.Controller(restarted).Writes())
	t.Logf("writes of %s's controller across the restart: %v", restarted, d)
	// The change is an EndpointSlice update (one per address type at
	// most; attempts that failed while the API server was away aside);
	// nothing else changed.
	got := churn(d)
	slicesWritten := got["endpointslices"]
	delete(got, "endpointslices")
	delete(got, "endpointslices"+testbed.Failed)
	if len(got) > 0 || slicesWritten < 1 || slicesWritten > 2 {
		t.Errorf("%s's controller wrote %v across its API server's restart (all: %v), want 1 or 2 EndpointSlice updates and nothing else",
			restarted, churn(d), d)
	}
}
