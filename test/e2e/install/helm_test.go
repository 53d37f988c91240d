package install

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	fw "github.com/mcsd-io/mcsd/test/framework"
)

// chartCRDs are the CRDs the chart installs.
var chartCRDs = []string{"clusterproperties.about.k8s.io", "serviceexports.multicluster.x-k8s.io", "serviceimports.multicluster.x-k8s.io"}

// The chart's CRDs follow helm upgrade and outlive helm uninstall, with the
// pinned helm against a testbed API server: the release adopts the CRDs
// already there (as README's upgrade step says), an upgrade with a changed
// CRD changes it in the cluster, and helm uninstall removes the release but
// keeps the CRDs and the ServiceImports stored in them.
func TestHelmUpgradesAndKeepsCRDs(t *testing.T) {
	fw.NeedEnv(t, env)
	const release, ns = "mcsd-helm", "mcsd-helm"
	c := env.TB.Cluster("c2")
	cl := crdClient(t, c.Config)
	ctx := context.Background()
	run := func(args ...string) {
		t.Helper()
		if _, err := helm(t, append([]string{"--kubeconfig", c.Kubeconfig}, args...)...); err != nil {
			t.Fatal(err)
		}
	}
	values := []string{"--namespace", ns, "--set", "registry.etcd.tls.enabled=false", "--set", "registry.etcd.endpoints={127.0.0.1:2379}"}

	// The testbed installed the CRDs; let the release adopt them.
	for _, name := range chartCRDs {
		patch := fmt.Sprintf(`{"metadata":{"labels":{"app.kubernetes.io/managed-by":"Helm"},`+
			`"annotations":{"meta.helm.sh/release-name":%q,"meta.helm.sh/release-namespace":%q}}}`, release, ns)
		crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := cl.Patch(ctx, crd, client.RawPatch("application/merge-patch+json", []byte(patch))); err != nil {
			t.Fatalf("adopt CRD %s: %v", name, err)
		}
	}
	run(append([]string{"install", release, "charts/mcsd", "--create-namespace"}, values...)...)
	t.Cleanup(func() { _, _ = helm(t, "--kubeconfig", c.Kubeconfig, "uninstall", release, "--namespace", ns) })
	for _, name := range chartCRDs {
		if got := getCRD(t, cl, name).Annotations["helm.sh/resource-policy"]; got != "keep" {
			t.Errorf("CRD %s after install: helm.sh/resource-policy %q, want keep", name, got)
		}
	}

	// An import stored in the CRD, to outlive the uninstall.
	importNS := "helm-keep"
	apply(t, ctx, cl, manifests{namespace(importNS)})
	si := &mcsv1beta1.ServiceImport{
		ObjectMeta: metav1.ObjectMeta{Namespace: importNS, Name: "kept"},
		Spec:       mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.Headless, Ports: []mcsv1beta1.ServicePort{{Name: "http", Port: 80}}},
	}
	if err := cl.Create(ctx, si); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}

	// Upgrade with a chart whose ServiceImport CRD gains a label and a
	// printer column.
	chart := copyChart(t)
	crdFile := filepath.Join(chart, "files/crds/multicluster.x-k8s.io_serviceimports.yaml")
	changeFile(t, crdFile, "  labels:\n", "  labels:\n    mcsd.io/upgrade-test: \"v2\"\n")
	changeFile(t, crdFile, "  - additionalPrinterColumns:\n", "  - additionalPrinterColumns:\n"+
		"    - name: Upgraded\n      type: string\n      jsonPath: .metadata.name\n")
	run(append([]string{"upgrade", release, chart}, values...)...)
	crd := getCRD(t, cl, "serviceimports.multicluster.x-k8s.io")
	if crd.Labels["mcsd.io/upgrade-test"] != "v2" {
		t.Errorf("CRD labels after upgrade: %v", crd.Labels)
	}
	for _, v := range crd.Spec.Versions {
		if !hasColumn(v.AdditionalPrinterColumns, "Upgraded") {
			t.Errorf("CRD version %s printer columns after upgrade: %+v", v.Name, v.AdditionalPrinterColumns)
		}
	}

	// Uninstall: the release's objects go, the CRDs and the import stay.
	run("uninstall", release, "--namespace", ns)
	if err := cl.Get(ctx, client.ObjectKey{Name: release + "-manager"}, &rbacv1.ClusterRole{}); !apierrors.IsNotFound(err) {
		t.Errorf("ClusterRole %s-manager after uninstall: %v, want NotFound", release, err)
	}
	for _, name := range chartCRDs {
		getCRD(t, cl, name)
	}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(si), &mcsv1beta1.ServiceImport{}); err != nil {
		t.Errorf("ServiceImport after uninstall: %v", err)
	}
}

// crdClient is an administrator's client that knows CRDs too.
func crdClient(t *testing.T, cfg *rest.Config) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, mcsv1beta1.Install} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	cl, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

func getCRD(t *testing.T, cl client.Client, name string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := cl.Get(context.Background(), client.ObjectKey{Name: name}, crd); err != nil {
		t.Fatalf("CRD %s: %v", name, err)
	}
	return crd
}

func hasColumn(cols []apiextensionsv1.CustomResourceColumnDefinition, name string) bool {
	for _, c := range cols {
		if c.Name == name {
			return true
		}
	}
	return false
}

// copyChart copies charts/mcsd into a temporary directory.
func copyChart(t *testing.T) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "mcsd")
	if err := os.CopyFS(dst, os.DirFS(repoPath(t, "charts/mcsd"))); err != nil {
		t.Fatal(err)
	}
	return dst
}

// changeFile replaces every old in path with new, and fails if old is not
// there.
func changeFile(t *testing.T, path, old, new string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), old) {
		t.Fatalf("%s has no %q", path, old)
	}
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(string(b), old, new)), 0o644); err != nil {
		t.Fatal(err)
	}
}
