package cloudmap

import (
	"errors"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/cloudmap/mototest"
)

var (
	testID  = registry.Identity{ClusterSet: "set-1", Cluster: "east"}
	testKey = registry.ServiceKey{Namespace: "shop", Name: "web"}
)

func testSpec() registry.ServiceSpec {
	timeout := int32(300)
	local := corev1.ServiceInternalTrafficPolicyLocal
	dist := "PreferClose"
	h2 := "kubernetes.io/h2c"
	return registry.ServiceSpec{
		Type: registry.ClusterSetIP,
		Ports: []registry.Port{
			{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, AppProtocol: &h2},
			{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53},
		},
		SessionAffinity:       corev1.ServiceAffinityClientIP,
		SessionAffinityConfig: &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: &timeout}},
		IPFamilies:            []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
		InternalTrafficPolicy: &local,
		TrafficDistribution:   &dist,
		ExportedLabels:        map[string]string{"app": "web", "team": "ünïcode ☃ 🚀"},
		ExportedAnnotations:   map[string]string{"note": " leading space and \"quotes\""},
	}
}

func testGroups() []registry.EndpointGroup {
	h2 := "kubernetes.io/h2c"
	return []registry.EndpointGroup{
		{
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports: []registry.EndpointPort{
				{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 5353},
				{Name: "http", Protocol: corev1.ProtocolTCP, Port: 8080, AppProtocol: &h2},
			},
			Endpoints: []registry.Endpoint{
				{Addresses: []string{"10.0.0.1"}, Ready: true, Serving: true, Hostname: "web-0", NodeName: "node-1", Zone: "zone-a"},
				{Addresses: []string{"10.0.0.2"}, Ready: false, Serving: true, Terminating: true, NodeName: "node-2"},
			},
		},
		{
			AddressType: discoveryv1.AddressTypeIPv6,
			Ports:       []registry.EndpointPort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 8080}},
			Endpoints: []registry.Endpoint{
				{Addresses: []string{"fd00::1"}, Ready: true, Serving: true},
			},
		},
		{
			// A headless Service without ports.
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []registry.Endpoint{{Addresses: []string{"10.0.1.1"}, Ready: true, Serving: true, Hostname: "db-0"}},
		},
	}
}

func toList(m map[string]instance) []instance {
	return slices.Collect(maps.Values(m))
}

func TestRoundTrip(t *testing.T) {
	enc := newEncoder(testID)
	spec := testSpec()
	st := state{Created: 1700000000123, Spec: &spec, HasEndpoints: true, Groups: testGroups()}
	insts, err := enc.instances(st)
	if err != nil {
		t.Fatal(err)
	}
	// 1 service record + 2 addresses × 2 ports + 1 IPv6 × 1 port + 1 port-less.
	if len(insts) != 7 {
		t.Errorf("got %d instances, want 7: %v", len(insts), slices.Sorted(maps.Keys(insts)))
	}
	idRE := regexp.MustCompile(`^[0-9a-zA-Z_/:.@-]+$`)
	for id, in := range insts {
		if len(id) > maxInstanceID || !idRE.MatchString(id) {
			t.Errorf("instance id %q is not a valid Cloud Map id", id)
		}
		if err := checkLimits(in.Attrs); err != nil {
			t.Errorf("instance %s: %v", id, err)
		}
	}

	recs := decodeService(testID.ClusterSet, testKey, toList(insts))
	r := recs[testID.Cluster]
	if r == nil || len(recs) != 1 {
		t.Fatalf("decoded %v, want one cluster's records", recs)
	}
	if !r.MCSD {
		t.Errorf("mcsd records not marked MCSD")
	}
	wantExport := registry.Export{Cluster: "east", Service: testKey, Spec: spec, Order: 1700000000123}
	if diff := cmp.Diff(wantExport, *r.Export); diff != "" {
		t.Errorf("export (-want +got):\n%s", diff)
	}
	// Canonical groups: by address type and port list, sorted.
	wantGroups := []registry.EndpointGroup{testGroups()[0], testGroups()[2], testGroups()[1]}
	if diff := cmp.Diff(wantGroups, r.Endpoints.Groups, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("endpoints (-want +got):\n%s", diff)
	}

	own, ok := decodeOwn(testID, testKey, toList(insts))
	if !ok {
		t.Fatal("decodeOwn found no service record")
	}
	again, err := enc.instances(own)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(insts, again); diff != "" {
		t.Errorf("instances rebuilt from what was read differ (-first +again):\n%s", diff)
	}
}

// TestPortsSharingANumber: two Service ports with one target port give
// EndpointSlice ports of one number and two names; each is its own
// instance, and both are read back.
func TestPortsSharingANumber(t *testing.T) {
	enc := newEncoder(testID)
	spec := testSpec()
	groups := []registry.EndpointGroup{{
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []registry.EndpointPort{
			{Name: "http", Protocol: corev1.ProtocolTCP, Port: 8080},
			{Name: "http-alt", Protocol: corev1.ProtocolTCP, Port: 8080},
			{Name: "metrics", Protocol: corev1.ProtocolTCP, Port: 9090},
		},
		Endpoints: []registry.Endpoint{
			{Addresses: []string{"10.0.0.1"}, Ready: true, Serving: true},
			{Addresses: []string{"10.0.0.2"}, Ready: true, Serving: true},
		},
	}}
	insts, err := enc.instances(state{Created: 1700000000123, Spec: &spec, HasEndpoints: true, Groups: groups})
	if err != nil {
		t.Fatal(err)
	}
	// 1 service record + 2 addresses × 3 ports.
	if len(insts) != 7 {
		t.Errorf("got %d instances, want 7: %v", len(insts), slices.Sorted(maps.Keys(insts)))
	}
	// A port whose number no other port has keeps the id the AWS
	// controller's scheme gives it.
	if _, ok := insts[enc.prefix+".tcp-10_0_0_1-9090"]; !ok {
		t.Errorf("no instance %s.tcp-10_0_0_1-9090: %v", enc.prefix, slices.Sorted(maps.Keys(insts)))
	}
	r := decodeService(testID.ClusterSet, testKey, toList(insts))[testID.Cluster]
	if r == nil || r.Endpoints == nil {
		t.Fatalf("decoded no endpoints: %v", r)
	}
	if diff := cmp.Diff(groups, r.Endpoints.Groups, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("endpoints (-want +got):\n%s", diff)
	}
}

func TestServiceRecordWithoutEndpoints(t *testing.T) {
	enc := newEncoder(testID)
	spec := registry.ServiceSpec{Type: registry.Headless}
	insts, err := enc.instances(state{Created: 5, Spec: &spec})
	if err != nil {
		t.Fatal(err)
	}
	if len(insts) != 1 {
		t.Fatalf("got %d instances, want the service record only", len(insts))
	}
	rec := insts[serviceRecordID(enc.prefix)]
	for _, k := range []string{attrIPv4, attrIPv6, attrPort} {
		if _, ok := rec.Attrs[k]; ok {
			t.Errorf("service record has %s: the AWS controller would read it as an endpoint", k)
		}
	}
	r := decodeService(testID.ClusterSet, testKey, toList(insts))[testID.Cluster]
	if r == nil || r.Export == nil || r.Endpoints != nil {
		t.Fatalf("decoded %+v, want an export without endpoints", r)
	}

	// Endpoints put, but none: an Endpoints record without groups.
	insts, err = enc.instances(state{Created: 5, Spec: &spec, HasEndpoints: true})
	if err != nil {
		t.Fatal(err)
	}
	r = decodeService(testID.ClusterSet, testKey, toList(insts))[testID.Cluster]
	if r == nil || r.Endpoints == nil || len(r.Endpoints.Groups) != 0 {
		t.Fatalf("decoded %+v, want empty endpoints", r)
	}
}

// TestUnreadableCreationRanksLast: the creation time of an mcsd service
// record is its export's Order, the oldest winning conflicts; one that
// cannot be read ranks after every other instead of first, and the
// cluster itself does not take it for its own export's age.
func TestUnreadableCreationRanksLast(t *testing.T) {
	enc := newEncoder(testID)
	spec := testSpec()
	for _, bad := range []string{"", "soon", "0", "-5"} {
		insts, err := enc.instances(state{Created: 5, Spec: &spec})
		if err != nil {
			t.Fatal(err)
		}
		rec := insts[serviceRecordID(enc.prefix)]
		if bad == "" {
			delete(rec.Attrs, attrCreation)
		} else {
			rec.Attrs[attrCreation] = bad
		}
		r := decodeService(testID.ClusterSet, testKey, toList(insts))[testID.Cluster]
		if r == nil || r.Export == nil {
			t.Fatalf("creation %q: no export decoded", bad)
		}
		if r.Export.Order != orderUnknown {
			t.Errorf("creation %q: order %d, want the last (%d)", bad, r.Export.Order, int64(orderUnknown))
		}
		if own, ok := decodeOwn(testID, testKey, toList(insts)); !ok || own.Created != 0 {
			t.Errorf("creation %q: own state created %d (found %v), want 0 (unknown)", bad, own.Created, ok)
		}
	}
}

func TestLargeAndInvalidRecords(t *testing.T) {
	enc := newEncoder(testID)
	spec := testSpec()
	spec.ExportedAnnotations = map[string]string{"big": strings.Repeat("x ", 1500)}
	insts, err := enc.instances(state{Created: 1, Spec: &spec})
	if err != nil {
		t.Fatalf("3 kB export: %v", err)
	}
	rec := insts[serviceRecordID(enc.prefix)].Attrs
	if _, ok := rec[attrSpec+"2"]; !ok {
		t.Errorf("3 kB export not split into chunks: %v", slices.Sorted(maps.Keys(rec)))
	}
	for k, v := range rec {
		if !validAttrValue(v) {
			t.Errorf("attribute %s is not a valid value: %q", k, v)
		}
	}
	got := decodeService(testID.ClusterSet, testKey, toList(insts))[testID.Cluster].Export.Spec
	if diff := cmp.Diff(spec, got); diff != "" {
		t.Errorf("chunked export (-want +got):\n%s", diff)
	}

	spec.ExportedAnnotations = map[string]string{"huge": strings.Repeat("x", 6000)}
	if _, err := enc.instances(state{Created: 1, Spec: &spec}); !errors.Is(err, registry.ErrInvalid) {
		t.Errorf("6 kB export: err %v, want ErrInvalid", err)
	}
	for _, g := range []registry.EndpointGroup{
		{AddressType: discoveryv1.AddressTypeFQDN, Endpoints: []registry.Endpoint{{Addresses: []string{"a.example"}}}},
		{AddressType: discoveryv1.AddressTypeIPv4, Endpoints: []registry.Endpoint{{Addresses: []string{"fd00::1"}}}},
		{AddressType: discoveryv1.AddressTypeIPv6, Endpoints: []registry.Endpoint{{Addresses: []string{"nonsense"}}}},
	} {
		if _, err := enc.instances(state{HasEndpoints: true, Groups: []registry.EndpointGroup{g}}); !errors.Is(err, registry.ErrInvalid) {
			t.Errorf("group %+v: err %v, want ErrInvalid", g, err)
		}
	}
}

func TestInstanceIDs(t *testing.T) {
	long := registry.Identity{ClusterSet: "set", Cluster: strings.Repeat("c", 128)}
	p1 := ownerPrefix(long)
	p2 := ownerPrefix(registry.Identity{ClusterSet: "set", Cluster: strings.Repeat("c", 127) + "d"})
	p3 := ownerPrefix(registry.Identity{ClusterSet: "other", Cluster: long.Cluster})
	if p1 == p2 || p1 == p3 {
		t.Errorf("prefixes collide: %s %s %s", p1, p2, p3)
	}
	port := registry.EndpointPort{Protocol: corev1.ProtocolSCTP, Port: 65535}
	id := endpointInstanceID(p1, "fd00:1111:2222:3333:4444:5555:6666:7777", &port, false)
	if len(id) > maxInstanceID || !strings.HasPrefix(id, p1+".") {
		t.Errorf("long id %q (%d chars)", id, len(id))
	}
	if got := endpointInstanceID("east-0011aabb", "10.0.0.1", &registry.EndpointPort{Protocol: corev1.ProtocolTCP, Port: 8080}, false); got != "east-0011aabb.tcp-10_0_0_1-8080" {
		t.Errorf("id = %q", got)
	}
	// The AWS controller's ids have no dot.
	if strings.Contains("tcp-10_0_0_1-8080", ".") == strings.Contains(id, ".") {
		t.Errorf("mcsd ids must be told apart from the AWS controller's")
	}
}

// awsControllerInstance is an instance as the AWS Cloud Map MCS controller
// registers it.
func awsControllerInstance(cluster, clusterSet, ip string, port int, ready bool, created string) instance {
	id, attrs := mototest.AWSControllerInstance(cluster, clusterSet, ip, port, ready, created)
	return instance{ID: id, Attrs: attrs}
}

func TestDecodeAWSControllerInstances(t *testing.T) {
	insts := []instance{
		awsControllerInstance("aws-1", "set-1", "10.10.0.2", 8080, true, "1665108776000"),
		awsControllerInstance("aws-1", "set-1", "10.10.0.1", 8080, false, "1665108775000"),
		awsControllerInstance("aws-2", "other-set", "10.20.0.1", 8080, true, "1"),
		{ID: "junk", Attrs: map[string]string{attrClusterID: "aws-1", attrClusterSetID: "set-1", attrPort: "x"}},
	}
	recs := decodeService("set-1", testKey, insts)
	if len(recs) != 1 {
		t.Fatalf("decoded clusters %v, want aws-1 only", slices.Collect(maps.Keys(recs)))
	}
	r := recs["aws-1"]
	if r.MCSD {
		t.Errorf("AWS controller records marked MCSD")
	}
	want := registry.Export{Cluster: "aws-1", Service: testKey, Order: 1665108775000, WrittenBy: awsInstanceController, Partial: true, Spec: registry.ServiceSpec{
		Type:       registry.ClusterSetIP,
		Ports:      []registry.Port{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}},
		IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol}, // its endpoints'
	}}
	if diff := cmp.Diff(want, *r.Export); diff != "" {
		t.Errorf("export (-want +got):\n%s", diff)
	}
	node := "ip-10-10-77-143.ap-southeast-2.compute.internal"
	wantGroups := []registry.EndpointGroup{{
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []registry.EndpointPort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 8080}},
		Endpoints: []registry.Endpoint{
			{Addresses: []string{"10.10.0.1"}, Ready: false, Serving: false, NodeName: node},
			{Addresses: []string{"10.10.0.2"}, Ready: true, Serving: true, NodeName: node},
		},
	}}
	if diff := cmp.Diff(wantGroups, r.Endpoints.Groups); diff != "" {
		t.Errorf("endpoints (-want +got):\n%s", diff)
	}
}

func TestMCSDInstancesCarryAWSControllerAttributes(t *testing.T) {
	// What the AWS controller requires of an instance to read it.
	required := []string{attrPort, attrEndpointPortName, attrEndpointProtocol, attrServicePortName, attrServicePort,
		attrServiceTargetPort, attrServiceProtocol, attrServiceType, attrClusterID, attrClusterSetID, attrReady, attrCreation}
	enc := newEncoder(testID)
	spec := testSpec()
	insts, err := enc.instances(state{Created: 1, Spec: &spec, HasEndpoints: true, Groups: testGroups()[:2]})
	if err != nil {
		t.Fatal(err)
	}
	for id, in := range insts {
		if id == serviceRecordID(enc.prefix) {
			continue
		}
		_, v4 := in.Attrs[attrIPv4]
		_, v6 := in.Attrs[attrIPv6]
		if v4 == v6 {
			t.Errorf("%s: want exactly one of %s and %s", id, attrIPv4, attrIPv6)
		}
		for _, k := range required {
			if _, ok := in.Attrs[k]; !ok {
				t.Errorf("%s lacks %s", id, k)
			}
		}
	}
}

func TestOwnedAttributes(t *testing.T) {
	a := map[string]string{attrClusterID: "east", attrReady: "true", attrZone: "z"}
	b := maps.Clone(a)
	b["SOMEONE_ELSE"] = "x"
	if !sameOwned(a, b) {
		t.Errorf("a foreign attribute makes instances differ")
	}
	b[attrReady] = "false"
	if sameOwned(a, b) {
		t.Errorf("a changed READY goes unnoticed")
	}
	delete(b, attrReady)
	b[attrReady] = "true"
	delete(b, attrZone)
	if sameOwned(a, b) {
		t.Errorf("a removed MCSD_ZONE goes unnoticed")
	}
}

func TestBeatAlive(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	ttl := 30 * time.Second
	for _, tc := range []struct {
		name string
		hb   beat
		want bool
	}{
		{"fresh, first read", beat{ms: now.Add(-10 * time.Second).UnixMilli(), ttl: ttl, firstSeen: now}, true},
		{"old, first read", beat{ms: now.Add(-40 * time.Second).UnixMilli(), ttl: ttl, firstSeen: now}, false},
		{"writer clock behind, seen changing", beat{ms: now.Add(-time.Hour).UnixMilli(), ttl: ttl, firstSeen: now.Add(-time.Minute), changedAt: now.Add(-5 * time.Second)}, true},
		{"writer clock ahead, not changing", beat{ms: now.Add(time.Hour).UnixMilli(), ttl: ttl, firstSeen: now.Add(-31 * time.Second)}, false},
		{"stopped changing", beat{ms: now.Add(-5 * time.Second).UnixMilli(), ttl: ttl, firstSeen: now.Add(-time.Minute), changedAt: now.Add(-31 * time.Second)}, false},
	} {
		if got := tc.hb.alive(now); got != tc.want {
			t.Errorf("%s: alive = %t, want %t", tc.name, got, tc.want)
		}
	}
}

func TestSnapshotDiff(t *testing.T) {
	id := registry.RecordID{Cluster: "a", Service: testKey}
	old := newSnapshot()
	old.exports[id] = registry.Export{Cluster: "a", Service: testKey, Order: 1}
	old.clusters["a"] = registry.Cluster{ID: "a", LastSeen: time.UnixMilli(1)}
	next := newSnapshot()
	next.clusters["a"] = registry.Cluster{ID: "a", LastSeen: time.UnixMilli(2)}
	next.clusters["b"] = registry.Cluster{ID: "b"}
	next.endpoints[id] = registry.Endpoints{Cluster: "a", Service: testKey}
	got := old.diff(next)
	want := registry.Update{
		DeletedExports: []registry.RecordID{id},
		Endpoints:      []registry.Endpoints{{Cluster: "a", Service: testKey}},
		Clusters:       []registry.Cluster{{ID: "b"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("diff (-want +got):\n%s", diff)
	}
	if u := next.diff(next); !u.Empty() {
		t.Errorf("diff of equal snapshots = %+v", u)
	}
	if u := next.full(); !u.Full || len(u.Clusters) != 2 {
		t.Errorf("full = %+v", u)
	}
}
