package core

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	fw "github.com/mcsd-io/mcsd/test/framework"
)

// Two clusters export one name with conflicting ports, type and session
// affinity. The oldest export (c1) wins, every export reports the conflict,
// the import carries the union of the ports, and each cluster's slices carry
// only the ports it defines as the import does. Port sets that differ are a conflict too (PortConflict
// naming which cluster lacks or adds which port, an SCTP one included); when
// c2 fixes its Service and both clusters expose the same ports, the conflict
// clears.
func TestConflictingExports(t *testing.T) {
	ns, c1 := setUpTest(t, "conflict")
	c2 := env.Client(t, "c2")

	ips1 := exportFirst(t, c1, fw.App{Namespace: ns, Name: "web", Replicas: 2, Ports: []corev1.ServicePort{
		{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP},
		{Name: "grpc", Port: 9000, TargetPort: intstr.FromInt32(9000), Protocol: corev1.ProtocolTCP},
	}})

	// c2: headless, ClientIP affinity, http on another port, and an admin
	// port c1 does not have.
	ips2 := deployExported(t, c2, fw.App{Namespace: ns, Name: "web", Replicas: 2, Headless: true,
		SessionAffinity: corev1.ServiceAffinityClientIP, Ports: []corev1.ServicePort{
			{Name: "http", Port: 81, TargetPort: intstr.FromInt32(8081), Protocol: corev1.ProtocolTCP},
			{Name: "admin", Port: 9090, TargetPort: intstr.FromInt32(9090), Protocol: corev1.ProtocolTCP},
		}})

	for _, id := range []string{"c1", "c2"} {
		c := waitExportCondition(t, env.Client(t, id), ns, "web", "Conflict", metav1.ConditionTrue,
			"PortConflict,TypeConflict,SessionAffinityConflict")
		wantMessage(t, id, c.Message, []string{`ports: using "http" TCP/80 from cluster "c1"`, `cluster "c2" has "http" TCP/81`,
			`type: using "ClusterSetIP" from cluster "c1"`, `cluster "c2" has "Headless"`,
			`sessionAffinity: using "None" from cluster "c1"`, `cluster "c2" has "ClientIP"`}, nil)
	}

	wantPorts := []string{"admin/TCP/9090", "grpc/TCP/9000", "http/TCP/80"}
	inEveryCluster(t, "merged import", func(id string, cl client.Client) (bool, string) {
		si := fw.GetImport(t, cl, ns, "web")
		if si == nil {
			return false, "no ServiceImport"
		}
		if si.Spec.Type != mcsv1beta1.ClusterSetIP || si.Spec.SessionAffinity != corev1.ServiceAffinityNone || len(si.Spec.IPs) != 1 {
			return false, fmt.Sprintf("type %s, affinity %s, IPs %v", si.Spec.Type, si.Spec.SessionAffinity, si.Spec.IPs)
		}
		if got := importPorts(si); !slices.Equal(got, wantPorts) {
			return false, fmt.Sprintf("ports %v, want %v", got, wantPorts)
		}
		if got := importClusters(si); !slices.Equal(got, []string{"c1", "c2"}) {
			return false, fmt.Sprintf("status.clusters %v", got)
		}
		if ok, msg := importReady(si); !ok {
			return false, msg
		}
		// kube-proxy routes every port of the union.
		svc := derivedService(t, cl, ns, "web")
		if svc == nil || svc.Spec.ClusterIP != si.Spec.IPs[0] || svc.Spec.SessionAffinity != corev1.ServiceAffinityNone {
			return false, fmt.Sprintf("derived Service %v", svc)
		}
		var svcPorts []string
		for _, p := range svc.Spec.Ports {
			svcPorts = append(svcPorts, fmt.Sprintf("%s/%s/%d", p.Name, p.Protocol, p.Port))
		}
		if slices.Sort(svcPorts); !slices.Equal(svcPorts, wantPorts) {
			return false, fmt.Sprintf("derived Service ports %v, want %v", svcPorts, wantPorts)
		}
		bySource := importedSlices(t, cl, ns, "web")
		for src, want := range map[string]struct {
			ports []string
			ips   []string
		}{
			"c1": {[]string{"grpc/TCP/9000", "http/TCP/8080"}, ips1},
			// c2's http is 81, not the import's 80: it does not serve it.
			"c2": {[]string{"admin/TCP/9090"}, ips2},
		} {
			ports, err := portsOf(bySource[src])
			if err != nil || !slices.Equal(ports, want.ports) {
				return false, fmt.Sprintf("slices from %s: ports %v %v, want %v", src, ports, err, want.ports)
			}
			if got := fw.ReadyAddresses(bySource[src]); !slices.Equal(got, want.ips) {
				return false, fmt.Sprintf("slices from %s: endpoints %v, want %v", src, got, want.ips)
			}
		}
		return true, ""
	})

	// c2 fixes its http port and session affinity in place: the type
	// conflict is left, and the port sets still differ (grpc only in c1,
	// admin only in c2), on both exports.
	updateService(t, c2, ns, "web", func(svc *corev1.Service) {
		svc.Spec.SessionAffinity = corev1.ServiceAffinityNone
		svc.Spec.SessionAffinityConfig = nil
		svc.Spec.Ports[0].Port, svc.Spec.Ports[0].TargetPort = 80, intstr.FromInt32(8080)
	})
	portSets := []string{`ports: cluster "c2" lacks "grpc" TCP/9000 of cluster "c1"`,
		`ports: cluster "c2" adds "admin" TCP/9090, which cluster "c1" lacks`}
	for _, id := range []string{"c1", "c2"} {
		c := waitExportCondition(t, env.Client(t, id), ns, "web", "Conflict", metav1.ConditionTrue, "PortConflict,TypeConflict")
		wantMessage(t, id, c.Message, append([]string{`type: using "ClusterSetIP" from cluster "c1"`}, portSets...),
			[]string{`using "http"`, "sessionAffinity"})
	}

	// A Service cannot stop being headless in place, so c2 creates it again,
	// like c1's but keeping its admin port.
	deleteService(t, c2, ns, "web")
	inEveryCluster(t, "import of c1 only", func(id string, cl client.Client) (bool, string) {
		si := fw.GetImport(t, cl, ns, "web")
		if si == nil {
			return false, "no ServiceImport"
		}
		if got := importClusters(si); !slices.Equal(got, []string{"c1"}) {
			return false, fmt.Sprintf("status.clusters %v", got)
		}
		if n := len(importedSlices(t, cl, ns, "web")["c2"]); n > 0 {
			return false, fmt.Sprintf("%d slices from c2 left", n)
		}
		return true, ""
	})
	fixed := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{
			{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP},
			{Name: "admin", Port: 9090, TargetPort: intstr.FromInt32(9090), Protocol: corev1.ProtocolTCP},
		}},
	}
	if err := c2.Create(context.Background(), fixed); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	inEveryCluster(t, "import after the fix", func(id string, cl client.Client) (bool, string) {
		si := fw.GetImport(t, cl, ns, "web")
		if si == nil {
			return false, "no ServiceImport"
		}
		if got := importPorts(si); !slices.Equal(got, wantPorts) || si.Spec.Type != mcsv1beta1.ClusterSetIP {
			return false, fmt.Sprintf("type %s, ports %v, want %v", si.Spec.Type, got, wantPorts)
		}
		if got := importClusters(si); !slices.Equal(got, []string{"c1", "c2"}) {
			return false, fmt.Sprintf("status.clusters %v", got)
		}
		ports, err := portsOf(importedSlices(t, cl, ns, "web")["c2"])
		if want := []string{"admin/TCP/9090", "http/TCP/8080"}; err != nil || !slices.Equal(ports, want) {
			return false, fmt.Sprintf("slices from c2: ports %v %v, want %v", ports, err, want)
		}
		return true, ""
	})
	// Checked once every cluster imports c2's new export, so that c1's
	// condition is not the one it had while c2 had withdrawn: the port sets
	// still differ, the import carries their union and traffic rules stay
	// per port (above).
	for _, id := range []string{"c1", "c2"} {
		c := waitExportCondition(t, env.Client(t, id), ns, "web", "Conflict", metav1.ConditionTrue, "PortConflict")
		wantMessage(t, id, c.Message, portSets, []string{"type:"})
	}

	// c1 gains admin, c2 gains grpc and an SCTP port: only the SCTP port
	// differs now.
	sig := corev1.ServicePort{Name: "sig", Port: 3868, TargetPort: intstr.FromInt32(3868), Protocol: corev1.ProtocolSCTP}
	updateService(t, c1, ns, "web", func(svc *corev1.Service) {
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: "admin", Port: 9090, TargetPort: intstr.FromInt32(9090), Protocol: corev1.ProtocolTCP})
	})
	updateService(t, c2, ns, "web", func(svc *corev1.Service) {
		svc.Spec.Ports = append(svc.Spec.Ports,
			corev1.ServicePort{Name: "grpc", Port: 9000, TargetPort: intstr.FromInt32(9000), Protocol: corev1.ProtocolTCP}, sig)
	})
	for _, id := range []string{"c1", "c2"} {
		// Until c1's own new export has come back through the registry,
		// the message may still say that c1 lacks admin: it settles.
		waitMessage(t, env.Client(t, id), ns, "web", "PortConflict", `ports: cluster "c2" adds "sig" SCTP/3868, which cluster "c1" lacks`, "grpc", "admin")
	}

	// The port sets agree: the conflict clears.
	updateService(t, c1, ns, "web", func(svc *corev1.Service) { svc.Spec.Ports = append(svc.Spec.Ports, sig) })
	for _, id := range []string{"c1", "c2"} {
		waitExportCondition(t, env.Client(t, id), ns, "web", "Conflict", metav1.ConditionFalse, "NoConflicts")
	}
}

// wantMessage checks that a Conflict message holds every string of want and
// none of unwanted.
func wantMessage(t *testing.T, id, msg string, want, unwanted []string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("%s: Conflict message %q does not contain %q", id, msg, w)
		}
	}
	for _, u := range unwanted {
		if strings.Contains(msg, u) {
			t.Errorf("%s: Conflict message %q contains %q", id, msg, u)
		}
	}
}

// waitMessage waits for a Conflict condition of reason whose message
// contains want and none of unwanted, and returns it.
func waitMessage(t *testing.T, cl client.Client, ns, name, reason, want string, unwanted ...string) metav1.Condition {
	t.Helper()
	var c metav1.Condition
	poll.Until(t, timeout, "Conflict "+reason+" saying "+want, func() (bool, string) {
		se := getExport(t, cl, ns, name)
		if se == nil {
			return false, "no ServiceExport"
		}
		got := fw.Condition(se.Status.Conditions, "Conflict")
		if got == nil || got.Status != metav1.ConditionTrue || got.Reason != reason || !strings.Contains(got.Message, want) ||
			slices.ContainsFunc(unwanted, func(u string) bool { return strings.Contains(got.Message, u) }) {
			return false, fw.CondString(se.Status.Conditions)
		}
		c = *got
		return true, ""
	})
	return c
}
