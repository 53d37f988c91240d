package registry

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// The id rule. Every part of mcsd that takes a cluster or clusterset id (the
// controller from its ClusterProperties, the backends, mcsd registry,
// setup-auth, mcsd status) checks it with ValidateClusterID or
// ValidateClusterSetID, and nothing else.
const (
	// MaxClusterSetIDLength is the longest clusterset id: KEP-2149's limit
	// for a ClusterProperty value used as an id.
	MaxClusterSetIDLength = 128
	// MaxClusterIDLength is the longest cluster id. KEP-2149 allows 128,
	// but a cluster id is also the value of the source-cluster label of
	// every EndpointSlice mcsd imports, and a label value has at most 63
	// characters: a longer id would be refused by every importer.
	MaxClusterIDLength = validation.LabelValueMaxLength

	// IDRule says what an id must be, for messages.
	IDRule = "lowercase letters, digits, '-' and '.', starting and ending with a letter or digit (a DNS subdomain)"
)

// ValidateClusterID reports whether id can be a cluster id: a DNS subdomain
// of at most MaxClusterIDLength characters. The error names the id and the
// rule.
func ValidateClusterID(id string) error {
	return validateID("cluster", id, MaxClusterIDLength)
}

// ValidateClusterSetID reports whether id can be a clusterset id: a DNS
// subdomain of at most MaxClusterSetIDLength characters. The error names
// the id and the rule.
func ValidateClusterSetID(id string) error {
	return validateID("clusterset", id, MaxClusterSetIDLength)
}

func validateID(kind, id string, maxLen int) error {
	if id == "" {
		return fmt.Errorf("%s id is empty: it must be %s, of at most %d characters", kind, IDRule, maxLen)
	}
	if len(id) > maxLen {
		return fmt.Errorf("%s id %q is %d characters long: it must be %s, of at most %d characters", kind, id, len(id), IDRule, maxLen)
	}
	if errs := dns1123Subdomain(id); len(errs) > 0 {
		return fmt.Errorf("%s id %q is invalid (%s): it must be %s, of at most %d characters", kind, id, strings.Join(errs, "; "), IDRule, maxLen)
	}
	return nil
}
