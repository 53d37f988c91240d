// Package ctrltest holds what the controllers' unit tests share: a manager
// that is built but never started, to check a controller's wiring without an
// API server, and the events a fake recorder holds.
package ctrltest

import (
	"net/http"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// UnstartedManager returns a manager of Kubernetes' and the MCS API's kinds
// that is never started: nothing reaches the address it is given.
func UnstartedManager(t testing.TB) ctrl.Manager {
	t.Helper()
	mgr, err := ctrl.NewManager(&rest.Config{Host: "http://127.0.0.1:1"}, ctrl.Options{
		Scheme:                 Scheme(t),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		MapperProvider:         StaticMapper,
		// Controller names are checked process-wide; with -count > 1 the
		// same test builds the controller again.
		Controller: ctrlconfig.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatalf("NewManager: %v", err)
	}
	return mgr
}

// Scheme is a scheme of Kubernetes' kinds and the MCS API's.
func Scheme(t testing.TB) *runtime.Scheme {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := mcsv1beta1.Install(scheme); err != nil {
		t.Fatal(err)
	}
	return scheme
}

// StaticMapper maps the kinds the controllers watch without asking an API
// server (there is none): the cache's informers and indexes need their
// REST mapping when the controllers are built.
func StaticMapper(*rest.Config, *http.Client) (meta.RESTMapper, error) {
	m := meta.NewDefaultRESTMapper(nil)
	for _, gvk := range []schema.GroupVersionKind{
		discoveryv1.SchemeGroupVersion.WithKind("EndpointSlice"),
		corev1.SchemeGroupVersion.WithKind("Service"),
		mcsv1beta1.SchemeGroupVersion.WithKind("ServiceExport"),
		mcsv1beta1.SchemeGroupVersion.WithKind("ServiceImport"),
	} {
		m.Add(gvk, meta.RESTScopeNamespace)
	}
	for _, gvk := range []schema.GroupVersionKind{
		corev1.SchemeGroupVersion.WithKind("Namespace"),
		corev1.SchemeGroupVersion.WithKind("Node"),
	} {
		m.Add(gvk, meta.RESTScopeRoot)
	}
	return m, nil
}

// Events drains the events rec holds.
func Events(rec *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case ev := <-rec.Events:
			out = append(out, ev)
		default:
			return out
		}
	}
}

// ConditionTypes lists the types of conds, in their order.
func ConditionTypes(conds []metav1.Condition) []string {
	var out []string
	for _, c := range conds {
		out = append(out, c.Type)
	}
	return out
}
