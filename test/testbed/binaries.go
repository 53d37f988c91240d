package testbed

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// Binaries are the paths of the testbed's programs.
type Binaries struct {
	KubeAPIServer         string
	KubeControllerManager string
	KubeScheduler         string
	Kubectl               string
	Etcd                  string
	Kwok                  string
	Kwokctl               string
	CoreDNS               string
	// KubeProxy and Agnhost run on the data plane's nodes and in its pods.
	KubeProxy string
	Agnhost   string

	// Versions, as pinned in hack/testbed-versions.env.
	KubernetesVersion string
	EtcdVersion       string
	KwokVersion       string
	CoreDNSVersion    string
}

// RepoRoot returns the root of the mcsd repository this package was built from.
func RepoRoot() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if ok {
		root := filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
		if _, err := os.Stat(filepath.Join(root, "hack", "build-testbed.sh")); err == nil {
			return root, nil
		}
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find repository root: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "hack", "build-testbed.sh")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("find repository root: hack/build-testbed.sh not found above the working directory")
		}
		dir = parent
	}
}

// EnsureBinaries builds whatever testbed binary is missing from the cache
// (hack/build-testbed.sh; minutes on the first run, instant after) and
// returns their paths. Build progress goes to progress, if not nil.
func EnsureBinaries(ctx context.Context, progress io.Writer) (Binaries, error) {
	root, err := RepoRoot()
	if err != nil {
		return Binaries{}, err
	}
	if progress == nil {
		progress = io.Discard
	}
	var stdout bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "hack", "build-testbed.sh"))
	cmd.Dir = root
	cmd.Stdout = &stdout
	cmd.Stderr = progress
	if err := cmd.Run(); err != nil {
		return Binaries{}, fmt.Errorf("build testbed binaries (hack/build-testbed.sh): %w", err)
	}
	cache := strings.TrimSpace(stdout.String())
	versions, err := readVersions(filepath.Join(root, "hack", "testbed-versions.env"))
	if err != nil {
		return Binaries{}, err
	}
	k8s := filepath.Join(cache, "kubernetes", versions["KUBERNETES_VERSION"])
	kwok := filepath.Join(cache, "kwok", versions["KWOK_VERSION"])
	node := filepath.Join(cache, "kubernetes-node", versions["KUBERNETES_VERSION"])
	b := Binaries{
		KubeAPIServer:         filepath.Join(k8s, "kube-apiserver"),
		KubeControllerManager: filepath.Join(k8s, "kube-controller-manager"),
		KubeScheduler:         filepath.Join(k8s, "kube-scheduler"),
		Kubectl:               filepath.Join(k8s, "kubectl"),
		Etcd:                  filepath.Join(cache, "etcd", versions["ETCD_VERSION"], "etcd"),
		Kwok:                  filepath.Join(kwok, "kwok"),
		Kwokctl:               filepath.Join(kwok, "kwokctl"),
		CoreDNS:               filepath.Join(cache, "coredns", versions["COREDNS_VERSION"], "coredns"),
		KubeProxy:             filepath.Join(node, "kube-proxy"),
		Agnhost:               filepath.Join(node, "agnhost"),
		KubernetesVersion:     versions["KUBERNETES_VERSION"],
		EtcdVersion:           versions["ETCD_VERSION"],
		KwokVersion:           versions["KWOK_VERSION"],
		CoreDNSVersion:        versions["COREDNS_VERSION"],
	}
	for _, p := range []string{b.KubeAPIServer, b.KubeControllerManager, b.KubeScheduler, b.Kubectl, b.Etcd, b.Kwok, b.Kwokctl, b.CoreDNS, b.KubeProxy, b.Agnhost} {
		if _, err := os.Stat(p); err != nil {
			return Binaries{}, fmt.Errorf("testbed binary missing after build: %w", err)
		}
	}
	return b, nil
}

func readVersions(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read testbed versions: %w", err)
	}
	defer func() { _ = f.Close() }()
	out := map[string]string{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := strings.TrimSpace(s.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if ok {
			out[k] = v
		}
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("read testbed versions: %w", err)
	}
	for _, k := range []string{"KUBERNETES_VERSION", "ETCD_VERSION", "KWOK_VERSION", "COREDNS_VERSION"} {
		if out[k] == "" {
			return nil, fmt.Errorf("read testbed versions: %s is not set in %s", k, path)
		}
	}
	return out, nil
}
