package takeover

import (
	"context"
	"crypto/sha256"
	"encoding/base32"
	"encoding/json"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	sd "github.com/aws/aws-sdk-go-v2/service/servicediscovery"
	sdtypes "github.com/aws/aws-sdk-go-v2/service/servicediscovery/types"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/wellknown"
	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/cloudmap"
	"github.com/mcsd-io/mcsd/pkg/registry/cloudmap/mototest"
)

// What the AWS Cloud Map MCS controller (aws/aws-cloud-map-mcs-controller-for-k8s,
// its last release) leaves in a cluster and in Cloud Map, written here as it
// writes it: the state mcsd must take over.

// awsDerivedName is that controller's name for the derived Service of
// namespace/name from cluster: "imported-" and 10 characters of the
// lower-case, unpadded base32hex of the SHA-256 of the three, concatenated.
func awsDerivedName(namespace, name, cluster string) string {
	h := sha256.Sum256([]byte(namespace + name + cluster))
	return "imported-" + strings.ToLower(base32.HexEncoding.WithPadding(base32.NoPadding).EncodeToString(h[:]))[:10]
}

// awsExport is what the controller writes for its cluster's export of
// namespace/name: its finalizer on the ServiceExport (created here), and in
// Cloud Map an HTTP namespace and service of the same names (made once) and
// one instance per ready IPv4 endpoint, port "http" 80 → 8080.
func awsExport(t *testing.T, cluster, namespace, name string, ips []string) {
	t.Helper()
	ctx := context.Background()
	cl := env.Client(t, cluster)
	se := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name,
		Finalizers: []string{wellknown.AWSExportFinalizer}}}
	if err := cl.Create(ctx, se); err != nil {
		t.Fatalf("create ServiceExport in %s: %v", cluster, err)
	}
	c := sdClient(t)
	svcID := awsCloudMapService(t, c, namespace, name)
	created := strconv.FormatInt(se.CreationTimestamp.UnixMilli(), 10)
	for _, ip := range ips {
		id, attrs := mototest.AWSControllerInstance(cluster, env.TB.ClusterSetID(), ip, 8080, true, created)
		if _, err := c.RegisterInstance(ctx, &sd.RegisterInstanceInput{ServiceId: aws.String(svcID), InstanceId: aws.String(id), Attributes: attrs}); err != nil {
			t.Fatalf("register the AWS controller's instance: %v", err)
		}
	}
}

// awsCloudMapService returns the id of the Cloud Map service
// namespace/name, creating it and its HTTP namespace as the controller does
// when they are missing.
func awsCloudMapService(t *testing.T, c *sd.Client, namespace, name string) string {
	t.Helper()
	ctx := context.Background()
	var nsID string
	nss, err := c.ListNamespaces(ctx, &sd.ListNamespacesInput{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range nss.Namespaces {
		if aws.ToString(ns.Name) == namespace {
			nsID = aws.ToString(ns.Id)
		}
	}
	if nsID == "" {
		out, err := c.CreateHttpNamespace(ctx, &sd.CreateHttpNamespaceInput{Name: aws.String(namespace)})
		if err != nil {
			t.Fatal(err)
		}
		op, err := c.GetOperation(ctx, &sd.GetOperationInput{OperationId: out.OperationId})
		if err != nil {
			t.Fatal(err)
		}
		nsID = op.Operation.Targets["NAMESPACE"]
	}
	svcs, err := c.ListServices(ctx, &sd.ListServicesInput{Filters: []sdtypes.ServiceFilter{{Name: sdtypes.ServiceFilterNameNamespaceId, Values: []string{nsID}}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range svcs.Services {
		if aws.ToString(s.Name) == name {
			return aws.ToString(s.Id)
		}
	}
	out, err := c.CreateService(ctx, &sd.CreateServiceInput{Name: aws.String(name), NamespaceId: aws.String(nsID)})
	if err != nil {
		t.Fatal(err)
	}
	return aws.ToString(out.Service.Id)
}

// awsImport is what the controller writes in cluster for the import of
// namespace/name (ClusterSetIP, port "http" 80) from the clusters of ips:
// the ServiceImport (v1alpha1, annotated with its derived Services), a
// derived Service per source cluster, owned by the ServiceImport, an
// EndpointSlice per derived Service, and the ServiceImport's IPs, those of
// all the derived Services. It returns the derived Services' cluster IPs
// by name.
func awsImport(t *testing.T, cluster, namespace, name string, ips map[string][]string) map[string]string {
	t.Helper()
	ctx := context.Background()
	cl := env.Client(t, cluster)
	clusters := slices.Sorted(func(yield func(string) bool) {
		for c := range ips {
			if !yield(c) {
				return
			}
		}
	})
	var entries []map[string]string
	for _, c := range clusters {
		entries = append(entries, map[string]string{"cluster": c, "derived-service": awsDerivedName(namespace, name, c)})
	}
	raw, _ := json.Marshal(entries)
	si := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "multicluster.x-k8s.io/v1alpha1",
		"kind":       "ServiceImport",
		"metadata": map[string]any{"namespace": namespace, "name": name,
			"annotations": map[string]any{wellknown.AWSAnnotationDerivedService: string(raw)}},
		"spec": map[string]any{"type": "ClusterSetIP", "ips": []any{},
			"ports": []any{map[string]any{"name": "http", "protocol": "TCP", "port": int64(80)}}},
	}}
	if err := cl.Create(ctx, si); err != nil {
		t.Fatalf("create the AWS controller's ServiceImport in %s: %v", cluster, err)
	}
	owner := metav1.OwnerReference{APIVersion: "multicluster.x-k8s.io/v1alpha1", Kind: "ServiceImport", Name: name, UID: si.GetUID(), Controller: ptr.To(true)}
	out := map[string]string{}
	var siIPs []any
	for _, c := range clusters {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: awsDerivedName(namespace, name, c),
				Labels:          map[string]string{mcsv1beta1.LabelSourceCluster: c, mcsv1beta1.LabelServiceName: name},
				OwnerReferences: []metav1.OwnerReference{owner}},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP,
				Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.Parse("8080")}}},
		}
		if err := cl.Create(ctx, svc); err != nil {
			t.Fatalf("create the AWS controller's derived Service in %s: %v", cluster, err)
		}
		out[svc.Name] = svc.Spec.ClusterIP
		siIPs = append(siIPs, svc.Spec.ClusterIP)
		slice := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, GenerateName: svc.Name + "-",
				Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name, mcsv1beta1.LabelServiceName: name,
					discoveryv1.LabelManagedBy: wellknown.AWSManagedBy, mcsv1beta1.LabelSourceCluster: c},
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(svc, corev1.SchemeGroupVersion.WithKind("Service"))}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)}},
		}
		for _, ip := range ips[c] {
			slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip},
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
		}
		if err := cl.Create(ctx, slice); err != nil {
			t.Fatalf("create the AWS controller's EndpointSlice in %s: %v", cluster, err)
		}
	}
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"ips": siIPs}})
	if err := cl.Patch(ctx, si, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatalf("set the AWS controller's ServiceImport IPs in %s: %v", cluster, err)
	}
	return out
}

// awsSlices lists the AWS controller's EndpointSlices in a namespace.
func awsSlices(t *testing.T, cluster, namespace string) []string {
	t.Helper()
	var list discoveryv1.EndpointSliceList
	if err := env.Client(t, cluster).List(context.Background(), &list, client.InNamespace(namespace),
		client.MatchingLabels{discoveryv1.LabelManagedBy: wellknown.AWSManagedBy}); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range list.Items {
		out = append(out, s.Name)
	}
	return out
}

// cloudMapInstances returns the attributes of every instance of the Cloud
// Map service namespace/name, by id.
func cloudMapInstances(t *testing.T, namespace, name string) map[string]map[string]string {
	t.Helper()
	c := sdClient(t)
	id := awsCloudMapService(t, c, namespace, name)
	out := map[string]map[string]string{}
	p := sd.NewListInstancesPaginator(c, &sd.ListInstancesInput{ServiceId: aws.String(id)})
	for p.HasMorePages() {
		page, err := p.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range page.Instances {
			out[aws.ToString(in.Id)] = in.Attributes
		}
	}
	return out
}

func sdClient(t *testing.T) *sd.Client {
	t.Helper()
	c, err := cloudmap.NewClient(context.Background(), moto.Options(registry.Identity{}))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// podIPv4s returns the IPv4 addresses of the ready pods of app in a
// cluster, sorted.
func podIPv4s(t *testing.T, cluster, namespace, app string) []string {
	t.Helper()
	var pods corev1.PodList
	if err := env.Client(t, cluster).List(context.Background(), &pods, client.InNamespace(namespace), client.MatchingLabels{"app": app}); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range pods.Items {
		for _, ip := range p.Status.PodIPs {
			if a, err := netip.ParseAddr(ip.IP); err == nil && a.Is4() && p.DeletionTimestamp == nil {
				out = append(out, ip.IP)
			}
		}
	}
	slices.Sort(out)
	return out
}
