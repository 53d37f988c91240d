package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/etcd"
)

// TestIDRuleInCommands checks that every command that takes a cluster or
// clusterset id refuses one outside the id rule before it connects to
// anything, naming the id and the rule. The pairs are those whose etcd user
// names would collide under a looser rule: (prod, a:b) and (prod:a, b).
func TestIDRuleInCommands(t *testing.T) {
	dir := t.TempDir()
	// Nothing listens on port 1: a command that got as far as connecting
	// would fail with another error.
	const unreachable = "etcd://127.0.0.1:1"
	tests := []struct {
		name string
		args []string
		id   string
	}{
		{"setup-auth, cluster with a colon", []string{"registry", "setup-auth", "--registry", unreachable, "--clusterset", "prod", "--cluster", "a:b"}, "a:b"},
		{"setup-auth, clusterset with a colon", []string{"registry", "setup-auth", "--registry", unreachable, "--clusterset", "prod:a", "--cluster", "b"}, "prod:a"},
		{"setup-auth, upper case", []string{"registry", "setup-auth", "--registry", unreachable, "--clusterset", "prod", "--cluster", "East"}, "East"},
		{"try-out registry, cluster", []string{"registry", "--data-dir", filepath.Join(dir, "etcd"), "--secure-dir", filepath.Join(dir, "certs"),
			"--clusterset", "prod", "--cluster", "a:b"}, "a:b"},
		{"try-out registry, clusterset", []string{"registry", "--data-dir", filepath.Join(dir, "etcd"), "--secure-dir", filepath.Join(dir, "certs"),
			"--clusterset", "prod:a", "--cluster", "b"}, "prod:a"},
		{"status", []string{"status", "--registry", unreachable, "--clusterset", "prod:a"}, "prod:a"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := execute(t, tc.args...)
			if err == nil {
				t.Fatalf("accepted:\n%s", out)
			}
			for _, want := range []string{`"` + tc.id + `"`, registry.IDRule} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
		})
	}
}

// TestClusterUsersDistinct checks that no two valid (clusterset, cluster)
// pairs share an etcd user, and that none is the reader's.
func TestClusterUsersDistinct(t *testing.T) {
	ids := []string{"a", "b", "a.b", "a-b", "prod", "prod.a", "prod-a", "a.prod", "mcsd", "mcsd-reader", "reader", "x"}
	seen := map[string][2]string{}
	for _, set := range ids {
		seen[etcd.ReaderUser(set)] = [2]string{set, ""}
	}
	for _, set := range ids {
		for _, c := range ids {
			if err := (registry.Identity{ClusterSet: set, Cluster: c}).Validate(); err != nil {
				t.Fatalf("(%s, %s): %v", set, c, err)
			}
			u := etcd.ClusterUser(set, c)
			if prev, ok := seen[u]; ok {
				t.Errorf("(%s, %s) and %v share user %s", set, c, prev, u)
			}
			seen[u] = [2]string{set, c}
		}
	}
}
