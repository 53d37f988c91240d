package netns

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Dir is where iproute2 keeps named network namespaces.
const Dir = "/run/netns"

// EtcDir is where `ip netns exec NAME` finds files it bind-mounts over
// /etc for processes in namespace NAME (resolv.conf, hosts).
const EtcDir = "/etc/netns"

// Prefix returns the prefix of every network namespace of the testbed whose
// state directory is stateDir: "tb" and six hex digits of its hash.
func Prefix(stateDir string) string {
	sum := sha256.Sum256([]byte(filepath.Clean(stateDir)))
	return "tb" + hex.EncodeToString(sum[:3])
}

// IP runs `ip args...` and returns its error with ip's own message.
func IP(ctx context.Context, args ...string) error {
	_, err := Output(ctx, "ip", args...)
	return err
}

// Output runs a command and returns its standard output; an error carries
// the command line and what it wrote on standard error.
func Output(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// Exists reports whether the named network namespace exists.
func Exists(name string) bool {
	_, err := os.Stat(filepath.Join(Dir, name))
	return err == nil
}

// Add creates the named network namespace with its loopback up; an existing
// one is kept.
func Add(ctx context.Context, name string) error {
	if !Exists(name) {
		if err := IP(ctx, "netns", "add", name); err != nil {
			return err
		}
	}
	return IP(ctx, "-n", name, "link", "set", "lo", "up")
}

// LinkExists reports whether a link of that name exists in the namespace.
func LinkExists(ctx context.Context, ns, link string) bool {
	return IP(ctx, "-n", ns, "link", "show", "dev", link) == nil
}

// Sysctl sets a sysctl of the namespace, such as net/ipv4/ip_forward: the
// net tree of /proc/sys is the reading process's namespace's own.
func Sysctl(ctx context.Context, ns, key, value string) error {
	path := "/proc/sys/" + strings.ReplaceAll(key, ".", "/")
	_, err := Output(ctx, "ip", "netns", "exec", ns, "sh", "-c", `printf %s "$1" > "$2"`, "sh", value, path)
	return err
}

// WriteEtc writes a file that processes run with `ip netns exec NAME` see
// at /etc/<file> (resolv.conf, hosts).
func WriteEtc(name, file string, data []byte) error {
	dir := filepath.Join(EtcDir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	if err := os.WriteFile(filepath.Join(dir, file), data, 0o644); err != nil {
		return fmt.Errorf("write %s of namespace %s: %w", file, name, err)
	}
	return nil
}

// Pids returns the processes in the namespace.
func Pids(ctx context.Context, name string) []int {
	out, err := Output(ctx, "ip", "netns", "pids", name)
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(out) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Delete kills every process in the namespace, then removes the namespace
// (with it its links, addresses, routes and nftables tables) and its /etc
// files. A namespace that does not exist is no error.
func Delete(ctx context.Context, name string) error {
	if Exists(name) {
		for range 50 {
			pids := Pids(ctx, name)
			if len(pids) == 0 {
				break
			}
			for _, pid := range pids {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			time.Sleep(20 * time.Millisecond) // the kernel reaps them asynchronously
		}
		if err := IP(ctx, "netns", "del", name); err != nil && Exists(name) {
			return err
		}
	}
	if err := os.RemoveAll(filepath.Join(EtcDir, name)); err != nil {
		return fmt.Errorf("remove /etc files of namespace %s: %w", name, err)
	}
	return nil
}

// List returns the names of the namespaces that start with prefix.
func List(prefix string) []string {
	entries, _ := os.ReadDir(Dir)
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) {
			out = append(out, e.Name())
		}
	}
	// /etc/netns entries whose namespace is already gone are listed too.
	etc, _ := os.ReadDir(EtcDir)
	for _, e := range etc {
		if strings.HasPrefix(e.Name(), prefix) && !Exists(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out
}

// DeleteAll deletes every namespace whose name starts with prefix.
func DeleteAll(ctx context.Context, prefix string) error {
	var errs []error
	for _, name := range List(prefix) {
		if err := Delete(ctx, name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
