package framework

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/mcsd-io/mcsd/test/testbed"
)

// RepoPath returns the absolute path of a repository file.
func RepoPath(t testing.TB, rel string) string {
	t.Helper()
	root, err := testbed.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, rel)
}

var (
	helmOnce sync.Once
	helmPath string
	helmErr  error
)

// HelmBinary returns the pinned helm, built by `make helm` the first time.
func HelmBinary(t testing.TB) string {
	t.Helper()
	helmOnce.Do(func() {
		var stdout, stderr bytes.Buffer
		cmd := exec.Command("make", "-s", "--no-print-directory", "helm")
		cmd.Dir = RepoPath(t, ".")
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			helmErr = fmt.Errorf("make helm: %w: %s", err, stderr.String())
			return
		}
		lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
		helmPath = lines[len(lines)-1]
	})
	if helmErr != nil {
		t.Fatal(helmErr)
	}
	return helmPath
}

// Helm runs the pinned helm in the repository root and returns its stdout.
func Helm(t testing.TB, args ...string) ([]byte, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(HelmBinary(t), args...)
	cmd.Dir = RepoPath(t, ".")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}
