package core

import (
	"context"
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	fw "github.com/mcsd-io/mcsd/test/framework"
)

// A namespace created in a cluster after the export exists gets the import.
func TestImportInNamespaceCreatedLater(t *testing.T) {
	t.Parallel()
	ns := "late-namespace"
	c1, c2, c3 := env.Client(t, "c1"), env.Client(t, "c2"), env.Client(t, "c3")
	fw.EnsureNamespace(t, c2, ns)
	want := deployExported(t, c1, fw.App{Namespace: ns, Name: "web", Replicas: 2})

	imported := func(id string, cl client.Client) (bool, string) {
		si := fw.GetImport(t, cl, ns, "web")
		if si == nil {
			return false, "no ServiceImport"
		}
		if si.Spec.Type != mcsv1beta1.ClusterSetIP || len(si.Spec.IPs) != 1 {
			return false, fmt.Sprintf("type %s, IPs %v", si.Spec.Type, si.Spec.IPs)
		}
		if got := fw.ReadyAddresses(importedSlices(t, cl, ns, "web")["c1"]); !slices.Equal(got, want) {
			return false, fmt.Sprintf("endpoints from c1 %v, want %v", got, want)
		}
		return true, ""
	}
	for id, cl := range map[string]client.Client{"c1": c1, "c2": c2} {
		poll.Until(t, timeout, "import in "+id, func() (bool, string) { return imported(id, cl) })
	}
	if err := c3.Get(context.Background(), client.ObjectKey{Name: ns}, &corev1.Namespace{}); !apierrors.IsNotFound(err) {
		t.Fatalf("namespace %s in c3 before the test created it: %v", ns, err)
	}

	fw.EnsureNamespace(t, c3, ns)
	poll.Until(t, timeout, "import in c3", func() (bool, string) { return imported("c3", c3) })
}
