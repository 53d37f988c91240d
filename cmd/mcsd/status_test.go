package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestRegistryURL(t *testing.T) {
	for _, tc := range []struct {
		url     string
		wantErr string
	}{
		{"etcd://127.0.0.1:2379", ""},
		{"etcds://a:2379,b:2379/prefix", ""},
		{"cloudmap://?region=eu-west-1&poll-interval=5s", ""},
		{"", "--registry is required"},
		{"etcd://", "names no etcd endpoint"},
		{"zk://127.0.0.1", `unknown scheme "zk" (known: cloudmap, etcd, etcds)`},
		{"cloudmap://?rate=RegisterInstance:x:1", "rate="},
	} {
		b, err := openRegistryURL(&registryFlags{url: tc.url})
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%q: %v", tc.url, err)
		case tc.wantErr == "" && (b.Open == nil || b.OpenWatcher == nil):
			t.Errorf("%q: backend without open or watch", tc.url)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%q: error %v, want one containing %q", tc.url, err, tc.wantErr)
		}
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
