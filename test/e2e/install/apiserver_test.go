package install

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcsd-io/mcsd/internal/manager"
	fw "github.com/mcsd-io/mcsd/test/framework"
	"github.com/mcsd-io/mcsd/test/testbed"
)

// fieldOwner is the field manager of what the tests apply.
const fieldOwner = client.FieldOwner("mcsd-install-test")

// Every rendering is accepted by a real API server (server-side dry run):
// schemas, defaulting and admission included. The namespace and the CRDs are
// applied for real, so that what lives in the namespace and the custom
// resources validate.
func TestManifestsAcceptedByAPIServer(t *testing.T) {
	fw.NeedEnv(t, env)
	renders := map[string]func(t *testing.T) manifests{
		"helm etcd":     func(t *testing.T) manifests { return helmTemplate(t, helmEtcd...) },
		"helm cloudmap": func(t *testing.T) manifests { return helmTemplate(t, helmCloudMap...) },
	}
	for _, dir := range kustomizations {
		renders[dir] = func(t *testing.T) manifests { return kustomize(t, repoPath(t, dir)) }
	}
	cl := adminClient(t, env.TB.Cluster("c1"))
	for name, render := range renders {
		t.Run(name, func(t *testing.T) {
			m := render(t)
			ctx := context.Background()
			apply(t, ctx, cl, m.ofKind("Namespace"))
			apply(t, ctx, cl, m.ofKind("CustomResourceDefinition"))
			if len(m.ofKind("Namespace")) == 0 {
				apply(t, ctx, cl, manifests{namespace("mcsd-system")})
			}
			for _, u := range m {
				if u.GetKind() == "Namespace" || u.GetKind() == "CustomResourceDefinition" {
					continue
				}
				if err := cl.Apply(ctx, client.ApplyConfigurationFromUnstructured(u.DeepCopy()), fieldOwner, client.ForceOwnership, client.DryRunAll); err != nil {
					t.Errorf("%s %s/%s rejected: %v", u.GetKind(), u.GetNamespace(), u.GetName(), err)
				}
			}
		})
	}
}

// apply applies objects for real (server-side apply).
func apply(t testing.TB, ctx context.Context, cl client.Client, m manifests) {
	t.Helper()
	for _, u := range m {
		if err := cl.Apply(ctx, client.ApplyConfigurationFromUnstructured(u.DeepCopy()), fieldOwner, client.ForceOwnership); err != nil {
			t.Fatalf("apply %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
}

func namespace(name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("v1")
	u.SetKind("Namespace")
	u.SetName(name)
	return u
}

// adminClient is a client for c as its administrator.
func adminClient(t testing.TB, c *testbed.Cluster) client.Client {
	t.Helper()
	cl, err := client.New(c.Config, client.Options{Scheme: manager.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}
