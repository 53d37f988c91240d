package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
)

// zoneLogged finds kube-proxy's line for its node's zone, only in the lines
// of the current start (after from), and not for labels without a zone.
func TestZoneLogged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kube-proxy.log")
	if ok, err := zoneLogged(path, 0); ok || err != nil {
		t.Fatalf("no log yet: %v, %v; want false, nil", ok, err)
	}
	earlier := `I1129 00:33:20.219659   22343 proxier.go:849] "Updated proxier node topology labels" ipFamily="IPv4" labels={"topology.kubernetes.io/zone":"zone-a"}` + "\n"
	noZone := `I1129 00:34:20.219659   22344 proxier.go:849] "Updated proxier node topology labels" ipFamily="IPv4" labels={}` + "\n"
	other := `I1129 00:34:21.178829   22344 proxier.go:1138] "Syncing nftables rules" ipFamily="IPv4" fullSync=false` + "\n"
	if err := os.WriteFile(path, []byte(earlier+noZone+other), 0o644); err != nil {
		t.Fatal(err)
	}
	if ok, err := zoneLogged(path, 0); !ok || err != nil {
		t.Fatalf("whole log: %v, %v; want true, nil", ok, err)
	}
	from := int64(len(earlier))
	if ok, err := zoneLogged(path, from); ok || err != nil {
		t.Fatalf("the current start's lines, without a zone: %v, %v; want false, nil", ok, err)
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`I1129 00:34:21.2   22344 proxier.go:849] "Updated proxier node topology labels" ipFamily="IPv6" labels={"topology.kubernetes.io/zone":"zone-a"}` + "\n"); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	if ok, err := zoneLogged(path, from); !ok || err != nil {
		t.Fatalf("the current start's lines, with a zone: %v, %v; want true, nil", ok, err)
	}
}

// fakeProxy is a stand-in for kube-proxy under the agent's supervisor: each
// start counts itself in dir/starts and logs its node's zone when its
// number is in zoneOn, then runs until killed (exits at once, with crash).
func fakeProxy(t *testing.T, dir string, crash bool, zoneOn ...int) func() *exec.Cmd {
	t.Helper()
	on := ""
	for _, n := range zoneOn {
		on += fmt.Sprintf(" %d", n)
	}
	script := `n=$(cat starts 2>/dev/null || echo 0); n=$((n+1)); echo $n > starts
case "$ZONE_ON " in *" $n "*) echo 'I1129 00:33:20.2 1 proxier.go:849] "Updated proxier node topology labels" ipFamily="IPv4" labels={"topology.kubernetes.io/zone":"zone-a"}';; esac
[ -n "$CRASH" ] && exit 1
exec sleep 60`
	return func() *exec.Cmd {
		cmd := exec.Command("sh", "-c", script)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "ZONE_ON="+on)
		if crash {
			cmd.Env = append(cmd.Env, "CRASH=1")
		}
		return cmd
	}
}

func starts(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "starts"))
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// runKept supervises a fake kube-proxy with a zone keeper; learnt receives
// each time the keeper logs that a start learnt its zone after a miss.
func runKept(t *testing.T, wait time.Duration, crash bool, zoneOn ...int) (dir string, c *children, z *zoneKeeper, learnt <-chan struct{}) {
	t.Helper()
	dir = t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	c = &children{log: logr.Discard()}
	t.Cleanup(func() { cancel(); c.stopAll() })
	ch := make(chan struct{}, 10)
	log := funcr.New(func(_, args string) {
		if strings.Contains(args, "learnt its node's zone") {
			ch <- struct{}{}
		}
	}, funcr.Options{})
	z = newZoneKeeper(log, filepath.Join(dir, "kube-proxy.log"), func() { c.restart("kube-proxy") })
	z.wait = wait
	go z.run(ctx, func(context.Context) (bool, error) { return true, nil })
	c.run(ctx, "kube-proxy", z.path, fakeProxy(t, dir, crash, zoneOn...), z.started)
	return dir, c, z, ch
}

// A start of kube-proxy that misses its node's zone is followed by another,
// the first start's and one after a crash alike.
func TestZoneKeeperStartsKubeProxyAgain(t *testing.T) {
	dir, c, z, learnt := runKept(t, 500*time.Millisecond, false, 2, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := z.Ready(ctx); err != nil {
		t.Fatalf("first start: %v", err)
	}
	if n := starts(t, dir); n != 2 {
		t.Fatalf("ready after %d starts, want 2", n)
	}
	<-learnt
	// kube-proxy crashes; the supervisor's start misses the zone too, and
	// the keeper starts it again.
	c.restart("kube-proxy")
	select {
	case <-learnt:
	case <-ctx.Done():
		t.Fatalf("no start after the crash learnt its zone; %d starts", starts(t, dir))
	}
	if n := starts(t, dir); n != 4 {
		t.Fatalf("%d starts, want 4", n)
	}
}

// A kube-proxy that never logs its zone is reported after zoneStarts
// starts in a row: each start waited for in full, or each crashing before
// its wait is over (the wait longer than the supervisor's delays).
func TestZoneKeeperGivesUp(t *testing.T) {
	for _, tc := range []struct {
		name  string
		wait  time.Duration
		crash bool
	}{
		{"waited", 500 * time.Millisecond, false},
		{"crashing", 20 * time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, _, z, _ := runKept(t, tc.wait, tc.crash)
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			err := z.Ready(ctx)
			if err == nil || !strings.Contains(err.Error(), topologyLogged) {
				t.Fatalf("Ready: %v, want an error naming %q", err, topologyLogged)
			}
			// A crashing one may have started once more meanwhile.
			if n := starts(t, dir); n < zoneStarts || !tc.crash && n != zoneStarts {
				t.Fatalf("reported after %d starts, want %d", n, zoneStarts)
			}
		})
	}
}
