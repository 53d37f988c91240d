package registry

import "k8s.io/apimachinery/pkg/util/validation"

// The name checks of every record a controller reads. Kubernetes' own
// (k8s.io/apimachinery/pkg/util/validation) match a regular expression,
// about 3 µs each; a record of 10 endpoints takes 14 of them, and a
// controller reading 30,000 records spent a tenth of its first read there.
// Each check below accepts exactly what Kubernetes' accepts
// (TestNameChecksAgreeWithKubernetes), and asks Kubernetes' for the
// message of what it refuses.

// dns1123Label is validation.IsDNS1123Label.
func dns1123Label(s string) []string {
	if len(s) <= validation.DNS1123LabelMaxLength && isLabel(s, isLowerAlnum) {
		return nil
	}
	return validation.IsDNS1123Label(s)
}

// dns1035Label is validation.IsDNS1035Label.
func dns1035Label(s string) []string {
	if len(s) <= validation.DNS1035LabelMaxLength && isLabel(s, isLowerAlnum) && isLower(s[0]) {
		return nil
	}
	return validation.IsDNS1035Label(s)
}

// dns1123Subdomain is validation.IsDNS1123Subdomain.
func dns1123Subdomain(s string) []string {
	if len(s) <= validation.DNS1123SubdomainMaxLength && isSubdomain(s) {
		return nil
	}
	return validation.IsDNS1123Subdomain(s)
}

// labelValue is validation.IsValidLabelValue.
func labelValue(s string) []string {
	if s == "" || len(s) <= validation.LabelValueMaxLength && isLabelValue(s) {
		return nil
	}
	return validation.IsValidLabelValue(s)
}

// isLabel: one or more characters, each end one that end accepts, and '-'
// or what end accepts between.
func isLabel(s string, end func(byte) bool) bool {
	if s == "" || !end(s[0]) || !end(s[len(s)-1]) {
		return false
	}
	for i := 1; i < len(s)-1; i++ {
		if c := s[i]; c != '-' && !end(c) {
			return false
		}
	}
	return true
}

// isSubdomain: DNS-1123 labels joined by '.' (of any length each: the
// subdomain's length is checked alone).
func isSubdomain(s string) bool {
	for start := 0; ; {
		end := start
		for end < len(s) && s[end] != '.' {
			end++
		}
		if !isLabel(s[start:end], isLowerAlnum) {
			return false
		}
		if end == len(s) {
			return true
		}
		start = end + 1
	}
}

// isLabelValue: a non-empty label value, alphanumerics at both ends and
// '-', '_', '.' or alphanumerics between.
func isLabelValue(s string) bool {
	if !isAlnum(s[0]) || !isAlnum(s[len(s)-1]) {
		return false
	}
	for i := 1; i < len(s)-1; i++ {
		if c := s[i]; c != '-' && c != '_' && c != '.' && !isAlnum(c) {
			return false
		}
	}
	return true
}

func isLower(c byte) bool      { return 'a' <= c && c <= 'z' }
func isDigit(c byte) bool      { return '0' <= c && c <= '9' }
func isLowerAlnum(c byte) bool { return isLower(c) || isDigit(c) }
func isAlnum(c byte) bool      { return isLowerAlnum(c) || 'A' <= c && c <= 'Z' }
