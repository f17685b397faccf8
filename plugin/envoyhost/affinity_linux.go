package envoyhost

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// PinTo runs every thread of the host program on one CPU, and the threads
// it starts later with them (they inherit the mask). Benchmarks pin the
// hosts they compare to the same CPU: on a virtual machine two CPUs can
// differ in speed by half for minutes at a time (another guest on the
// core), so two identical hosts left on different CPUs measured 0.7x to
// 1.5x of each other, and 1.00x (0.99-1.03) pinned together.
func (h *Host) PinTo(cpu int) error {
	pid := h.c.cmd.Process.Pid
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return fmt.Errorf("pinning the host to CPU %d: %v", cpu, err)
	}
	var set unix.CPUSet
	set.Set(cpu)
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := pinThread(tid, &set); err != nil {
			return fmt.Errorf("pinning host thread %d to CPU %d: %v", tid, cpu, err)
		}
	}
	return nil
}

// pinThread sets a thread's CPU mask. A thread that ended since the task
// list was read is no error: the host's runtime starts and ends threads
// of its own (under valgrind, often).
func pinThread(tid int, set *unix.CPUSet) error {
	if err := unix.SchedSetaffinity(tid, set); err != nil && !errors.Is(err, unix.ESRCH) {
		return err
	}
	return nil
}

// BenchCPU is the CPU benchmarks pin their hosts to: SLUICE_ENVOYHOST_CPU
// when set (a CPU number, or "none" for no pinning), else the last CPU this
// process may run on; ok is false for no pinning.
func BenchCPU() (cpu int, ok bool, err error) {
	if s := os.Getenv("SLUICE_ENVOYHOST_CPU"); s != "" {
		if s == "none" {
			return 0, false, nil
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return 0, false, fmt.Errorf("SLUICE_ENVOYHOST_CPU=%q: want a CPU number or none", s)
		}
		return n, true, nil
	}
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return 0, false, nil // no affinity to read: leave the hosts where the kernel puts them
	}
	for cpu := 8*int(unsafe.Sizeof(set)) - 1; cpu >= 0; cpu-- {
		if set.IsSet(cpu) {
			return cpu, true, nil
		}
	}
	return 0, false, nil
}
