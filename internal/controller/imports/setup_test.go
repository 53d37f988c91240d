package imports

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/clusterset"
	"github.com/mcsd-io/mcsd/internal/conditions"
	"github.com/mcsd-io/mcsd/internal/testutil/ctrltest"
	"github.com/mcsd-io/mcsd/internal/testutil/poll"
)

// TestSetupWithManager checks the wiring: the controller builds with its
// watches and registry source (nothing is started).
func TestSetupWithManager(t *testing.T) {
	mgr := ctrltest.UnstartedManager(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := &Reconciler{Client: mgr.GetClient(), View: clusterset.NewView(), ClusterID: "east"}
	if err := r.SetupWithManager(ctx, mgr); err != nil {
		t.Fatal(err)
	}
	if err := (&Reconciler{}).SetupWithManager(ctx, mgr); err == nil {
		t.Error("SetupWithManager without a client and view succeeded")
	}
}

// TestRegistryChangesReachTheImports runs the reconciler in a controller
// whose only source is the View's (the cache's watches need an API server):
// the registry's changes and its reachability reach the imports through the
// workqueue alone.
func TestRegistryChangesReachTheImports(t *testing.T) {
	e := newEnv(t, namespace(testNS))
	c, err := controller.NewUnmanaged(ControllerName, controller.Options{
		Reconciler: e.r, Logger: ctrl.Log, SkipNameValidation: ptr.To(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Watch(e.view.Source(e.r.changeToImports)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- c.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("controller: %v", err)
		}
	}()
	// importState reports the ServiceImport's source clusters and whether it
	// says the registry is unreachable; "" when there is none.
	importState := func() string {
		si := &mcsv1beta1.ServiceImport{}
		if err := e.api.Get(e.ctx, client.ObjectKey{Namespace: testNS, Name: "web"}, si); err != nil {
			return err.Error()
		}
		out := fmt.Sprint(si.Status.Clusters)
		if c := condition(si, conditions.RegistryReachable); c != nil {
			out += " " + c.Reason
		}
		return out
	}
	wait := func(what, want string) {
		t.Helper()
		poll.Until(t, settleTimeout, what, func() (bool, string) {
			got := importState()
			return got == want, got
		})
	}

	twoClusters(e)
	wait("the import of both clusters", "[{east} {west}]")
	e.disconnect(errors.New("cut"))
	wait("the import to say the registry is unreachable", "[{east} {west}] "+conditions.ReasonRegistryUnreachable)
	e.unexport("east")
	e.reconnect()
	wait("the import of west alone", "[{west}]")
}
