package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	mcscrd "sigs.k8s.io/mcs-api/config/crd"
	"sigs.k8s.io/yaml"
)

// TestOnlyColumnsChange checks that the CRDs mcsd ships are the module's
// but for the printer columns.
func TestOnlyColumnsChange(t *testing.T) {
	for _, data := range [][]byte{mcscrd.ServiceExportCRD, mcscrd.ServiceImportCRD} {
		out, err := withColumns(data)
		if err != nil {
			t.Fatal(err)
		}
		var upstream, ours apiextensionsv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(data, &upstream); err != nil {
			t.Fatal(err)
		}
		if err := yaml.UnmarshalStrict(out, &ours); err != nil {
			t.Fatal(err)
		}
		kind := upstream.Spec.Names.Kind
		for i := range ours.Spec.Versions {
			if d := cmp.Diff(columns[kind], ours.Spec.Versions[i].AdditionalPrinterColumns); d != "" {
				t.Errorf("%s %s columns (-want +got):\n%s", kind, ours.Spec.Versions[i].Name, d)
			}
			ours.Spec.Versions[i].AdditionalPrinterColumns = upstream.Spec.Versions[i].AdditionalPrinterColumns
		}
		if d := cmp.Diff(upstream, ours); d != "" {
			t.Errorf("%s differs from the module's beyond its columns (-module +ours):\n%s", kind, d)
		}
	}
}
