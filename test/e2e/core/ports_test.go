package core

import (
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fw "github.com/mcsd-io/mcsd/test/framework"
)

// An exported Service gains a port and changes another: every cluster's
// ServiceImport, derived Service and EndpointSlices follow, and the import
// keeps its IP.
func TestPortChanges(t *testing.T) {
	ns, c1 := setUpTest(t, "port-changes")
	// One unnamed port: adding a second one means naming both.
	fw.Deploy(t, c1, fw.App{Namespace: ns, Name: "web", Replicas: 2, Ports: []corev1.ServicePort{
		{Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP},
	}})
	want := waitPods(t, c1, ns, "web", 2)
	fw.Export(t, c1, ns, "web")

	ips := map[string]string{}
	inEveryCluster(t, "import with one unnamed port", func(id string, cl client.Client) (bool, string) {
		si := fw.GetImport(t, cl, ns, "web")
		if si == nil {
			return false, "no ServiceImport"
		}
		if got := importPorts(si); !slices.Equal(got, []string{"/TCP/80"}) || len(si.Spec.IPs) != 1 {
			return false, fmt.Sprintf("ports %v, IPs %v", got, si.Spec.IPs)
		}
		ss := importedSlices(t, cl, ns, "web")["c1"]
		ports, err := portsOf(ss)
		if err != nil || !slices.Equal(ports, []string{"/TCP/8080"}) {
			return false, fmt.Sprintf("slice ports %v %v", ports, err)
		}
		if got := fw.ReadyAddresses(ss); !slices.Equal(got, want) {
			return false, fmt.Sprintf("endpoints %v, want %v", got, want)
		}
		ips[id] = si.Spec.IPs[0]
		return true, ""
	})

	// The port is named http and moves from 80 to 81 (and its pods' port
	// from 8080 to 8081); metrics 9090 is added.
	updateService(t, c1, ns, "web", func(svc *corev1.Service) {
		svc.Spec.Ports = []corev1.ServicePort{
			{Name: "http", Port: 81, TargetPort: intstr.FromInt32(8081), Protocol: corev1.ProtocolTCP},
			{Name: "metrics", Port: 9090, TargetPort: intstr.FromInt32(9090), Protocol: corev1.ProtocolTCP},
		}
	})
	wantImport := []string{"http/TCP/81", "metrics/TCP/9090"}
	wantSlice := []string{"http/TCP/8081", "metrics/TCP/9090"}
	inEveryCluster(t, "import with the new ports", func(id string, cl client.Client) (bool, string) {
		si := fw.GetImport(t, cl, ns, "web")
		if si == nil {
			return false, "no ServiceImport"
		}
		if got := importPorts(si); !slices.Equal(got, wantImport) {
			return false, fmt.Sprintf("import ports %v, want %v", got, wantImport)
		}
		if !slices.Equal(si.Spec.IPs, []string{ips[id]}) {
			return false, fmt.Sprintf("import IPs changed from %s to %v", ips[id], si.Spec.IPs)
		}
		svc := derivedService(t, cl, ns, "web")
		if svc == nil {
			return false, "no derived Service"
		}
		var svcPorts []string
		for _, p := range svc.Spec.Ports {
			svcPorts = append(svcPorts, fmt.Sprintf("%s/%s/%d", p.Name, p.Protocol, p.Port))
		}
		slices.Sort(svcPorts)
		if !slices.Equal(svcPorts, wantImport) {
			return false, fmt.Sprintf("derived Service ports %v, want %v", svcPorts, wantImport)
		}
		ss := importedSlices(t, cl, ns, "web")["c1"]
		ports, err := portsOf(ss)
		if err != nil || !slices.Equal(ports, wantSlice) {
			return false, fmt.Sprintf("slice ports %v %v, want %v", ports, err, wantSlice)
		}
		if got := fw.ReadyAddresses(ss); !slices.Equal(got, want) {
			return false, fmt.Sprintf("endpoints %v, want %v", got, want)
		}
		return true, ""
	})
}
