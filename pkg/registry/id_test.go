package registry

import (
	"strings"
	"testing"
)

func TestIDRule(t *testing.T) {
	tests := []struct {
		id             string
		cluster, isSet bool // valid as a cluster id, as a clusterset id
		msg            string
	}{
		{id: "east", cluster: true, isSet: true},
		{id: "eu-west-1.prod", cluster: true, isSet: true},
		{id: "0a1b2c3d-kube-system-uid", cluster: true, isSet: true},
		{id: "", msg: "is empty"},
		{id: "a:b", msg: `"a:b" is invalid`},
		{id: "prod:a", msg: `"prod:a" is invalid`},
		{id: "East", msg: "lowercase letters"},
		{id: "a/b", msg: "DNS subdomain"},
		{id: "a_b", msg: "DNS subdomain"},
		{id: ".", msg: "DNS subdomain"},
		{id: "..", msg: "DNS subdomain"},
		{id: "-a", msg: "DNS subdomain"},
		{id: "a.", msg: "DNS subdomain"},
		{id: "a\x00b", msg: "DNS subdomain"},
		{id: strings.Repeat("a", 63), cluster: true, isSet: true},
		{id: strings.Repeat("a", 64), isSet: true, msg: "at most 63 characters"},
		{id: strings.Repeat("a.", 63) + "ab", isSet: true, msg: "at most 63 characters"},
		{id: strings.Repeat("a.", 64) + "a", msg: "characters long"},
	}
	for _, tc := range tests {
		name := tc.id
		if len(name) > 20 {
			name = name[:20] + "..."
		}
		t.Run(name, func(t *testing.T) {
			check := func(kind string, err error, valid bool) {
				t.Helper()
				if valid {
					if err != nil {
						t.Errorf("%s id %q: %v", kind, tc.id, err)
					}
					return
				}
				if err == nil {
					t.Fatalf("%s id %q accepted", kind, tc.id)
				}
				for _, want := range []string{kind + " id", IDRule} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("%s id %q: %q does not say %q", kind, tc.id, err, want)
					}
				}
				if tc.msg != "" && !strings.Contains(err.Error(), tc.msg) && (kind != "clusterset" || !tc.isSet) {
					t.Errorf("%s id %q: %q does not say %q", kind, tc.id, err, tc.msg)
				}
			}
			check("cluster", ValidateClusterID(tc.id), tc.cluster)
			check("clusterset", ValidateClusterSetID(tc.id), tc.isSet)
			if tc.cluster && tc.isSet {
				if err := (Identity{ClusterSet: tc.id, Cluster: tc.id}).Validate(); err != nil {
					t.Errorf("identity: %v", err)
				}
			}
		})
	}
}
