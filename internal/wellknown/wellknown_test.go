package wellknown

import (
	"errors"
	"testing"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

// Every annotation mcsd sets on the objects it makes, and reads back from
// a ServiceImport, is one an export may not carry: an importer copies the
// exported annotations onto its ServiceImport (registry.ValidateSpec).
func TestAnnotationsMcsdSetsCannotBeExported(t *testing.T) {
	for _, key := range []string{
		AnnotationManaged, AnnotationDerivedService, AnnotationLegacyDerivedService, AnnotationServiceImport,
		AnnotationIPFamilies, AnnotationSliceInputs, AWSAnnotationDerivedService, AnnotationRetiring, AnnotationRetireAfter,
	} {
		spec := registry.ServiceSpec{Type: registry.ClusterSetIP, ExportedAnnotations: map[string]string{key: "x"}}
		var rej *registry.RejectedError
		if err := registry.ValidateSpec(spec); !errors.As(err, &rej) || rej.Reason != registry.RejectInvalid {
			t.Errorf("exported annotation %s: ValidateSpec = %v, want it refused as invalid", key, err)
		}
	}
}
