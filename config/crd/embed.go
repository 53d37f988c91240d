package crd

import (
	_ "embed"
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	mcscrd "sigs.k8s.io/mcs-api/config/crd"
)

//go:embed bases/about.k8s.io_clusterproperties.yaml
var clusterPropertyCRD []byte

// All returns every CRD mcsd needs: ServiceExport and ServiceImport from the
// mcs-api module, and ClusterProperty.
func All() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, data := range [][]byte{mcscrd.ServiceExportCRD, mcscrd.ServiceImportCRD, clusterPropertyCRD} {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(data, crd); err != nil {
			return nil, fmt.Errorf("decode CRD: %w", err)
		}
		out = append(out, crd)
	}
	return out, nil
}
