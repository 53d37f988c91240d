package registry_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

func ptr[T any](v T) *T { return &v }

func goodExport() registry.Export {
	return registry.Export{
		Cluster: "c1",
		Service: registry.ServiceKey{Namespace: "demo", Name: "web"},
		Spec: registry.ServiceSpec{
			Type:                  registry.ClusterSetIP,
			Ports:                 []registry.Port{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, AppProtocol: ptr("kubernetes.io/h2c")}},
			SessionAffinity:       corev1.ServiceAffinityClientIP,
			SessionAffinityConfig: &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr[int32](600)}},
			IPFamilies:            []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
			InternalTrafficPolicy: ptr(corev1.ServiceInternalTrafficPolicyLocal),
			TrafficDistribution:   ptr("PreferClose"),
			ExportedLabels:        map[string]string{"app.example.com/tier": "front"},
			ExportedAnnotations:   map[string]string{"example.com/note": "any value, even with spaces", "multicluster.mcsd.io/traffic-preference": "PreferSameCluster"},
		},
	}
}

func goodEndpoints() registry.Endpoints {
	return registry.Endpoints{
		Cluster: "c1",
		Service: registry.ServiceKey{Namespace: "demo", Name: "web"},
		Groups: []registry.EndpointGroup{
			{
				AddressType: discoveryv1.AddressTypeIPv4,
				Ports:       []registry.EndpointPort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 8080}},
				Endpoints:   []registry.Endpoint{{Addresses: []string{"10.244.1.5"}, Ready: true, Hostname: "web-0", NodeName: "node-1", Zone: "zone-a"}},
			},
			{
				AddressType: discoveryv1.AddressTypeIPv6,
				Ports:       []registry.EndpointPort{{Protocol: corev1.ProtocolSCTP}},
				Endpoints:   []registry.Endpoint{{Addresses: []string{"fd00:10:244::5"}}},
			},
		},
	}
}

func TestValidateExport(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*registry.Export)
		reason registry.RejectReason // "" for valid
	}{
		{"valid", func(*registry.Export) {}, ""},
		{"headless without ports", func(e *registry.Export) { e.Spec.Type = registry.Headless; e.Spec.Ports = nil }, ""},
		{"cluster id with a subdomain", func(e *registry.Export) { e.Cluster = "east.example" }, ""},
		{"empty cluster id", func(e *registry.Export) { e.Cluster = "" }, registry.RejectInvalid},
		{"cluster id too long for a label value", func(e *registry.Export) { e.Cluster = strings.Repeat("c", 64) }, registry.RejectInvalid},
		{"cluster id with upper case", func(e *registry.Export) { e.Cluster = "Evil" }, registry.RejectInvalid},
		{"namespace not a DNS label", func(e *registry.Export) { e.Service.Namespace = "a.b" }, registry.RejectInvalid},
		{"name not a Service name", func(e *registry.Export) { e.Service.Name = "1web" }, registry.RejectInvalid},
		{"unknown type", func(e *registry.Export) { e.Spec.Type = "ExternalName" }, registry.RejectInvalid},
		{"empty type", func(e *registry.Export) { e.Spec.Type = "" }, registry.RejectInvalid},
		{"port 0", func(e *registry.Export) { e.Spec.Ports[0].Port = 0 }, registry.RejectInvalid},
		{"port above 65535", func(e *registry.Export) { e.Spec.Ports[0].Port = 70000 }, registry.RejectInvalid},
		{"negative port", func(e *registry.Export) { e.Spec.Ports[0].Port = -1 }, registry.RejectInvalid},
		{"unknown protocol", func(e *registry.Export) { e.Spec.Ports[0].Protocol = "ICMP" }, registry.RejectInvalid},
		{"empty protocol", func(e *registry.Export) { e.Spec.Ports[0].Protocol = "" }, registry.RejectInvalid},
		{"invalid port name", func(e *registry.Export) { e.Spec.Ports[0].Name = "HTTP_1" }, registry.RejectInvalid},
		{"port name twice", func(e *registry.Export) { e.Spec.Ports = append(e.Spec.Ports, e.Spec.Ports[0]) }, registry.RejectInvalid},
		{"invalid appProtocol", func(e *registry.Export) { e.Spec.Ports[0].AppProtocol = ptr("a b") }, registry.RejectInvalid},
		{"unknown session affinity", func(e *registry.Export) { e.Spec.SessionAffinity = "Cookie" }, registry.RejectInvalid},
		{"affinity timeout too long", func(e *registry.Export) {
			e.Spec.SessionAffinityConfig.ClientIP.TimeoutSeconds = ptr[int32](86401)
		}, registry.RejectInvalid},
		{"unknown IP family", func(e *registry.Export) { e.Spec.IPFamilies = []corev1.IPFamily{"IPv5"} }, registry.RejectInvalid},
		{"IP family twice", func(e *registry.Export) {
			e.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv4Protocol}
		}, registry.RejectInvalid},
		{"three IP families", func(e *registry.Export) {
			e.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol, corev1.IPv4Protocol}
		}, registry.RejectInvalid},
		{"unknown internal traffic policy", func(e *registry.Export) {
			e.Spec.InternalTrafficPolicy = ptr[corev1.ServiceInternalTrafficPolicy]("Node")
		}, registry.RejectInvalid},
		{"invalid traffic distribution", func(e *registry.Export) { e.Spec.TrafficDistribution = ptr("prefer close!") }, registry.RejectInvalid},
		{"invalid label key", func(e *registry.Export) { e.Spec.ExportedLabels = map[string]string{"bad key": "v"} }, registry.RejectInvalid},
		{"invalid label value", func(e *registry.Export) { e.Spec.ExportedLabels = map[string]string{"k": "has space"} }, registry.RejectInvalid},
		{"invalid annotation key", func(e *registry.Export) { e.Spec.ExportedAnnotations = map[string]string{"/x": "v"} }, registry.RejectInvalid},
		{"annotation naming Services to retire", func(e *registry.Export) {
			e.Spec.ExportedAnnotations = map[string]string{"multicluster.mcsd.io/retiring-services": "payments"}
		}, registry.RejectInvalid},
		{"derived-service annotation", func(e *registry.Export) {
			e.Spec.ExportedAnnotations = map[string]string{"multicluster.kubernetes.io/derived-service": "payments"}
		}, registry.RejectInvalid},
		{"the AWS controller's derived-service annotation", func(e *registry.Export) {
			e.Spec.ExportedAnnotations = map[string]string{"multicluster.k8s.aws/derived-service": "[]"}
		}, registry.RejectInvalid},
		{"annotations too large", func(e *registry.Export) {
			e.Spec.ExportedAnnotations = map[string]string{"big": strings.Repeat("x", 300<<10)}
		}, registry.RejectInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := goodExport()
			tt.mutate(&e)
			checkReason(t, registry.ValidateExport(e), tt.reason)
		})
	}
}

func TestValidateEndpoints(t *testing.T) {
	many := func(n int) []registry.Endpoint {
		out := make([]registry.Endpoint, n)
		for i := range out {
			out[i] = registry.Endpoint{Addresses: []string{fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&127+1)}}
		}
		return out
	}
	addr := func(a string) func(*registry.Endpoints) {
		return func(e *registry.Endpoints) { e.Groups[0].Endpoints[0].Addresses = []string{a} }
	}
	addr6 := func(a string) func(*registry.Endpoints) {
		return func(e *registry.Endpoints) { e.Groups[1].Endpoints[0].Addresses = []string{a} }
	}
	tests := []struct {
		name   string
		mutate func(*registry.Endpoints)
		reason registry.RejectReason
	}{
		{"valid", func(*registry.Endpoints) {}, ""},
		{"no groups", func(e *registry.Endpoints) { e.Groups = nil }, ""},
		{"FQDN", func(e *registry.Endpoints) {
			e.Groups[0].AddressType = discoveryv1.AddressTypeFQDN
			e.Groups[0].Endpoints[0].Addresses = []string{"db.example.com"}
		}, ""},
		{"exactly the limit across groups", func(e *registry.Endpoints) { e.Groups[0].Endpoints = many(registry.MaxEndpoints - 1) }, ""},
		{"tens of thousands of endpoints", func(e *registry.Endpoints) { e.Groups[0].Endpoints = many(30000) }, registry.RejectTooManyEndpoints},
		{"one over the limit across groups", func(e *registry.Endpoints) {
			e.Groups[0].Endpoints = many(registry.MaxEndpoints)
		}, registry.RejectTooManyEndpoints},
		{"unknown address type", func(e *registry.Endpoints) { e.Groups[0].AddressType = "IPv5" }, registry.RejectInvalid},
		{"endpoint port out of range", func(e *registry.Endpoints) { e.Groups[0].Ports[0].Port = 65536 }, registry.RejectInvalid},
		{"endpoint port unknown protocol", func(e *registry.Endpoints) { e.Groups[0].Ports[0].Protocol = "QUIC" }, registry.RejectInvalid},
		{"endpoint port invalid name", func(e *registry.Endpoints) { e.Groups[0].Ports[0].Name = "-x" }, registry.RejectInvalid},
		{"loopback", addr("127.0.0.1"), registry.RejectInvalidAddress},
		{"IPv6 loopback", addr6("::1"), registry.RejectInvalidAddress},
		{"link-local", addr("169.254.169.254"), registry.RejectInvalidAddress},
		{"IPv6 link-local", addr6("fe80::1"), registry.RejectInvalidAddress},
		{"unspecified", addr("0.0.0.0"), registry.RejectInvalidAddress},
		{"IPv6 unspecified", addr6("::"), registry.RejectInvalidAddress},
		{"multicast", addr("224.0.0.1"), registry.RejectInvalidAddress},
		{"not an address", addr("web.example.com"), registry.RejectInvalidAddress},
		{"not canonical", addr("010.0.0.1"), registry.RejectInvalidAddress},
		{"IPv6 in an IPv4 group", addr("fd00::1"), registry.RejectInvalidAddress},
		{"IPv4 in an IPv6 group", addr6("10.0.0.1"), registry.RejectInvalidAddress},
		{"zone in an address", addr6("fd00::1%eth0"), registry.RejectInvalidAddress},
		{"no address", func(e *registry.Endpoints) { e.Groups[0].Endpoints[0].Addresses = nil }, registry.RejectInvalidAddress},
		{"invalid hostname", func(e *registry.Endpoints) { e.Groups[0].Endpoints[0].Hostname = "web_0" }, registry.RejectInvalidAddress},
		{"invalid node name", func(e *registry.Endpoints) { e.Groups[0].Endpoints[0].NodeName = "Node 1" }, registry.RejectInvalidAddress},
		{"invalid FQDN", func(e *registry.Endpoints) {
			e.Groups[0].AddressType = discoveryv1.AddressTypeFQDN
			e.Groups[0].Endpoints[0].Addresses = []string{"-.example"}
		}, registry.RejectInvalidAddress},
		{"invalid cluster id", func(e *registry.Endpoints) { e.Cluster = "no/slash" }, registry.RejectInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := goodEndpoints()
			tt.mutate(&e)
			checkReason(t, registry.ValidateEndpoints(e), tt.reason)
		})
	}
}

func checkReason(t *testing.T, err error, want registry.RejectReason) {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Fatalf("valid record refused: %v", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("record accepted, want reason %s", want)
	}
	if !errors.Is(err, registry.ErrInvalid) {
		t.Errorf("error %v does not match ErrInvalid", err)
	}
	if got := registry.Reject(registry.KindExport, registry.RecordID{}, err).Reason; got != want {
		t.Errorf("reason %s (%v), want %s", got, err, want)
	}
}
