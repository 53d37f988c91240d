package harness

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"
)

// CPUs is a set of the machine's CPUs, by number.
type CPUs []int

// ErrOneCPU is SplitCPUs' error where this process may run on one CPU
// alone.
var ErrOneCPU = errors.New("one CPU: nothing to split")

// SplitCPUs divides the CPUs this process may run on into two halves (the
// first the smaller of an odd count), as two machines would have them; it
// fails with ErrOneCPU on a machine of one CPU.
func SplitCPUs() (first, second CPUs, err error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, nil, fmt.Errorf("read this process's CPUs: %w", err)
	}
	all := cpusIn(&set)
	if len(all) < 2 {
		return nil, nil, fmt.Errorf("split the CPUs: %w", ErrOneCPU)
	}
	return all[:len(all)/2], all[len(all)/2:], nil
}

// ProcessCPUs is the CPUs every thread of process pid may run on; it fails
// when two of its threads may run on different CPUs.
func ProcessCPUs(pid int) (CPUs, error) {
	tids, err := threads(pid)
	if err != nil {
		return nil, err
	}
	var first CPUs
	for _, tid := range tids {
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(tid, &set); err != nil {
			if errors.Is(err, unix.ESRCH) {
				continue // ended
			}
			return nil, fmt.Errorf("the CPUs of thread %d of process %d: %w", tid, pid, err)
		}
		cpus := cpusIn(&set)
		if first == nil {
			first = cpus
		} else if !slices.Equal(cpus, first) {
			return nil, fmt.Errorf("thread %d of process %d runs on CPUs %v, another on %v", tid, pid, cpus, first)
		}
	}
	return first, nil
}

// threads are the thread ids of process pid.
func threads(pid int) ([]int, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return nil, fmt.Errorf("the threads of process %d: %w", pid, err)
	}
	tids := make([]int, 0, len(tasks))
	for _, t := range tasks {
		if tid, err := strconv.Atoi(t.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids, nil
}

func cpusIn(set *unix.CPUSet) CPUs {
	var cpus CPUs
	for cpu := range len(set) * 64 {
		if set.IsSet(cpu) {
			cpus = append(cpus, cpu)
		}
	}
	return cpus
}

// Pin makes every thread of each process of pids run on cpus alone. A
// thread takes its creator's CPUs, so the threads a process makes later
// follow; those it makes while they are set (a thread cloned from one not
// set yet) are found by looking again, until two looks in a row find none
// left to set. A process that ended meanwhile is skipped.
func Pin(pids []int, cpus CPUs) error {
	var set unix.CPUSet
	for _, cpu := range cpus {
		set.Set(cpu)
	}
	var errs []error
	for _, pid := range pids {
		if err := pinProcess(pid, &set); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func pinProcess(pid int, set *unix.CPUSet) error {
	clean := 0
	for range 20 {
		tids, err := threads(pid)
		if errors.Is(err, fs.ErrNotExist) {
			return nil // ended
		}
		if err != nil {
			return err
		}
		changed := false
		for _, tid := range tids {
			var now unix.CPUSet
			if unix.SchedGetaffinity(tid, &now) == nil && now == *set {
				continue
			}
			if err := unix.SchedSetaffinity(tid, set); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("set the CPUs of thread %d of process %d: %w", tid, pid, err)
			}
			changed = true
		}
		if changed {
			clean = 0
		} else if clean++; clean == 2 {
			return nil
		}
	}
	return fmt.Errorf("set the CPUs of process %d: it kept making threads", pid)
}
