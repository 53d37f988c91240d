package export

import (
	"context"
	"net/http"
	"testing"

	"k8s.io/utils/ptr"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/event"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/clusterset"
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
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := mcsv1beta1.Install(scheme); err != nil {
		t.Fatal(err)
	}
	// The manager is built but never started: nothing reaches this address.
	mgr, err := ctrl.NewManager(&rest.Config{Host: "http://127.0.0.1:1"}, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		MapperProvider:         staticMapper,
		// Controller names are checked process-wide; with -count > 1 the
		// same test builds the controller again.
		Controller: ctrlconfig.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatalf("NewManager: %v", err)
	}
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

// staticMapper maps the kinds the controller indexes without asking an API
// server (there is none): the cache's indexes need their REST mapping when
// they are registered.
func staticMapper(*rest.Config, *http.Client) (meta.RESTMapper, error) {
	m := meta.NewDefaultRESTMapper(nil)
	m.Add(discoveryv1.SchemeGroupVersion.WithKind("EndpointSlice"), meta.RESTScopeNamespace)
	return m, nil
}
