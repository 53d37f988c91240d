package imports

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/wellknown"
	"github.com/mcsd-io/mcsd/pkg/registry"
)

// Bounds of the names mcsd gives the objects it derives.
const (
	derivedPrefix  = "mcsd-"
	derivedHashLen = 10 // hex characters: 40 bits
	// maxNameLen keeps derived names valid DNS labels (RFC 1035), as Service
	// names must be.
	maxNameLen = 63
	// sliceNamePart bounds the import name and the cluster id in slice names.
	sliceNamePart = 24
)

// DerivedServiceName returns the name of the Service mcsd derives for the
// ClusterSetIP import of the Service called name: "mcsd-", as much of name as
// fits, "-" and a hash of the whole name. It is at most 63 characters, a
// valid Service name, readable, and distinct for distinct names (up to a
// 40-bit hash collision between names that also share the truncated prefix).
//
// The name depends only on the import's name, so it is the same after a
// restart and in every cluster; mcsd finds its derived Service again by name.
func DerivedServiceName(name string) string {
	keep := maxNameLen - len(derivedPrefix) - 1 - derivedHashLen
	return derivedPrefix + truncate(name, keep) + "-" + hash(name)[:derivedHashLen]
}

// derivedServiceOf returns the name of the derived Service of the import
// key whose ServiceImport is si (nil when there is none): the one its
// derived-service annotation names when mcsd adopted another party's
// Service (taken over from the AWS Cloud Map MCS controller, say), else
// DerivedServiceName. readDerivedService checks that it is mcsd's.
func derivedServiceOf(si *mcsv1beta1.ServiceImport, key registry.ServiceKey) string {
	if si != nil && isManaged(si) {
		if n := si.Annotations[wellknown.AnnotationDerivedService]; strings.HasPrefix(n, awsDerivedPrefix) {
			return n
		}
	}
	return DerivedServiceName(key.Name)
}

// sliceName returns the name of one EndpointSlice of an import: the import
// name and the source cluster (both shortened), and a hash of everything that
// tells the slices of the import apart (cluster, address type, ports, chunk).
// Deterministic, so that a restart finds the same slices; at most 63
// characters.
func sliceName(importName, cluster, group string, chunk int) string {
	h := hash(importName, cluster, group, strconv.Itoa(chunk))[:derivedHashLen]
	return truncate(importName, sliceNamePart) + "-" + truncate(dnsLabelChars(cluster), sliceNamePart) + "-" + h
}

// hash returns the hex SHA-256 of parts, each length-prefixed so that no two
// lists of parts hash alike by concatenation.
func hash(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(strconv.Itoa(len(p)) + ":" + p))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// truncate cuts s to at most n bytes. Kubernetes names are ASCII, so this
// never splits a character.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// dnsLabelChars maps a cluster id (a DNS subdomain, so possibly with dots) to
// characters that may appear in the middle of a DNS label: dots become
// hyphens, anything else unexpected becomes "x".
func dnsLabelChars(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-':
			return r
		case r >= 'A' && r <= 'Z':
			return r + ('a' - 'A')
		case r == '.':
			return '-'
		}
		return 'x'
	}, s)
}
