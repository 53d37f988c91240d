package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/conditions"
	"github.com/mcsd-io/mcsd/internal/metrics/metricstest"
	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	"github.com/mcsd-io/mcsd/pkg/registry"
	etcdregistry "github.com/mcsd-io/mcsd/pkg/registry/etcd"
	fw "github.com/mcsd-io/mcsd/test/framework"
)

// etcdClient is a plain etcd client of the testbed's registry, as a user or
// another writer would use, closed at the end of the test.
func etcdClient(t *testing.T) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{env.RegistryURL()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// clusterPrefix is the etcd prefix of cluster id's records.
func clusterPrefix(id string) string {
	return fmt.Sprintf("%s/%s/clusters/%s/", etcdregistry.DefaultPrefix, env.TB.ClusterSetID(), id)
}

func rejectedTotal(t *testing.T, cluster string) float64 {
	t.Helper()
	v, err := metricstest.Sum(ctrlmetrics.Registry, "mcsd_registry_records_rejected_total", map[string]string{"cluster": cluster})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// A writer that is no member (records of cluster "evil", with no alive
// record and no lease) and a member's hostile record (the endpoints of
// "rogue", a member with an alive record on a lease of its own and no
// controller, with a loopback address) beside c1's good export of the same
// Service: every cluster keeps importing c1's endpoints, names the refused
// clusters in RecordsAccepted and an Event, and counts the refusals. The
// same records written under c3, on c3's lease, are withdrawn by c3's
// controller, which does not export the Service.
func TestHostileRecordsRefused(t *testing.T) {
	restoreOnCleanup(t)
	const ns, name = "fault-hostile", "web"
	env.EnsureNamespaceEverywhere(t, ns)
	want := map[string][]string{"c1": deployAndExport(t, "c1", fw.App{Namespace: ns, Name: name, Replicas: 2})}
	waitImportEverywhere(t, ns, name, want)
	before := rejectedTotal(t, "c2")

	cli := etcdClient(t)
	ctx := context.Background()
	spec, err := json.Marshal(map[string]any{"spec": registry.ServiceSpec{Type: registry.ClusterSetIP,
		Ports: []registry.Port{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}}})
	if err != nil {
		t.Fatal(err)
	}
	loopback := `{"groups":[{"addressType":"IPv4","ports":[{"name":"http","protocol":"TCP","port":8080}],"endpoints":[{"addresses":["127.0.0.1"],"ready":true}]}]}`
	evil, rogue, c3 := clusterPrefix("evil"), clusterPrefix("rogue"), clusterPrefix("c3")
	c3Lease := clientv3.LeaseID(registryRecords(t, "c3")["alive"].Lease)
	grant, err := cli.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	rogueLease := grant.ID
	keepCtx, stopKeeping := context.WithCancel(ctx)
	if _, err := cli.KeepAlive(keepCtx, rogueLease); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stopKeeping()
		_, _ = cli.Revoke(ctx, rogueLease)
		_, _ = cli.Delete(ctx, evil, clientv3.WithPrefix())
		_, _ = cli.Delete(ctx, c3+"exports/"+ns+"/"+name)
		_, _ = cli.Delete(ctx, c3+"endpoints/"+ns+"/"+name)
	})
	if _, err := cli.Txn(ctx).Then(
		clientv3.OpPut(evil+"exports/"+ns+"/"+name, string(spec)),
		clientv3.OpPut(evil+"endpoints/"+ns+"/"+name, loopback),
		clientv3.OpPut(rogue+"alive", `{"cluster":"rogue","ttlSeconds":30}`, clientv3.WithLease(rogueLease)),
		clientv3.OpPut(rogue+"exports/"+ns+"/"+name, string(spec), clientv3.WithLease(rogueLease)),
		clientv3.OpPut(rogue+"endpoints/"+ns+"/"+name, loopback, clientv3.WithLease(rogueLease)),
		clientv3.OpPut(c3+"exports/"+ns+"/"+name, string(spec), clientv3.WithLease(c3Lease)),
		clientv3.OpPut(c3+"endpoints/"+ns+"/"+name, loopback, clientv3.WithLease(c3Lease)),
	).Commit(); err != nil {
		t.Fatal(err)
	}
	written := time.Now()
	poll.Until(t, timeout, "c3's controller to withdraw the records written under c3", func() (bool, string) {
		recs := registryRecords(t, "c3")
		_, export := recs["exports/"+ns+"/"+name]
		_, endpoints := recs["endpoints/"+ns+"/"+name]
		return !export && !endpoints, fmt.Sprint(recs)
	})

	for _, id := range env.ClusterIDs() {
		cl := clientOf(t, id)
		poll.Until(t, timeout, id+": RecordsAccepted=False naming evil and rogue", func() (bool, string) {
			si := fw.GetImport(t, cl, ns, name)
			c := conditionOf(si, conditions.RecordsAccepted)
			if c == nil {
				return false, "no RecordsAccepted condition"
			}
			ok := c.Status == metav1.ConditionFalse && strings.Contains(c.Message, "cluster evil") &&
				strings.Contains(c.Message, "notMember") && strings.Contains(c.Message, "cluster rogue") &&
				strings.Contains(c.Message, "loopback") && !strings.Contains(c.Message, "cluster c3")
			return ok, c.Message
		})
		waitImport(t, id, ns, name, want, timeout)
		poll.Until(t, timeout, id+": a RecordsRejected event on the import", func() (bool, string) {
			var events corev1.EventList
			if err := cl.List(ctx, &events, client.InNamespace(ns)); err != nil {
				return false, err.Error()
			}
			for _, ev := range events.Items {
				if ev.Reason == "RecordsRejected" && ev.InvolvedObject.Name == name && ev.InvolvedObject.Kind == "ServiceImport" {
					return strings.Contains(ev.Message, "cluster evil"), ev.Message
				}
			}
			return false, fmt.Sprintf("%d events, none RecordsRejected", len(events.Items))
		})
	}
	t.Logf("hostile records refused everywhere %s after they were written", time.Since(written).Round(time.Millisecond))
	poll.Until(t, timeout, "mcsd_registry_records_rejected_total of c2 3 more (evil's two records, rogue's endpoints)", func() (bool, string) {
		after := rejectedTotal(t, "c2")
		return after >= before+3, fmt.Sprintf("from %v to %v", before, after)
	})
	// c1's endpoints keep flowing: a new pod reaches every import.
	scaleDeployment(t, "c1", ns, name, 3)
	want["c1"] = waitPods(t, "c1", ns, name, 3)
	waitImportEverywhere(t, ns, name, want)

	// The hostile records go: so does the condition.
	if _, err := cli.Delete(ctx, evil, clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Delete(ctx, rogue, clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	for _, id := range env.ClusterIDs() {
		cl := clientOf(t, id)
		poll.Until(t, timeout, id+": RecordsAccepted gone", func() (bool, string) {
			c := conditionOf(fw.GetImport(t, cl, ns, name), conditions.RecordsAccepted)
			return c == nil, fmt.Sprint(c)
		})
	}
}

// A cluster's own records deleted behind its back (by hand, or by a restore
// of an older backup) are written again by its controller within seconds,
// on its lease; the other clusters' imports come back, and the
// ServiceExport is Ready again.
func TestOwnRecordsRestored(t *testing.T) {
	restoreOnCleanup(t)
	const ns, name, owner = "fault-self-repair", "web", "c1"
	env.EnsureNamespaceEverywhere(t, ns)
	want := map[string][]string{owner: deployAndExport(t, owner, fw.App{Namespace: ns, Name: name, Replicas: 2})}
	waitImportEverywhere(t, ns, name, want)
	lease := registryRecords(t, owner)["alive"].Lease
	cli := etcdClient(t)
	ctx := context.Background()
	prefix := clusterPrefix(owner)
	keys := []string{"exports/" + ns + "/" + name, "endpoints/" + ns + "/" + name}

	restored := func(what string, keys ...string) time.Duration {
		t.Helper()
		return poll.Until(t, 10*time.Second, what, func() (bool, string) {
			recs := registryRecords(t, owner)
			for _, k := range keys {
				if r, ok := recs[k]; !ok || r.Lease != lease {
					return false, fmt.Sprintf("%s: %+v", k, r)
				}
			}
			return true, ""
		})
	}

	// The export's two records deleted by hand.
	if _, err := cli.Txn(ctx).Then(clientv3.OpDelete(prefix+keys[0]), clientv3.OpDelete(prefix+keys[1])).Commit(); err != nil {
		t.Fatal(err)
	}
	took := restored(owner+"'s records of "+name+" written again on its lease", keys...)
	t.Logf("%s's deleted records written again within %s", owner, took.Round(time.Millisecond))
	waitImportEverywhere(t, ns, name, want)

	// The alive record deleted: the backend writes it again.
	if _, err := cli.Delete(ctx, prefix+"alive"); err != nil {
		t.Fatal(err)
	}
	took = restored(owner+"'s alive record written again on its lease", "alive")
	t.Logf("%s's deleted alive record written again within %s", owner, took.Round(time.Millisecond))

	// Everything of the cluster at once, as a restore from an older backup
	// that predates the cluster would leave it.
	if _, err := cli.Delete(ctx, prefix, clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	took = restored(owner+"'s records written again after all were deleted", append(keys, "alive")...)
	t.Logf("%s's records written again within %s after all were deleted", owner, took.Round(time.Millisecond))
	waitImportEverywhere(t, ns, name, want)
	se := &mcsv1beta1.ServiceExport{}
	poll.Until(t, timeout, "ServiceExport Ready=True Exported", func() (bool, string) {
		if err := clientOf(t, owner).Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, se); err != nil {
			return false, err.Error()
		}
		c := fw.Condition(se.Status.Conditions, string(mcsv1beta1.ServiceExportConditionReady))
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == string(mcsv1beta1.ServiceExportReasonExported), fmt.Sprint(c)
	})
}

func scaleDeployment(t *testing.T, id, ns, name string, replicas int32) {
	t.Helper()
	cl := clientOf(t, id)
	d := &appsv1.Deployment{}
	if err := cl.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, d); err != nil {
		t.Fatalf("get deployment: %v", err)
	}
	base := d.DeepCopy()
	d.Spec.Replicas = &replicas
	if err := cl.Patch(context.Background(), d, client.MergeFrom(base)); err != nil {
		t.Fatalf("scale %s/%s: %v", ns, name, err)
	}
}
