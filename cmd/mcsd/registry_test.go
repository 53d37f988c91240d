package main

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	corev1 "k8s.io/api/core/v1"

	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/etcd"
	"github.com/mcsd-io/mcsd/pkg/registry/etcd/embedded"
	"github.com/mcsd-io/mcsd/pkg/registry/etcd/embedded/embeddedtest"
)

// syncBuffer is a bytes.Buffer a running command writes to while the test
// reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func execute(t *testing.T, args ...string) (string, error) {
	t.Helper()
	// No kubeconfig of the machine's: mcsd status would read its cluster.
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
	var out bytes.Buffer
	cmd := newRootCommand()
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	err := cmd.ExecuteContext(t.Context())
	return out.String(), err
}

var (
	web  = registry.ServiceKey{Namespace: "shop", Name: "web"}
	spec = registry.ServiceSpec{Type: registry.ClusterSetIP, Ports: []registry.Port{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}}
)

// TestSecureTryOut starts the try-out registry with --secure-dir and uses
// what it prints: each cluster's certificate writes its own records only,
// and the reader's shows them.
func TestSecureTryOut(t *testing.T) {
	certs := filepath.Join(t.TempDir(), "certs")
	out := startRegistry(t, "mcsd status", "--secure-dir", certs, "--clusterset", "prod", "--cluster", "east", "--cluster", "west")
	text := out.String()
	m := regexp.MustCompile(`--registry (etcds://127\.0\.0\.1:\d+)\n`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("no etcds URL in\n%s", text)
	}
	for _, want := range []string{
		"kubectl -n mcsd-system create secret generic mcsd-registry-etcd --from-file=ca.crt=" + filepath.Join(certs, "ca.crt") +
			" --from-file=tls.crt=" + filepath.Join(certs, "cluster-east.crt") + " --from-file=tls.key=" + filepath.Join(certs, "cluster-east.key"),
		"# cluster west (etcd user mcsd:prod:west):",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	endpoint := "https://" + strings.TrimPrefix(m[1], "etcds://")
	opts := func(cluster, cert string) etcd.Options {
		return etcd.Options{Identity: registry.Identity{ClusterSet: "prod", Cluster: cluster}, Endpoints: []string{endpoint},
			CAFile: filepath.Join(certs, "ca.crt"), CertFile: filepath.Join(certs, cert+".crt"), KeyFile: filepath.Join(certs, cert+".key")}
	}
	east, err := etcd.New(t.Context(), opts("east", "cluster-east"))
	if err != nil {
		t.Fatal(err)
	}
	defer east.Close()
	if err := east.PutExport(t.Context(), web, spec); err != nil {
		t.Fatal(err)
	}
	if _, err := etcd.New(t.Context(), opts("east", "cluster-west")); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("west's certificate opens east: %v, want permission denied", err)
	}
	status, err := execute(t, "status", "--registry", m[1], "--clusterset", "prod", "--registry-ca", filepath.Join(certs, "ca.crt"),
		"--registry-cert", filepath.Join(certs, "reader.crt"), "--registry-key", filepath.Join(certs, "reader.key"))
	if err != nil || !strings.Contains(status, "east") || !strings.Contains(status, "shop/web") {
		t.Errorf("status as the reader: %v\n%s", err, status)
	}
	// Misconfigured clients are told at once what to change.
	ca := filepath.Join(certs, "ca.crt")
	plainURL := "etcd://" + strings.TrimPrefix(m[1], "etcds://")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"etcd:// to a TLS registry", []string{"--registry", plainURL}, "use etcds://"},
		{"no CA", []string{"--registry", m[1]}, "--registry-ca"},
		{"no client certificate", []string{"--registry", m[1], "--registry-ca", ca}, "--registry-cert and --registry-key"},
		{"a certificate without the grant", []string{"--registry", m[1], "--registry-ca", ca, "--clusterset", "other",
			"--registry-cert", filepath.Join(certs, "cluster-east.crt"), "--registry-key", filepath.Join(certs, "cluster-east.key")},
			"needs read on /mcsd/other/clusters/"},
	} {
		args := append([]string{"status", "--timeout", "20s"}, tc.args...)
		if !slices.Contains(args, "--clusterset") {
			args = append(args, "--clusterset", "prod")
		}
		if out, err := execute(t, args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("status, %s: %v, want an error saying %q\n%s", tc.name, err, tc.want, out)
		}
	}
	// The reader may count leases too (etcd does not restrict them).
	if !strings.Contains(status, "Leases: 1 in the registry, 0 holding nothing.") {
		t.Errorf("status as the reader lacks the leases line:\n%s", status)
	}
}

// startRegistry runs `mcsd registry` on free loopback ports with args until
// the test ends, and returns its output once it has printed ready.
func startRegistry(t *testing.T, ready string, args ...string) *syncBuffer {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	out := &syncBuffer{}
	cmd := newRootCommand()
	cmd.SetArgs(append([]string{"registry", "--data-dir", filepath.Join(t.TempDir(), "etcd"),
		"--listen-client-url", "http://127.0.0.1:0", "--listen-peer-url", "http://127.0.0.1:0"}, args...))
	cmd.SetOut(out)
	cmd.SetErr(out)
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("registry: %v", err)
		}
	})
	poll.Until(t, 30*time.Second, "the registry's instructions", func() (bool, string) {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("registry stopped: %v\n%s", err, out)
		default:
		}
		return strings.Contains(out.String(), ready), out.String()
	})
	return out
}

// TestSetupAuth prepares a plain etcd with passwords and auth, then again.
func TestSetupAuth(t *testing.T) {
	srv := embeddedtest.Start(t, embedded.Config{})
	url := registryURL(srv.ClientURL())
	out, err := execute(t, "registry", "setup-auth", "--registry", url, "--clusterset", "prod", "--cluster", "east",
		"--passwords", "--enable-auth", "--root-password", "secret")
	if err != nil {
		t.Fatalf("setup-auth: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`user mcsd:prod:east \(created\): readwrite /mcsd/prod/clusters/east/, read /mcsd/prod/clusters/, password (\S+)\n`).FindStringSubmatch(out)
	if m == nil || !strings.Contains(out, "user mcsd-reader:prod (created): readwrite -, read /mcsd/prod/clusters/, password ") ||
		!strings.HasSuffix(out, "etcd auth enabled\n") {
		t.Fatalf("setup-auth output:\n%s", out)
	}
	opts := etcd.Options{Identity: registry.Identity{ClusterSet: "prod", Cluster: "east"}, Endpoints: []string{srv.ClientURL()},
		Username: "mcsd:prod:east", Password: m[1]}
	b, err := etcd.New(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.PutExport(t.Context(), web, spec); err != nil {
		t.Fatal(err)
	}
	opts.Identity.Cluster = "west"
	if _, err := etcd.New(t.Context(), opts); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("east's user opens west: %v, want permission denied", err)
	}

	// Again, as root (named in the environment), with another cluster: the
	// users are kept.
	t.Setenv("MCSD_REGISTRY_USERNAME", "root")
	t.Setenv("MCSD_REGISTRY_PASSWORD", "secret")
	out, err = execute(t, "registry", "setup-auth", "--registry", url,
		"--clusterset", "prod", "--cluster", "east", "--cluster", "west", "--passwords")
	if err != nil || !strings.Contains(out, "user mcsd:prod:east (kept)") || !strings.Contains(out, "user mcsd:prod:west (created)") ||
		strings.Contains(out, "enabled") {
		t.Errorf("setup-auth again: %v\n%s", err, out)
	}
	// Without root's credentials once auth is on: refused.
	t.Setenv("MCSD_REGISTRY_USERNAME", "")
	t.Setenv("MCSD_REGISTRY_PASSWORD", "")
	if out, err := execute(t, "registry", "setup-auth", "--registry", url, "--clusterset", "prod", "--cluster", "x"); err == nil {
		t.Errorf("setup-auth without credentials succeeded:\n%s", out)
	}
}
