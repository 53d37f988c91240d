package patch

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// TestStatusOnce: a reconcile that reads the object from a cache not yet
// showing its own last status write does not write it again; anything else
// is written as Status writes it.
func TestStatusOnce(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := mcsv1beta1.Install(scheme); err != nil {
		t.Fatal(err)
	}
	at := metav1.NewTime(time.Date(2026, 11, 25, 2, 0, 0, 0, time.UTC))
	cond := func(status metav1.ConditionStatus, lastTransition metav1.Time) []metav1.Condition {
		return []metav1.Condition{{Type: "Ready", Status: status, Reason: "R", LastTransitionTime: lastTransition}}
	}
	obj := func(uid types.UID, conds []metav1.Condition) *mcsv1beta1.ServiceExport {
		return &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: uid}, Status: mcsv1beta1.ServiceExportStatus{Conditions: conds}}
	}
	status := func(se *mcsv1beta1.ServiceExport) any { return se.Status }
	type step struct {
		name       string
		base, want *mcsv1beta1.ServiceExport
		after      time.Duration // the clock moves before the step
		wantWrite  bool
	}
	stale := obj("a", nil)
	ready := obj("a", cond(metav1.ConditionTrue, at))
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{name: "the same write over a stale cache is skipped", steps: []step{
			{name: "first", base: stale, want: ready, wantWrite: true},
			{name: "cache behind", base: stale, want: ready},
			{name: "cache behind, a transition time later in the same second", base: stale,
				want: obj("a", cond(metav1.ConditionTrue, metav1.NewTime(at.Add(300*time.Millisecond))))},
			{name: "cache shows it", base: ready, want: ready},
		}},
		{name: "a different status is written", steps: []step{
			{name: "first", base: stale, want: ready, wantWrite: true},
			{name: "cache behind, another status", base: stale, want: obj("a", cond(metav1.ConditionFalse, at)), wantWrite: true},
		}},
		{name: "once the cache showed the write, its status set back is written again", steps: []step{
			{name: "first", base: stale, want: ready, wantWrite: true},
			{name: "cache shows it", base: ready, want: ready},
			{name: "set back by someone", base: stale, want: ready, wantWrite: true},
		}},
		{name: "cache behind, the status it replaced wanted back", steps: []step{
			{name: "first", base: stale, want: ready, wantWrite: true},
			{name: "cache behind, the cache's status wanted", base: stale, want: stale, wantWrite: true},
		}},
		{name: "a cache behind for long is believed", steps: []step{
			{name: "first", base: stale, want: ready, wantWrite: true},
			{name: "still behind", after: writtenFor + time.Second, base: stale, want: ready, wantWrite: true},
		}},
		{name: "another object is written", steps: []step{
			{name: "first", base: stale, want: ready, wantWrite: true},
			{name: "recreated", base: obj("b", nil), want: obj("b", cond(metav1.ConditionTrue, at)), wantWrite: true},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			writes := 0
			c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(obj("a", nil)).WithStatusSubresource(&mcsv1beta1.ServiceExport{}).
				WithInterceptorFuncs(interceptor.Funcs{SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
					writes++
					return nil
				}}).Build()
			now := at.Time
			w := &Written{now: func() time.Time { return now }}
			for _, s := range tc.steps {
				now = now.Add(s.after)
				before := writes
				wrote, recheck, err := StatusOnce(context.Background(), c, w, s.base.DeepCopy(), s.want.DeepCopy(), status)
				if err != nil {
					t.Fatalf("%s: %v", s.name, err)
				}
				if wrote != s.wantWrite || writes-before != map[bool]int{true: 1}[s.wantWrite] {
					t.Errorf("%s: wrote %v (%d patches), want %v", s.name, wrote, writes-before, s.wantWrite)
				}
				// A skipped write is looked at again once it is no longer
				// trusted.
				if skipped := !s.wantWrite && !cmp.Equal(s.base.Status, s.want.Status); skipped != (recheck > 0) || recheck > writtenFor {
					t.Errorf("%s: recheck after %v, skipped %v", s.name, recheck, skipped)
				}
			}
		})
	}
}

// TestStatusOnceFromTheWrittenStatus: while the cache shows a status that
// the reconciler's writes replaced, the API server holds the last one
// written, and the next write goes from it: a status set back to the
// cache's (an import whose cluster left and came back before the cache
// showed it leaving) is written, and so is any other, whichever of the
// replaced statuses the cache shows; a status the API server already holds
// is not written again.
func TestStatusOnceFromTheWrittenStatus(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := mcsv1beta1.Install(scheme); err != nil {
		t.Fatal(err)
	}
	clusters := func(ids ...string) mcsv1beta1.ServiceImportStatus {
		s := mcsv1beta1.ServiceImportStatus{}
		for _, id := range ids {
			s.Clusters = append(s.Clusters, mcsv1beta1.ClusterStatus{Cluster: id})
		}
		return s
	}
	obj := func(s mcsv1beta1.ServiceImportStatus) *mcsv1beta1.ServiceImport {
		return &mcsv1beta1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "a"}, Status: s}
	}
	status := func(si *mcsv1beta1.ServiceImport) any { return si.Status }
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(obj(clusters("c1", "c2"))).WithStatusSubresource(&mcsv1beta1.ServiceImport{}).Build()
	w := &Written{}
	stored := func() mcsv1beta1.ServiceImportStatus {
		t.Helper()
		si := &mcsv1beta1.ServiceImport{}
		if err := c.Get(context.Background(), types.NamespacedName{Namespace: "shop", Name: "web"}, si); err != nil {
			t.Fatal(err)
		}
		return si.Status
	}
	for i, step := range []struct {
		cache, want mcsv1beta1.ServiceImportStatus
	}{
		{cache: clusters("c1", "c2"), want: clusters("c1")},
		{cache: clusters("c1", "c2"), want: clusters("c1", "c2")}, // the cache behind both writes
		{cache: clusters("c1"), want: clusters("c1")},             // the first write shown late
		{cache: clusters("c1"), want: clusters("c1", "c2")},       // held already: no write
		{cache: clusters("c1"), want: clusters("c2")},
		{cache: clusters("c1", "c2"), want: clusters()},
	} {
		had := stored()
		wrote, _, err := StatusOnce(context.Background(), c, w, obj(step.cache), obj(step.want), status)
		if err != nil {
			t.Fatal(err)
		}
		if got := stored(); !cmp.Equal(got, step.want, cmpopts.EquateEmpty()) || wrote == cmp.Equal(had, step.want, cmpopts.EquateEmpty()) {
			t.Errorf("step %d: %+v wanted over a cache showing %+v, the API server holding %+v: wrote %v, the API server has %+v",
				i+1, step.want.Clusters, step.cache.Clusters, had.Clusters, wrote, got.Clusters)
		}
	}
}

// TestKnown: a reconcile starts from the status it last wrote while the
// cache shows the status that write replaced; from the cache's otherwise.
func TestKnown(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := mcsv1beta1.Install(scheme); err != nil {
		t.Fatal(err)
	}
	at := metav1.NewTime(time.Date(2026, 11, 25, 2, 0, 0, 0, time.UTC))
	stale := mcsv1beta1.ServiceExportStatus{}
	ready := mcsv1beta1.ServiceExportStatus{Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "R", LastTransitionTime: at}}}
	other := mcsv1beta1.ServiceExportStatus{Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse, Reason: "S", LastTransitionTime: at}}}
	obj := func(s mcsv1beta1.ServiceExportStatus) *mcsv1beta1.ServiceExport {
		return &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "a"}, Status: s}
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(obj(stale)).WithStatusSubresource(&mcsv1beta1.ServiceExport{}).Build()
	now := at.Time
	w := &Written{now: func() time.Time { return now }}
	if got := Known(w, "a", stale); !cmp.Equal(got, stale) {
		t.Errorf("nothing written: Known = %+v, want the cache's", got)
	}
	if _, _, err := StatusOnce(context.Background(), c, w, obj(stale), obj(ready), func(se *mcsv1beta1.ServiceExport) any { return se.Status }); err != nil {
		t.Fatal(err)
	}
	if got := Known(w, "a", stale); !cmp.Equal(got, ready) {
		t.Errorf("cache behind: Known = %+v, want the written status", got)
	}
	if got := Known(w, "a", other); !cmp.Equal(got, other) {
		t.Errorf("set to another status since: Known = %+v, want the cache's", got)
	}
	if got := Known(w, "b", stale); !cmp.Equal(got, stale) {
		t.Errorf("another object: Known = %+v, want the cache's", got)
	}
	now = now.Add(writtenFor + time.Second)
	if got := Known(w, "a", stale); !cmp.Equal(got, stale) {
		t.Errorf("cache behind for long: Known = %+v, want the cache's", got)
	}
}
