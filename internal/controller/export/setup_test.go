package export

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/clusterset"
	"github.com/mcsd-io/mcsd/internal/testutil/ctrltest"
	"github.com/mcsd-io/mcsd/internal/wellknown"
)

func TestSliceToExport(t *testing.T) {
	tests := []struct {
		name   string
		labels map[string]string
		want   string
	}{
		{name: "local slice", labels: map[string]string{discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"}, want: "web"},
		{name: "imported slice", labels: map[string]string{discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: wellknown.ManagedBy}},
		{name: "no service label", labels: map[string]string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s", Labels: tt.labels}}
			reqs := sliceToExport(context.Background(), s)
			switch {
			case tt.want == "" && len(reqs) != 0:
				t.Errorf("requests = %v, want none", reqs)
			case tt.want != "" && (len(reqs) != 1 || reqs[0].Name != tt.want || reqs[0].Namespace != ns):
				t.Errorf("requests = %v, want %s/%s", reqs, ns, tt.want)
			}
		})
	}
}

// A Service mcsd derived for an import queues its ServiceExport only when
// one of that name exists, or the cache cannot tell; any other Service
// always does.
func TestServiceToExport(t *testing.T) {
	derivedSvc := newService(func(svc *corev1.Service) {
		svc.Name = "mcsd-web-0123456789"
		svc.Annotations = map[string]string{wellknown.AnnotationManaged: "true", wellknown.AnnotationServiceImport: "web"}
	})
	exportedDerived := newServiceExport(func(se *mcsv1beta1.ServiceExport) { se.Name = derivedSvc.Name })
	tests := []struct {
		name     string
		svc      *corev1.Service
		objs     []client.Object
		unsynced bool
		want     bool
	}{
		{name: "a Service with no ServiceExport", svc: newService(), want: true},
		{name: "a derived Service", svc: derivedSvc},
		{name: "a derived Service that is exported", svc: derivedSvc, objs: []client.Object{exportedDerived}, want: true},
		{name: "a derived Service, the cache unsynced", svc: derivedSvc, unsynced: true, want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, tt.objs...)
			if tt.unsynced {
				e.r.Client = unsyncedExports{e.c}
			}
			reqs := e.r.serviceToExport(context.Background(), tt.svc)
			switch {
			case !tt.want && len(reqs) != 0:
				t.Errorf("requests = %v, want none", reqs)
			case tt.want && (len(reqs) != 1 || reqs[0].NamespacedName != client.ObjectKeyFromObject(tt.svc)):
				t.Errorf("requests = %v, want %s", reqs, client.ObjectKeyFromObject(tt.svc))
			}
		})
	}
}

// unsyncedExports is a client whose cache cannot tell whether a
// ServiceExport exists.
type unsyncedExports struct{ client.Client }

func (c unsyncedExports) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*mcsv1beta1.ServiceExport); ok {
		return errors.New("cache not synced")
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

func TestNotStatusOnly(t *testing.T) {
	base := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: svcName, Generation: 1, Finalizers: []string{Finalizer}}}
	now := metav1.Now()
	tests := []struct {
		name string
		mut  func(*mcsv1beta1.ServiceExport)
		want bool
	}{
		{name: "status only", mut: func(se *mcsv1beta1.ServiceExport) {
			se.ResourceVersion = "2"
			se.Status.Conditions = []metav1.Condition{{Type: "Ready"}}
		}},
		{name: "spec", mut: func(se *mcsv1beta1.ServiceExport) { se.Generation = 2 }, want: true},
		{name: "deletion", mut: func(se *mcsv1beta1.ServiceExport) { se.DeletionTimestamp = &now }, want: true},
		{name: "finalizer removed", mut: func(se *mcsv1beta1.ServiceExport) { se.Finalizers = nil }, want: true},
	}
	p := notStatusOnly()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := base.DeepCopy()
			tt.mut(n)
			if got := p.Update(event.UpdateEvent{ObjectOld: base, ObjectNew: n}); got != tt.want {
				t.Errorf("Update() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestSetupWithManager(t *testing.T) {
	mgr := ctrltest.UnstartedManager(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := &Reconciler{Client: mgr.GetClient(), Registry: newTestRegistry(t), View: clusterset.NewView(), ClusterID: thisID}
	if err := r.SetupWithManager(ctx, mgr); err != nil {
		t.Fatalf("SetupWithManager: %v", err)
	}
	if err := (&Reconciler{Client: mgr.GetClient()}).SetupWithManager(ctx, mgr); err == nil {
		t.Error("SetupWithManager accepted a Reconciler without Registry, View and ClusterID")
	}
}
