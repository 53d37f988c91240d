package core

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	"github.com/mcsd-io/mcsd/internal/wellknown"
	fw "github.com/mcsd-io/mcsd/test/framework"
)

// The ServiceExport's exportedLabels and exportedAnnotations, and only
// those, label and annotate the ServiceImport in every cluster; changing
// them changes the import.
func TestExportedLabelsAndAnnotations(t *testing.T) {
	ns, c1 := setUpTest(t, "exported-metadata")
	fw.Deploy(t, c1, fw.App{Namespace: ns, Name: "web", Replicas: 1})
	updateService(t, c1, ns, "web", func(svc *corev1.Service) {
		svc.Labels = map[string]string{"service-own": "yes"}
		svc.Annotations = map[string]string{"example.com/service-note": "yes"}
	})
	se := &mcsv1beta1.ServiceExport{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web",
			Labels:      map[string]string{"export-own": "yes"},
			Annotations: map[string]string{"example.com/export-note": "yes"}},
		Spec: mcsv1beta1.ServiceExportSpec{
			ExportedLabels:      map[string]string{"tier": "backend"},
			ExportedAnnotations: map[string]string{"example.com/owner": "team-a"},
		},
	}
	if err := c1.Create(context.Background(), se); err != nil {
		t.Fatal(err)
	}

	expect := func(what string, labels, annotations map[string]string) {
		t.Helper()
		inEveryCluster(t, what, func(id string, cl client.Client) (bool, string) {
			si := fw.GetImport(t, cl, ns, "web")
			if si == nil {
				return false, "no ServiceImport"
			}
			if !maps.Equal(si.Labels, labels) {
				return false, fmt.Sprintf("labels %v, want %v", si.Labels, labels)
			}
			// mcsd adds annotations of its own (multicluster.mcsd.io/...,
			// and multicluster.kubernetes.io/derived-service);
			// every other one must be exported.
			other := map[string]string{}
			for k, v := range si.Annotations {
				if !isMcsdAnnotation(k) {
					other[k] = v
				}
			}
			if !maps.Equal(other, annotations) {
				return false, fmt.Sprintf("annotations %v, want %v besides mcsd's", si.Annotations, annotations)
			}
			return true, ""
		})
	}
	expect("exported labels and annotations", se.Spec.ExportedLabels, se.Spec.ExportedAnnotations)

	poll.Until(t, timeout, "change exported labels", func() (bool, string) {
		cur := getExport(t, c1, ns, "web")
		cur.Spec.ExportedLabels = map[string]string{"tier": "frontend", "team": "a"}
		cur.Spec.ExportedAnnotations = nil
		err := c1.Update(context.Background(), cur)
		return err == nil, fmt.Sprint(err)
	})
	expect("changed exported labels", map[string]string{"tier": "frontend", "team": "a"}, map[string]string{})
}

// isMcsdAnnotation reports whether k is one of mcsd's own annotations.
func isMcsdAnnotation(k string) bool {
	return strings.HasPrefix(k, "multicluster.mcsd.io/") || k == wellknown.AnnotationDerivedService
}
