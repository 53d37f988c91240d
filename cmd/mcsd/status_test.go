package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
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
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
	for _, tc := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"--registry", "etcd://127.0.0.1:1"}, "give --clusterset"},
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

// TestStatusKubeconfig: mcsd status finds the cluster as kubectl does.
func TestStatusKubeconfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config")
	data := `apiVersion: v1
kind: Config
clusters:
- {name: one, cluster: {server: "https://127.0.0.1:6441"}}
- {name: two, cluster: {server: "https://127.0.0.1:6442"}}
users:
- {name: u, user: {token: x}}
contexts:
- {name: c1, context: {cluster: one, user: u}}
- {name: c2, context: {cluster: two, user: u}}
current-context: c2
`
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", path)
	for _, tc := range []struct {
		path, context, want string
	}{
		{"", "", "https://127.0.0.1:6442"},   // $KUBECONFIG, its current context
		{"", "c1", "https://127.0.0.1:6441"}, // $KUBECONFIG, --context
		{path, "c1", "https://127.0.0.1:6441"},
	} {
		cfg, err := kubeconfig(tc.path, tc.context)
		if err != nil || cfg.Host != tc.want {
			t.Errorf("kubeconfig(%q, %q): %v, %v; want host %s", tc.path, tc.context, cfg, err, tc.want)
		}
	}
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
	if _, err := kubeconfig("", ""); !clientcmd.IsEmptyConfig(err) {
		t.Errorf("no kubeconfig: %v, want an empty config", err)
	}
}
