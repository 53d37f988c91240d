package harness

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mcsd-io/mcsd/test/bench/report"
	"github.com/mcsd-io/mcsd/test/testbed"
)

// clockTicks is USER_HZ, the unit of /proc's CPU times: 100 on Linux.
const clockTicks = 100

// ProcCPU returns the CPU seconds (user + system) process pid has used.
func ProcCPU(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command may hold spaces and parentheses: the fields start after the last ')'.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	utime, err1 := strconv.ParseFloat(f[11], 64)
	stime, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	return (utime + stime) / clockTicks, nil
}

// ProcPeakRSS returns VmHWM of process pid: its peak resident set, bytes.
func ProcPeakRSS(pid int) (uint64, error) {
	return statusField(fmt.Sprintf("/proc/%d/status", pid), "VmHWM:")
}

// ProcRSS returns VmRSS of process pid: its resident set now, bytes.
func ProcRSS(pid int) (uint64, error) {
	return statusField(fmt.Sprintf("/proc/%d/status", pid), "VmRSS:")
}

func statusField(path, field string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, field) {
			continue
		}
		fs := strings.Fields(line[len(field):])
		if len(fs) == 0 {
			break
		}
		kb, err := strconv.ParseUint(fs[0], 10, 64)
		if err != nil {
			return 0, err
		}
		return kb * 1024, nil
	}
	return 0, fmt.Errorf("%s: no %s", path, field)
}

// SelfCPU returns the CPU seconds this process has used.
func SelfCPU() float64 { return selfCPU() }

// selfCPU returns the CPU seconds this process has used.
func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

// MachineBusy returns the busy CPU seconds of all CPUs since boot.
func MachineBusy() float64 {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return 0
	}
	var total, idle float64
	for i, v := range f[1:] {
		n, _ := strconv.ParseFloat(v, 64)
		if i >= 8 { // guest time is already in user
			break
		}
		total += n
		if i == 3 || i == 4 { // idle, iowait
			idle += n
		}
	}
	return (total - idle) / clockTicks
}

// TestbedCPU returns the CPU seconds of the processes running from dir (the
// testbed's), by kind: kube-apiserver, etcd, kube-controller-manager, ...
func TestbedCPU(dir string) map[string]float64 {
	out := map[string]float64{}
	for pid, argv0 := range testbed.ProcessesUnder(dir) {
		cpu, err := ProcCPU(pid)
		if err != nil {
			continue
		}
		out[filepath.Base(argv0)] += cpu
	}
	return out
}

// MachineInfo describes this machine.
func MachineInfo() report.Machine {
	m := report.Machine{NProc: runtime.NumCPU(), GoVersion: runtime.Version()}
	m.MemTotal, _ = statusField("/proc/meminfo", "MemTotal:")
	if data, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(data))
	}
	if data, err := os.ReadFile("/proc/loadavg"); err == nil {
		f := strings.Fields(string(data))
		if len(f) >= 3 {
			m.LoadAvg = strings.Join(f[:3], " ")
		}
	}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	return m
}

// loadAvg1 is the one-minute load average.
func loadAvg1() float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// CheckLoad fails when the one-minute load average is above limit: other
// work on the machine would skew the figures.
func CheckLoad(limit float64) error {
	if l := loadAvg1(); l > limit {
		return fmt.Errorf("the one-minute load average is %.2f, above %.2f: other work would skew the figures; wait or raise -max-load", l, limit)
	}
	return nil
}

// Settle readies the machine for a timed phase: it collects this process's
// garbage, whose collection at N = 100 simulated members takes seconds of
// CPU and would otherwise fall in a phase at random, then waits, up to
// timeout, until the machine's CPUs were busy less than SettledCores over
// a second. It returns the busy cores of that last second (more than
// SettledCores when timeout passed first).
func Settle(ctx context.Context, timeout time.Duration) (float64, error) {
	runtime.GC()
	deadline := time.Now().Add(timeout)
	for {
		before := MachineBusy()
		if err := Sleep(ctx, time.Second); err != nil {
			return 0, err
		}
		busy := MachineBusy() - before
		if busy < SettledCores || time.Now().After(deadline) {
			return busy, nil
		}
	}
}

// SettledCores is the machine's busy CPUs that Settle waits to fall under:
// the testbed's clusters and 100 idle simulated members keep 0.1 to 0.2
// busy on the 2-CPU machine.
const SettledCores = 0.3
