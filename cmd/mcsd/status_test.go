package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestRegistryURL: the flags reach package backends, which knows the schemes
// (its own tests cover them).
func TestRegistryURL(t *testing.T) {
	b, err := openRegistryURL(&registryFlags{url: "etcd://127.0.0.1:2379"})
	if err != nil || b.Open == nil || b.OpenWatcher == nil {
		t.Errorf("etcd URL: backend %+v, err %v", b, err)
	}
	if _, err := openRegistryURL(&registryFlags{}); err == nil || !strings.Contains(err.Error(), "--registry is required") {
		t.Errorf("no URL: err %v, want --registry is required", err)
	}
	if _, err := openRegistryURL(&registryFlags{url: "zk://127.0.0.1"}); err == nil || !strings.Contains(err.Error(), `--registry: registry URL "zk://127.0.0.1": unknown scheme`) {
		t.Errorf("unknown scheme: err %v", err)
	}
}

func TestStatusFlags(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"--registry", "etcd://127.0.0.1:1"}, "--clusterset is required"},
		{[]string{"--registry", "etcd://127.0.0.1:1", "--clusterset", "prod", "-o", "yaml"}, `--output "yaml"`},
		{[]string{"--clusterset", "prod"}, "--registry is required"},
	} {
		cmd := newRootCommand()
		cmd.SetArgs(append([]string{"status"}, tc.args...))
		cmd.SetOut(&bytes.Buffer{})
		cmd.SetErr(&bytes.Buffer{})
		if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("status %v: %v, want an error containing %q", tc.args, err, tc.wantErr)
		}
	}
}
