package faults

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	aboutv1beta1 "github.com/mcsd-io/mcsd/api/about/v1beta1"
	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	fw "github.com/mcsd-io/mcsd/test/framework"
)

// Without its cluster id a controller says what is missing and exports
// nothing; once the ClusterProperty is there again, it is re-read and the
// controller exports and imports as before.
func TestClusterIdentityMissingThenSet(t *testing.T) {
	restoreOnCleanup(t)
	ctx := context.Background()
	const ns = "fault-identity"
	env.EnsureNamespaceEverywhere(t, ns)
	c3 := clientOf(t, "c3")
	idProp := func(value string) *aboutv1beta1.ClusterProperty {
		return &aboutv1beta1.ClusterProperty{ObjectMeta: metav1.ObjectMeta{Name: aboutv1beta1.ClusterIDName},
			Spec: aboutv1beta1.ClusterPropertySpec{Value: value}}
	}
	t.Cleanup(func() {
		if err := c3.Create(context.Background(), idProp("c3")); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Errorf("restore c3's cluster id: %v", err)
		}
	})

	if err := c3.Delete(ctx, idProp("")); err != nil {
		t.Fatal(err)
	}
	ctrl := env.Controller("c3")
	waitNotReadySaying(t, ctrl, "c3's mcsd to say what is missing", "cluster.clusterset.k8s.io")

	// An export made now is not published.
	ips := deployAndExport(t, "c3", fw.App{Namespace: ns, Name: "late", Replicas: 1})
	poll.Throughout(t, 3*time.Second, "nothing exported without a cluster id", func() (bool, string) {
		if si := fw.GetImport(t, clientOf(t, "c1"), ns, "late"); si != nil {
			return false, "c1 imported it"
		}
		se := &mcsv1beta1.ServiceExport{}
		if err := c3.Get(ctx, client.ObjectKey{Namespace: ns, Name: "late"}, se); err != nil {
			return false, err.Error()
		}
		return len(se.Status.Conditions) == 0, "the export got conditions: " + fw.CondString(se.Status.Conditions)
	})

	// The id comes back: the controller reads it and exports.
	if err := c3.Create(ctx, idProp("c3")); err != nil {
		t.Fatal(err)
	}
	if err := ctrl.WaitReady(ctx, readyTimeout); err != nil {
		t.Fatal(err)
	}
	waitImportEverywhere(t, ns, "late", map[string][]string{"c3": ips})
}

// Two clusters given one cluster id: c3, given c1's while c1 runs, takes
// no part (its /readyz says whose the id is) and touches nothing of c1's;
// given its own id back, it is ready again and keeps its imports.
func TestClusterIDInUse(t *testing.T) {
	restoreOnCleanup(t)
	ctx := context.Background()
	const ns = "fault-dupid"
	env.EnsureNamespaceEverywhere(t, ns)
	ips := deployAndExport(t, "c1", fw.App{Namespace: ns, Name: "web", Replicas: 1})
	want := map[string][]string{"c1": ips}
	waitImportEverywhere(t, ns, "web", want)

	c3 := clientOf(t, "c3")
	ctrl := env.Controller("c3")
	// The id cannot be changed in place: the property is made again.
	setID := func(value string) error {
		p := &aboutv1beta1.ClusterProperty{ObjectMeta: metav1.ObjectMeta{Name: aboutv1beta1.ClusterIDName},
			Spec: aboutv1beta1.ClusterPropertySpec{Value: value}}
		if err := c3.Delete(ctx, p); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
			err := c3.Create(ctx, p.DeepCopy())
			return err == nil, client.IgnoreAlreadyExists(err) // still being deleted
		})
	}
	t.Cleanup(func() {
		if err := setID("c3"); err != nil {
			t.Errorf("restore c3's cluster id: %v", err)
		}
	})

	if err := setID("c1"); err != nil {
		t.Fatal(err)
	}
	waitNotReadySaying(t, ctrl, "c3's mcsd to refuse c1's id", "in use by another cluster")
	// c1's export stays whole, in c1 and in every importer.
	poll.Throughout(t, 5*time.Second, "c1's export untouched", func() (bool, string) {
		for _, id := range []string{"c1", "c2", "c3"} {
			if ok, why := importMatches(t, id, ns, "web", want); !ok {
				return false, id + ": " + why
			}
		}
		se := &mcsv1beta1.ServiceExport{}
		if err := clientOf(t, "c1").Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, se); err != nil {
			return false, err.Error()
		}
		r := fw.Condition(se.Status.Conditions, string(mcsv1beta1.ServiceExportConditionReady))
		return r != nil && r.Status == metav1.ConditionTrue, "c1's export: " + fw.CondString(se.Status.Conditions)
	})

	if err := setID("c3"); err != nil {
		t.Fatal(err)
	}
	if err := ctrl.WaitReady(ctx, readyTimeout); err != nil {
		t.Fatal(err)
	}
	waitImportEverywhere(t, ns, "web", want)
}

// waitNotReadySaying waits until ctrl's /readyz fails with a body that
// contains why.
func waitNotReadySaying(t *testing.T, ctrl *fw.Controller, what, why string) {
	t.Helper()
	poll.Until(t, timeout, what, func() (bool, string) {
		code, body, err := ctrl.Readyz(context.Background())
		if err != nil {
			return false, err.Error()
		}
		return code == http.StatusServiceUnavailable && strings.Contains(body, why), fmt.Sprintf("/readyz %d %q", code, body)
	})
}
