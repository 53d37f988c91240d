package imports

import (
	"context"
	"k8s.io/utils/ptr"
	"net/http"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/clusterset"
)

// TestSetupWithManager checks the wiring: the controller builds with its
// watches and registry source (nothing is started).
func TestSetupWithManager(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := mcsv1beta1.Install(scheme); err != nil {
		t.Fatal(err)
	}
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
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := &Reconciler{Client: mgr.GetClient(), View: clusterset.NewView(), ClusterID: "east"}
	if err := r.SetupWithManager(ctx, mgr); err != nil {
		t.Fatal(err)
	}
	if err := (&Reconciler{}).SetupWithManager(ctx, mgr); err == nil {
		t.Error("SetupWithManager without a client and view succeeded")
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
