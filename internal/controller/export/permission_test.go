package export

import (
	"fmt"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// TestRegistryPermissionDenied: a registry that refuses this cluster's
// identity shows on Ready with the registry's words.
func TestRegistryPermissionDenied(t *testing.T) {
	e := newEnv(t, newServiceExport(), newService())
	e.reg.setErr(fmt.Errorf("put export shop/web: %w (this cluster's etcd user needs readwrite on /mcsd/set/clusters/c1/)", rpctypes.ErrPermissionDenied))
	if err := e.reconcile(); err == nil {
		t.Fatal("Reconcile succeeded with a registry that refuses the cluster")
	}
	c := assertCondition(t, e.serviceExport(), readyType, metav1.ConditionFalse, string(mcsv1beta1.ServiceExportReasonFailed))
	if !strings.Contains(c.Message, "etcdserver: permission denied") || !strings.Contains(c.Message, "needs readwrite on /mcsd/set/clusters/c1/") {
		t.Errorf("Ready message %q does not say the registry refused the cluster", c.Message)
	}
}
