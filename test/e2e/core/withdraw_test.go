package core

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fw "github.com/mcsd-io/mcsd/test/framework"
)

// Deleting an exported Service, keeping its ServiceExport, withdraws the
// cluster's records: the only exporter gone, the import disappears.
func TestServiceDeletedWithdrawsExport(t *testing.T) {
	ns, c1 := setUpTest(t, "service-deleted")
	deployExported(t, c1, fw.App{Namespace: ns, Name: "web", Replicas: 2})
	inEveryCluster(t, "import", func(id string, cl client.Client) (bool, string) {
		si := fw.GetImport(t, cl, ns, "web")
		return si != nil && len(si.Spec.IPs) == 1 && len(importedSlices(t, cl, ns, "web")["c1"]) > 0, "no import with IP and slices yet"
	})

	deleteService(t, c1, ns, "web")
	inEveryCluster(t, "import gone", func(id string, cl client.Client) (bool, string) {
		return importGone(t, cl, ns, "web")
	})
	waitExportCondition(t, c1, ns, "web", "Valid", metav1.ConditionFalse, "NoService")
	if se := getExport(t, c1, ns, "web"); se == nil || se.DeletionTimestamp != nil {
		t.Fatalf("ServiceExport deleted with its Service: %+v", se)
	} else if fw.Condition(se.Status.Conditions, "Conflict") != nil {
		t.Errorf("withdrawn export keeps a Conflict condition: %s", fw.CondString(se.Status.Conditions))
	}
}
