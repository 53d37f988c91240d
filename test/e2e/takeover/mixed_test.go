package takeover

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	sd "github.com/aws/aws-sdk-go-v2/service/servicediscovery"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	fw "github.com/mcsd-io/mcsd/test/framework"
)

// TestMixedClustersNoConflict: while c1 still runs the AWS controller and
// c2 runs mcsd, both export one Service, alike. The AWS controller's
// records carry its type and ports alone (no IP families, no appProtocol,
// no affinity): mcsd takes the rest as unknown, so c2's export reports no
// conflict, and its import has c2's IP family and appProtocol. It runs
// before TestTakeOverFromAWSController, and leaves c2's mcsd stopped and
// nothing of its own in either cluster or in Cloud Map.
func TestMixedClustersNoConflict(t *testing.T) {
	const ns, name = "mixed", "api"
	ctx := context.Background()
	c1, c2 := env.Client(t, "c1"), env.Client(t, "c2")
	fw.EnsureNamespace(t, c1, ns)
	fw.Deploy(t, c2, fw.App{Namespace: ns, Name: name, Replicas: 1, Ports: []corev1.ServicePort{
		{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), AppProtocol: ptr.To("http")}}})

	// c1's AWS controller exported it first.
	awsExport(t, "c1", ns, name, []string{"10.99.0.1"})
	t.Cleanup(func() { removeAWSExport(t, "c1", ns, name) })
	se := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := c2.Create(ctx, se); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Withdrawn by c2's mcsd, then stopped: the take-over starts
		// with no mcsd running.
		if err := c2.Delete(ctx, se); client.IgnoreNotFound(err) != nil {
			t.Error(err)
		}
		poll.Until(t, timeout, "c2's ServiceExport withdrawn", func() (bool, string) {
			err := c2.Get(ctx, client.ObjectKeyFromObject(se), &mcsv1beta1.ServiceExport{})
			return client.IgnoreNotFound(err) == nil && err != nil, fmt.Sprint(err)
		})
		env.StopController("c2")
	})
	if _, err := env.StartController(ctx, "c2"); err != nil {
		t.Fatal(err)
	}

	poll.Until(t, timeout, "c2's import of both clusters, with c2's IP family and appProtocol", func() (bool, string) {
		si := fw.GetImport(t, c2, ns, name)
		if si == nil {
			return false, "no ServiceImport"
		}
		var clusters []string
		for _, c := range si.Status.Clusters {
			clusters = append(clusters, c.Cluster)
		}
		ok := slices.Equal(clusters, []string{"c1", "c2"}) && slices.Equal(si.Spec.IPFamilies, []corev1.IPFamily{corev1.IPv4Protocol}) &&
			len(si.Spec.Ports) == 1 && ptr.Deref(si.Spec.Ports[0].AppProtocol, "") == "http"
		return ok, fmt.Sprintf("clusters %v, families %v, ports %+v", clusters, si.Spec.IPFamilies, si.Spec.Ports)
	})
	poll.Until(t, timeout, "c2's export without conflict", func() (bool, string) {
		got := &mcsv1beta1.ServiceExport{}
		if err := c2.Get(ctx, client.ObjectKeyFromObject(se), got); err != nil {
			return false, err.Error()
		}
		c := fw.Condition(got.Status.Conditions, string(mcsv1beta1.ServiceExportConditionConflict))
		return c != nil && c.Status == metav1.ConditionFalse && c.ObservedGeneration == got.Generation, fmt.Sprintf("%+v", c)
	})
}

// removeAWSExport undoes awsExport: the ServiceExport, its finalizer
// dropped, and the Cloud Map instances of cluster.
func removeAWSExport(t *testing.T, cluster, namespace, name string) {
	t.Helper()
	ctx := context.Background()
	cl := env.Client(t, cluster)
	se := &mcsv1beta1.ServiceExport{}
	if err := cl.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, se); err == nil {
		se.Finalizers = nil
		if err := cl.Update(ctx, se); err != nil {
			t.Error(err)
		}
		if err := cl.Delete(ctx, se); client.IgnoreNotFound(err) != nil {
			t.Error(err)
		}
	}
	c := sdClient(t)
	id := awsCloudMapService(t, c, namespace, name)
	for instance, attrs := range cloudMapInstances(t, namespace, name) {
		if attrs["CLUSTER_ID"] != cluster {
			continue
		}
		if _, err := c.DeregisterInstance(ctx, &sd.DeregisterInstanceInput{ServiceId: aws.String(id), InstanceId: aws.String(instance)}); err != nil {
			t.Error(err)
		}
	}
}
