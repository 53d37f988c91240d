package core

import (
	"context"
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/controller/imports"
	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	"github.com/mcsd-io/mcsd/internal/wellknown"
	fw "github.com/mcsd-io/mcsd/test/framework"
)

const timeout = 30 * time.Second

// importedSlices returns the EndpointSlices mcsd made for an import, by source cluster.
func importedSlices(t *testing.T, cl client.Client, ns, name string) map[string][]discoveryv1.EndpointSlice {
	t.Helper()
	out, err := fw.ImportedSlices(cl, ns, name)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestExportAndUnexport(t *testing.T) {
	ns, c1 := setUpTest(t, "export-basic")
	fw.Deploy(t, c1, fw.App{Namespace: ns, Name: "web", Replicas: 3})
	poll.Until(t, timeout, "pods running in c1", func() (bool, string) {
		ips := fw.PodIPs(t, c1, ns, "web")
		return len(ips) == 3, fmt.Sprintf("%d pods running", len(ips))
	})
	want := fw.PodIPs(t, c1, ns, "web")
	fw.Export(t, c1, ns, "web")

	for _, c := range env.TB.Clusters {
		cl := env.Client(t, c.ID)
		poll.Until(t, timeout, "import in "+c.ID, func() (bool, string) {
			si := fw.GetImport(t, cl, ns, "web")
			if si == nil {
				return false, "no ServiceImport"
			}
			if si.Spec.Type != mcsv1beta1.ClusterSetIP || len(si.Spec.IPs) != 1 || len(si.Spec.Ports) != 1 {
				return false, fmt.Sprintf("spec %+v", si.Spec)
			}
			if len(si.Status.Clusters) != 1 || si.Status.Clusters[0].Cluster != "c1" {
				return false, fmt.Sprintf("status.clusters %+v", si.Status.Clusters)
			}
			got := fw.ReadyAddresses(importedSlices(t, cl, ns, "web")["c1"])
			if !slices.Equal(got, want) {
				return false, fmt.Sprintf("endpoints from c1 %v, want %v", got, want)
			}
			return true, ""
		})
		si := fw.GetImport(t, cl, ns, "web")
		p := si.Spec.Ports[0]
		if p.Name != "http" || p.Port != 80 || p.Protocol != corev1.ProtocolTCP {
			t.Errorf("%s: port %+v", c.ID, p)
		}
		// The IP is the derived Service's cluster IP, from this cluster's range.
		_, cidr, _ := net.ParseCIDR(c.ServiceCIDRs[0])
		if !cidr.Contains(net.ParseIP(si.Spec.IPs[0])) {
			t.Errorf("%s: import IP %s outside the cluster's service range %s", c.ID, si.Spec.IPs[0], c.ServiceCIDRs[0])
		}
		var svc corev1.Service
		if err := cl.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: imports.DerivedServiceName("web")}, &svc); err != nil {
			t.Fatalf("%s: derived service: %v", c.ID, err)
		}
		if svc.Spec.ClusterIP != si.Spec.IPs[0] {
			t.Errorf("%s: derived service IP %s != import IP %s", c.ID, svc.Spec.ClusterIP, si.Spec.IPs[0])
		}
		for _, s := range importedSlices(t, cl, ns, "web")["c1"] {
			if s.Labels[discoveryv1.LabelManagedBy] != wellknown.ManagedBy {
				t.Errorf("%s: slice %s managed-by %q", c.ID, s.Name, s.Labels[discoveryv1.LabelManagedBy])
			}
			if s.Labels[discoveryv1.LabelServiceName] != svc.Name {
				t.Errorf("%s: slice %s service-name %q, want %q", c.ID, s.Name, s.Labels[discoveryv1.LabelServiceName], svc.Name)
			}
			if len(s.Ports) != 1 || s.Ports[0].Name == nil || *s.Ports[0].Name != "http" || *s.Ports[0].Port != 8080 {
				t.Errorf("%s: slice ports %+v", c.ID, s.Ports)
			}
		}
	}

	// The export's conditions say it is valid, exported, without conflict.
	poll.Until(t, timeout, "export conditions", func() (bool, string) {
		se := &mcsv1beta1.ServiceExport{}
		if err := c1.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "web"}, se); err != nil {
			return false, err.Error()
		}
		v := fw.Condition(se.Status.Conditions, "Valid")
		r := fw.Condition(se.Status.Conditions, "Ready")
		c := fw.Condition(se.Status.Conditions, "Conflict")
		ok := v != nil && v.Status == metav1.ConditionTrue && r != nil && r.Status == metav1.ConditionTrue && r.Reason == "Exported" &&
			c != nil && c.Status == metav1.ConditionFalse && c.Reason == "NoConflicts"
		return ok, fw.CondString(se.Status.Conditions)
	})

	fw.Unexport(t, c1, ns, "web")
	for _, c := range env.TB.Clusters {
		cl := env.Client(t, c.ID)
		poll.Until(t, timeout, "import gone from "+c.ID, func() (bool, string) {
			if si := fw.GetImport(t, cl, ns, "web"); si != nil {
				return false, "ServiceImport still there"
			}
			if n := len(importedSlices(t, cl, ns, "web")); n != 0 {
				return false, fmt.Sprintf("%d clusters' slices left", n)
			}
			return true, ""
		})
	}
	// The ServiceExport itself is gone (its finalizer ran).
	poll.Until(t, timeout, "ServiceExport deleted", func() (bool, string) {
		err := c1.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "web"}, &mcsv1beta1.ServiceExport{})
		return client.IgnoreNotFound(err) == nil && err != nil, fmt.Sprint(err)
	})
}
