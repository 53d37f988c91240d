package core

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fw "github.com/mcsd-io/mcsd/test/framework"
)

// An ExternalName Service cannot be exported: Valid=False InvalidServiceType
// and no import anywhere.
func TestExternalNameNotExported(t *testing.T) {
	ns, c1 := setUpTest(t, "external-name")
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ext"},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "db.example.com"},
	}
	if err := c1.Create(context.Background(), svc); err != nil {
		t.Fatal(err)
	}
	fw.Export(t, c1, ns, "ext")
	waitExportCondition(t, c1, ns, "ext", "Valid", metav1.ConditionFalse, "InvalidServiceType")
	waitExportCondition(t, c1, ns, "ext", "Ready", metav1.ConditionFalse, "Pending")
	if se := getExport(t, c1, ns, "ext"); fw.Condition(se.Status.Conditions, "Conflict") != nil {
		t.Errorf("invalid export has a Conflict condition: %s", fw.CondString(se.Status.Conditions))
	}
	noImportAnywhere(t, ns, "ext", 3*time.Second)

	// Turned into a ClusterIP Service in place, it is exported; turned back
	// into an ExternalName, it is withdrawn.
	updateService(t, c1, ns, "ext", func(svc *corev1.Service) {
		svc.Spec.Type = corev1.ServiceTypeClusterIP
		svc.Spec.ExternalName = ""
		svc.Spec.Ports = []corev1.ServicePort{{Name: "sql", Port: 5432, Protocol: corev1.ProtocolTCP}}
	})
	waitExportCondition(t, c1, ns, "ext", "Valid", metav1.ConditionTrue, "Valid")
	inEveryCluster(t, "import", func(id string, cl client.Client) (bool, string) {
		si := fw.GetImport(t, cl, ns, "ext")
		return si != nil && len(si.Spec.IPs) == 1 && len(si.Spec.Ports) == 1, fmt.Sprintf("import %v", si)
	})
	updateService(t, c1, ns, "ext", func(svc *corev1.Service) {
		svc.Spec = corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "db.example.com"}
	})
	waitExportCondition(t, c1, ns, "ext", "Valid", metav1.ConditionFalse, "InvalidServiceType")
	inEveryCluster(t, "import gone", func(id string, cl client.Client) (bool, string) {
		return importGone(t, cl, ns, "ext")
	})
}

// A ServiceExport without its Service is Valid=False NoService until the
// Service is created; then it is imported everywhere.
func TestExportBeforeService(t *testing.T) {
	ns, c1 := setUpTest(t, "no-service")
	fw.Export(t, c1, ns, "web")
	waitExportCondition(t, c1, ns, "web", "Valid", metav1.ConditionFalse, "NoService")
	noImportAnywhere(t, ns, "web", 2*time.Second)

	fw.Deploy(t, c1, fw.App{Namespace: ns, Name: "web", Replicas: 2})
	want := waitPods(t, c1, ns, "web", 2)
	waitExportCondition(t, c1, ns, "web", "Valid", metav1.ConditionTrue, "Valid")
	waitExportCondition(t, c1, ns, "web", "Ready", metav1.ConditionTrue, "Exported")
	inEveryCluster(t, "import", func(id string, cl client.Client) (bool, string) {
		si := fw.GetImport(t, cl, ns, "web")
		if si == nil || len(si.Spec.IPs) != 1 {
			return false, fmt.Sprintf("import %v", si)
		}
		got := fw.ReadyAddresses(importedSlices(t, cl, ns, "web")["c1"])
		return fmt.Sprint(got) == fmt.Sprint(want), fmt.Sprintf("endpoints from c1 %v, want %v", got, want)
	})
}
