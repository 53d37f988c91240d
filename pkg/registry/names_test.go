package registry

import (
	"math/rand/v2"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// TestNameChecksAgreeWithKubernetes: each name check accepts and refuses
// what Kubernetes' own does, on chosen cases and on random strings of the
// characters that matter, around every length limit.
func TestNameChecksAgreeWithKubernetes(t *testing.T) {
	checks := []struct {
		name      string
		ours, k8s func(string) []string
		longest   int
	}{
		{"DNS-1123 label", dns1123Label, validation.IsDNS1123Label, validation.DNS1123LabelMaxLength},
		{"DNS-1035 label", dns1035Label, validation.IsDNS1035Label, validation.DNS1035LabelMaxLength},
		{"DNS-1123 subdomain", dns1123Subdomain, validation.IsDNS1123Subdomain, validation.DNS1123SubdomainMaxLength},
		{"label value", labelValue, validation.IsValidLabelValue, validation.LabelValueMaxLength},
	}
	chosen := []string{
		"", "a", "A", "0", "-", ".", "_", "a-b", "a--b", "-a", "a-", "a.b", "a..b", ".a", "a.", "a_b", "0a", "a0",
		"zone-1", "us-east-1a", "Zone_A.1", "m001", "ns-0", "svc-1050", "node-1.example.com", "a.-b", "a-.b",
		"é", "a b", "a\x00", strings.Repeat("a", 63), strings.Repeat("a", 64), strings.Repeat("a.", 126) + "a",
		strings.Repeat("a", 253), strings.Repeat("a", 254), strings.Repeat("a", 62) + "-",
	}
	// Mostly names' own characters, so that both answers come often.
	alphabets := []string{"abz09", "abz09-", "abz09-.", "abz09AZ-._ "}
	rng := rand.New(rand.NewPCG(1, 2))
	random := func(longest int) string {
		n := rng.IntN(8)
		if rng.IntN(4) == 0 {
			n = longest - 2 + rng.IntN(4) // around the limit
		}
		alphabet := alphabets[rng.IntN(len(alphabets))]
		b := make([]byte, n)
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return string(b)
	}
	for _, c := range checks {
		cases := append([]string(nil), chosen...)
		for range 20000 {
			cases = append(cases, random(c.longest))
		}
		accepted := 0
		for _, s := range cases {
			ours, theirs := c.ours(s), c.k8s(s)
			if (len(ours) == 0) != (len(theirs) == 0) {
				t.Errorf("%s %q: ours %v, Kubernetes' %v", c.name, s, ours, theirs)
			}
			if len(theirs) == 0 {
				accepted++
			}
		}
		// Both answers, each many times.
		if accepted < len(cases)/10 || accepted > len(cases)*9/10 {
			t.Errorf("%s: %d of %d cases accepted: too one-sided to compare", c.name, accepted, len(cases))
		}
	}
}
