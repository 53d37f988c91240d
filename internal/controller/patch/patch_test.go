package patch_test

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/controller/patch"
)

func TestStatusWritesOnlyAChange(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := mcsv1beta1.Install(scheme); err != nil {
		t.Fatal(err)
	}
	se := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}}
	writes := 0
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(se).WithStatusSubresource(se).
		WithInterceptorFuncs(interceptor.Funcs{SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			writes++
			return c.SubResource(sub).Patch(ctx, obj, p, opts...)
		}}).Build()
	status := func(se *mcsv1beta1.ServiceExport) any { return se.Status }
	ctx := context.Background()

	base := se.DeepCopy()
	if wrote, err := patch.Status(ctx, c, base, se.DeepCopy(), status); err != nil || wrote {
		t.Fatalf("unchanged status: wrote %v, err %v; want no write", wrote, err)
	}
	changed := se.DeepCopy()
	changed.Status.Conditions = []metav1.Condition{{Type: "Valid", Status: metav1.ConditionTrue, Reason: "Valid", LastTransitionTime: metav1.Now()}}
	if wrote, err := patch.Status(ctx, c, base, changed, status); err != nil || !wrote {
		t.Fatalf("changed status: wrote %v, err %v; want a write", wrote, err)
	}
	got := &mcsv1beta1.ServiceExport{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(se), got); err != nil {
		t.Fatal(err)
	}
	if writes != 1 || len(got.Status.Conditions) != 1 {
		t.Errorf("%d writes, stored conditions %v; want 1 write of one condition", writes, got.Status.Conditions)
	}
}
