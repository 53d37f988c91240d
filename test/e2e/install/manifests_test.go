package install

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	fw "github.com/mcsd-io/mcsd/test/framework"
)

// Values that select each registry in the Helm chart, as the Makefile's
// helm-lint and manifests-render use them.
var (
	helmEtcd []string
	// helmEtcdPassword authenticates to etcd with a password, as
	// config/overlays/etcd-password does.
	helmEtcdPassword = []string{"--set", "registry.etcd.tls.clientCertificate=false", "--set", "registry.etcd.auth.secretName=mcsd-registry-etcd-auth"}
	helmCloudMap     = []string{"--set", "registry.type=cloudmap", "--set", "registry.cloudmap.region=eu-west-1",
		"--set", "serviceAccount.annotations.eks\\.amazonaws\\.com/role-arn=arn:aws:iam::111122223333:role/mcsd"}
)

// manifests are rendered objects.
type manifests []*unstructured.Unstructured

// repoPath returns the absolute path of a repository file.
func repoPath(t testing.TB, rel string) string { return fw.RepoPath(t, rel) }

// kustomize builds a kustomization directory as kubectl apply -k does.
func kustomize(t testing.TB, dir string) manifests {
	t.Helper()
	opts := krusty.MakeDefaultOptions()
	opts.Reorder = krusty.ReorderOptionLegacy
	res, err := krusty.MakeKustomizer(opts).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out, err := res.AsYaml()
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	return decode(t, out)
}

// helm runs the pinned helm in the repository root and returns its stdout.
func helm(t testing.TB, args ...string) ([]byte, error) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs the pinned helm (make helm); skipped with -short")
	}
	return fw.Helm(t, args...)
}

// helmTemplate renders the chart as release mcsd in namespace mcsd-system,
// CRDs included.
func helmTemplate(t testing.TB, values ...string) manifests {
	t.Helper()
	out, err := helm(t, append([]string{"template", "mcsd", "charts/mcsd", "--namespace", "mcsd-system"}, values...)...)
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, out)
}

// decode splits a YAML stream into objects, skipping empty documents.
func decode(t testing.TB, data []byte) manifests {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out manifests
	for {
		u := &unstructured.Unstructured{}
		err := dec.Decode(&u.Object)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("decode manifests: %v", err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

// ofKind returns the objects of a kind.
func (m manifests) ofKind(kind string) manifests {
	var out manifests
	for _, u := range m {
		if u.GetKind() == kind {
			out = append(out, u)
		}
	}
	return out
}

// only converts the only object of m of T's kind (the type's name:
// Deployment, ConfigMap, ...) into a new T.
func only[T any](t testing.TB, m manifests) *T {
	t.Helper()
	kind := reflect.TypeFor[T]().Name()
	objs := m.ofKind(kind)
	if len(objs) != 1 {
		t.Fatalf("want one %s, have %d", kind, len(objs))
	}
	obj := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(objs[0].Object, obj); err != nil {
		t.Fatalf("convert %s: %v", kind, err)
	}
	return obj
}
