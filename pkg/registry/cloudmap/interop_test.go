package cloudmap

import (
	"maps"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	sd "github.com/aws/aws-sdk-go-v2/service/servicediscovery"
	"github.com/aws/aws-sdk-go-v2/service/servicediscovery/types"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/registrytest"
)

// TestInteropAWSController checks that mcsd imports what the AWS Cloud Map
// MCS controller registers (its namespace, service, instance ids and
// attributes), and that mcsd's instances carry everything that controller
// reads.
func TestInteropAWSController(t *testing.T) {
	srv := moto(t)
	c := rawClient(t, srv)
	ctx := t.Context()
	cs := randName("interop")
	nsName := randName("aws")
	key := registry.ServiceKey{Namespace: nsName, Name: "web"}

	// The AWS controller: an HTTP namespace, a service, and an instance per
	// endpoint and port with id <proto>-<ip>-<port>.
	awsInst := awsControllerInstance("aws-east", cs, "10.1.0.5", 8080, true, "1665108776000")
	svcID := awsRegistrar(t, c, nsName)("web", awsInst)

	b := openMember(t, srv, cs, "mcsd-west", 30*time.Second)
	rec := registrytest.StartWatch(t, b)
	awsID := registry.RecordID{Cluster: "aws-east", Service: key}
	wantExport := registry.Export{Cluster: "aws-east", Service: key, Order: 1665108776000, WrittenBy: awsInstanceController, Partial: true, Spec: registry.ServiceSpec{
		Type:       registry.ClusterSetIP,
		Ports:      []registry.Port{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}},
		IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol}, // its endpoints'
	}}
	wantGroups := []registry.EndpointGroup{{
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []registry.EndpointPort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 8080}},
		Endpoints: []registry.Endpoint{{Addresses: []string{"10.1.0.5"}, Ready: true, Serving: true,
			NodeName: "ip-10-10-77-143.ap-southeast-2.compute.internal"}},
	}}
	rec.WaitFor(t, 15*time.Second, "the AWS controller's export", func(_ registrytest.Event, v *registrytest.View) bool {
		_, live := v.Clusters["aws-east"]
		return cmp.Equal(wantExport, v.Exports[awsID]) && cmp.Equal(wantGroups, v.Endpoints[awsID].Groups) && live
	})

	// mcsd exports into the same Cloud Map service.
	spec := registry.ServiceSpec{Type: registry.ClusterSetIP, Ports: []registry.Port{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}}
	mustDo(t, b.PutExport(ctx, key, spec))
	mustDo(t, b.PutEndpoints(ctx, key, []registry.EndpointGroup{{
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []registry.EndpointPort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 8080}},
		Endpoints:   []registry.Endpoint{{Addresses: []string{"10.2.0.7"}, Ready: true, Serving: true, Hostname: "web-0", NodeName: "n1"}},
	}}))
	if got := namespacesNamed(t, c, nsName); len(got) != 1 {
		t.Errorf("%d namespaces named %s, want the AWS controller's only", len(got), nsName)
	}
	raw := rawInstances(t, c, nsName, "web")
	if len(raw) != 2 {
		t.Fatalf("got instances %v, want the AWS controller's and mcsd's endpoint", raw)
	}
	prefix := ownerPrefix(registry.Identity{ClusterSet: cs, Cluster: "mcsd-west"})
	if recs := rawRecords(t, c, cs, key); len(recs) != 1 || recs[recordID(prefix, key)] == nil {
		t.Errorf("service records of %s: %v, want mcsd-west's", key, recs)
	}
	for id, at := range raw {
		if id == awsInst.ID {
			continue
		}
		// What the AWS controller parses, as it parses it: every instance
		// of the service is an endpoint to it, so each must be one.
		for _, k := range []string{attrIPv4, attrEndpointPortName, attrServiceTargetPort, attrServicePortName, attrServiceType, attrClusterID, attrClusterSetID, attrHostname, attrNodeName} {
			if _, ok := at[k]; !ok {
				t.Errorf("instance %s lacks %s", id, k)
			}
		}
		for _, k := range []string{attrPort, attrServicePort} {
			if _, err := strconv.ParseUint(at[k], 10, 16); err != nil {
				t.Errorf("instance %s: %s=%q: %v", id, k, at[k], err)
			}
		}
		for _, k := range []string{attrEndpointProtocol, attrServiceProtocol} {
			if at[k] != "TCP" {
				t.Errorf("instance %s: %s=%q", id, k, at[k])
			}
		}
		if _, err := strconv.ParseBool(at[attrReady]); err != nil {
			t.Errorf("instance %s: READY=%q", id, at[attrReady])
		}
		if _, err := strconv.ParseInt(at[attrCreation], 10, 64); err != nil {
			t.Errorf("instance %s: %s=%q", id, attrCreation, at[attrCreation])
		}
		if at[attrClusterSetID] != cs || at[attrClusterID] != "mcsd-west" || at[attrServiceType] != "ClusterSetIP" {
			t.Errorf("instance %s: ids or type wrong: %v", id, at)
		}
	}

	// The AWS controller withdraws its export.
	_, err := c.DeregisterInstance(ctx, &sd.DeregisterInstanceInput{ServiceId: aws.String(svcID), InstanceId: aws.String(awsInst.ID)})
	mustDo(t, err)
	rec.WaitFor(t, 15*time.Second, "the AWS controller's records deleted", func(_ registrytest.Event, v *registrytest.View) bool {
		_, x := v.Exports[awsID]
		_, p := v.Endpoints[awsID]
		_, live := v.Clusters["aws-east"]
		return !x && !p && !live
	})
	if _, ok := rec.View().Exports[registry.RecordID{Cluster: "mcsd-west", Service: key}]; !ok {
		t.Errorf("mcsd's own export missing")
	}
}

// TestExistingPrivateDNSNamespace checks that mcsd uses a private DNS
// namespace of the Service's namespace name as it is, with an API-only
// service in it.
func TestExistingPrivateDNSNamespace(t *testing.T) {
	srv := moto(t)
	c := rawClient(t, srv)
	ctx := t.Context()
	nsName := randName("dns")
	_, err := c.CreatePrivateDnsNamespace(ctx, &sd.CreatePrivateDnsNamespaceInput{Name: aws.String(nsName), Vpc: aws.String(randName("vpc"))})
	mustDo(t, err)

	cs := randName("dnsset")
	a, b := openMember(t, srv, cs, "a", 30*time.Second), openMember(t, srv, cs, "b", 30*time.Second)
	key := registry.ServiceKey{Namespace: nsName, Name: "db"}
	spec := registry.ServiceSpec{Type: registry.Headless}
	mustDo(t, a.PutExport(ctx, key, spec))

	nss := namespacesNamed(t, c, nsName)
	if len(nss) != 1 || nss[0].Type != types.NamespaceTypeDnsPrivate {
		t.Fatalf("namespaces named %s: %+v, want the private DNS one only", nsName, nss)
	}
	svcs, err := c.ListServices(ctx, &sd.ListServicesInput{Filters: []types.ServiceFilter{{Name: types.ServiceFilterNameNamespaceId, Values: []string{aws.ToString(nss[0].Id)}}}})
	mustDo(t, err)
	if len(svcs.Services) != 1 || svcs.Services[0].Type != types.ServiceTypeHttp {
		t.Errorf("services: %+v, want one of type HTTP", svcs.Services)
	}
	rec := registrytest.StartWatch(t, b)
	rec.WaitFor(t, 15*time.Second, "a's export", func(_ registrytest.Event, v *registrytest.View) bool {
		x, ok := v.Exports[registry.RecordID{Cluster: "a", Service: key}]
		return ok && x.Spec.Type == registry.Headless
	})
}

// awsInstanceController is the K8S_CONTROLLER value of
// mototest.AWSControllerInstance.
const awsInstanceController = "aws-cloud-map-mcs-controller-for-k8s d07e680 (d07e680)"

// TestTakeOverAWSControllerInstances: mcsd started as a cluster that ran the
// AWS controller takes that controller's instances of the cluster over as
// its own previous writes: it registers its own for the same endpoints
// before it deregisters them, so that another cluster's watch never sees the
// cluster's endpoints vanish; and it withdraws those of a Service it no
// longer exports.
func TestTakeOverAWSControllerInstances(t *testing.T) {
	srv := moto(t)
	c := rawClient(t, srv)
	ctx := t.Context()
	cs := randName("takeover")
	nsName := randName("aws")
	web := registry.ServiceKey{Namespace: nsName, Name: "web"}
	gone := registry.ServiceKey{Namespace: nsName, Name: "gone"}

	// The AWS controller ran as "east": web with two endpoints, gone with
	// one (its ServiceExport was deleted while no controller ran).
	register := awsRegistrar(t, c, nsName)
	inst := func(ip string) instance { return awsControllerInstance("east", cs, ip, 8080, true, "1665108776000") }
	register("web", inst("10.1.0.5"), inst("10.1.0.6"))
	register("gone", inst("10.1.0.9"))

	west := openMember(t, srv, cs, "west", 30*time.Second)
	rec := registrytest.StartWatch(t, west)
	eastWeb := registry.RecordID{Cluster: "east", Service: web}
	addrs := addrsOf
	both := []string{"10.1.0.5", "10.1.0.6"}
	rec.WaitFor(t, 15*time.Second, "the AWS controller's endpoints of east", func(_ registrytest.Event, v *registrytest.View) bool {
		return slices.Equal(addrs(v, eastWeb), both)
	})

	// mcsd starts as east, with no heartbeat of its own before.
	east := openMember(t, srv, cs, "east", 30*time.Second)
	exported, err := east.Exported(ctx)
	mustDo(t, err)
	if !slices.Equal(exported, []registry.ServiceKey{gone, web}) {
		t.Fatalf("Exported = %v, want the AWS controller's %v and %v", exported, gone, web)
	}
	spec := registry.ServiceSpec{Type: registry.ClusterSetIP, IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
		Ports: []registry.Port{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}}
	group := registry.EndpointGroup{AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []registry.EndpointPort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 8080}}}
	for _, ip := range both {
		group.Endpoints = append(group.Endpoints, registry.Endpoint{Addresses: []string{ip}, Ready: true, Serving: true})
	}
	mustDo(t, east.Publish(ctx, web, spec, []registry.EndpointGroup{group}))
	mustDo(t, east.DeleteExport(ctx, gone))

	// Only mcsd's instances are left, one per endpoint.
	raw := rawInstances(t, c, nsName, "web")
	if len(raw) != 2 {
		t.Errorf("instances of web: %v, want mcsd's two", slices.Collect(maps.Keys(raw)))
	}
	for id, at := range raw {
		if at[attrRecord] != recordEndpoint {
			t.Errorf("instance %s is not mcsd's: %v", id, at)
		}
		if at[attrCreation] != "1665108776000" {
			t.Errorf("instance %s: export created %s, want the AWS controller's 1665108776000 (the export keeps its age)", id, at[attrCreation])
		}
	}
	if raw := rawInstances(t, c, nsName, "gone"); len(raw) != 0 {
		t.Errorf("instances of gone: %v, want none", raw)
	}
	events := rec.WaitFor(t, 15*time.Second, "east's export written by mcsd", func(_ registrytest.Event, v *registrytest.View) bool {
		x, ok := v.Exports[registry.RecordID{Cluster: "east", Service: web}]
		return ok && x.WrittenBy == "" && slices.Equal(x.Spec.IPFamilies, spec.IPFamilies) && slices.Equal(addrs(v, eastWeb), both)
	})
	for _, e := range events {
		if e.Update == nil {
			continue
		}
		for _, id := range e.Update.DeletedEndpoints {
			if id == eastWeb {
				t.Errorf("west saw east's endpoints of web deleted during the take-over: %v", e)
			}
		}
	}
	if got := addrs(rec.View(), eastWeb); !slices.Equal(got, both) {
		t.Errorf("west reads east's endpoints %v, want %v (neither lost nor doubled)", got, both)
	}
}

// awsRegistrar makes the HTTP namespace nsName as the AWS controller does,
// and returns a function that makes a service in it, registers insts there
// and returns its id.
func awsRegistrar(t *testing.T, c *sd.Client, nsName string) func(name string, insts ...instance) string {
	t.Helper()
	ctx := t.Context()
	nsID, _ := createHTTPNamespace(t, c, nsName)
	return func(name string, insts ...instance) string {
		out, err := c.CreateService(ctx, &sd.CreateServiceInput{Name: aws.String(name), NamespaceId: aws.String(nsID)})
		mustDo(t, err)
		for _, in := range insts {
			_, err = c.RegisterInstance(ctx, &sd.RegisterInstanceInput{ServiceId: out.Service.Id, InstanceId: aws.String(in.ID), Attributes: in.Attrs})
			mustDo(t, err)
		}
		return aws.ToString(out.Service.Id)
	}
}
