package harness

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// cpusOf is the CPUs every thread of process pid may run on.
func cpusOf(t *testing.T, pid int) CPUs {
	t.Helper()
	cpus, err := ProcessCPUs(pid)
	if err != nil {
		t.Fatal(err)
	}
	return cpus
}

func TestPinEveryThread(t *testing.T) {
	first, second, err := SplitCPUs()
	if errors.Is(err, ErrOneCPU) {
		// No two sets of CPUs to pin a process to and back. Skipped only
		// on a machine with one CPU online: CI's machines have two, and
		// a process held to one of several (a cpuset, taskset) fails.
		online, oerr := onlineCPUs()
		if oerr != nil || online > 1 {
			t.Fatalf("this process may run on one CPU alone (%v), on a machine of %d CPUs online (%v)", err, online, oerr)
		}
		t.Skipf("the machine has one CPU online, nothing to pin apart: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(first) == 0 || len(second) < len(first) || slices.ContainsFunc(first, func(c int) bool { return slices.Contains(second, c) }) {
		t.Fatalf("SplitCPUs: %v and %v", first, second)
	}
	// Another process, and this test's own (a Go program of several
	// threads).
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pids := []int{cmd.Process.Pid, os.Getpid()}
	all := append(slices.Clone(first), second...)
	t.Cleanup(func() {
		if err := Pin([]int{os.Getpid()}, all); err != nil {
			t.Error(err)
		}
	})
	if err := Pin(pids, first); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if got := cpusOf(t, pid); !slices.Equal(got, first) {
			t.Fatalf("process %d runs on %v after Pin to %v", pid, got, first)
		}
	}
	// A process started after takes the CPUs of this one's threads.
	child := exec.Command("sleep", "60")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	if got := cpusOf(t, child.Process.Pid); !slices.Equal(got, first) {
		t.Fatalf("a child started after Pin runs on %v, not %v", got, first)
	}
	if err := Pin(pids, all); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if got := cpusOf(t, pid); !slices.Equal(got, all) {
			t.Fatalf("process %d runs on %v after Pin to every CPU %v", pid, got, all)
		}
	}
	// A process that is not (past the kernel's largest pid) is skipped.
	if err := Pin([]int{1<<22 + 1}, first); err != nil {
		t.Fatalf("Pin of a process that is gone: %v", err)
	}
}

// onlineCPUs counts the machine's CPUs online, from
// /sys/devices/system/cpu/online ("0-1", "0,2-3").
func onlineCPUs() (int, error) {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return 0, err
	}
	n := 0
	for _, r := range strings.Split(strings.TrimSpace(string(b)), ",") {
		lo, hi, isRange := strings.Cut(r, "-")
		if !isRange {
			hi = lo
		}
		a, err1 := strconv.Atoi(lo)
		z, err2 := strconv.Atoi(hi)
		if err1 != nil || err2 != nil || z < a {
			return 0, fmt.Errorf("CPUs online %q: not a list of ranges", b)
		}
		n += z - a + 1
	}
	return n, nil
}
