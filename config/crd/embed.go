package crd

import (
	_ "embed"
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

//go:embed bases/about.k8s.io_clusterproperties.yaml
var clusterPropertyCRD []byte

//go:embed bases/multicluster.x-k8s.io_serviceexports.yaml
var serviceExportCRD []byte

//go:embed bases/multicluster.x-k8s.io_serviceimports.yaml
var serviceImportCRD []byte

// All returns every CRD mcsd needs, as config/crd/bases holds them:
// ServiceExport and ServiceImport (the mcs-api module's, with mcsd's printer
// columns: hack/mcscrds), and ClusterProperty.
func All() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, data := range [][]byte{serviceExportCRD, serviceImportCRD, clusterPropertyCRD} {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(data, crd); err != nil {
			return nil, fmt.Errorf("decode CRD: %w", err)
		}
		out = append(out, crd)
	}
	return out, nil
}
