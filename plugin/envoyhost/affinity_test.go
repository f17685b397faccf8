//go:build linux

package envoyhost

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sluice-rl/sluice/plugin/scenario"
	"github.com/sluice-rl/sluice/plugin/wasmhost/wasmtest"
)

// PinTo moves every thread of the host program, the VM's among them, to
// the CPU asked for.
func TestPinToPutsEveryThreadOfTheHostOnOneCPU(t *testing.T) {
	Require(t, FastJIT)
	path := filepath.Join(t.TempDir(), "empty.wasm")
	if err := os.WriteFile(path, wasmtest.Build(t, "./plugin/wasmhost/testdata/empty"), 0o644); err != nil {
		t.Fatal(err)
	}
	h, err := Start(FastJIT, scenario.Options{WasmPath: path})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	cpu, ok, err := BenchCPU()
	if err != nil || !ok {
		t.Skipf("no CPU to pin to: %v", err)
	}
	if err := h.PinTo(cpu); err != nil {
		t.Fatal(err)
	}
	if _, err := h.HTTP(0, scenario.Request{Headers: []scenario.Header{{":path", "/"}}}); err != nil {
		t.Fatal(err)
	}
	pid := h.c.cmd.Process.Pid
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + task.Name() + "/status")
		if errors.Is(err, fs.ErrNotExist) {
			continue // the thread ended since the listing
		}
		if err != nil {
			t.Fatal(err)
		}
		if got := allowedCPUs(string(status)); got != strconv.Itoa(cpu) {
			t.Errorf("thread %s may run on CPUs %q, want %d", task.Name(), got, cpu)
		}
	}
}

// A thread that ended while the host was being pinned is skipped; any
// other failure is reported.
func TestPinThreadSkipsAThreadThatEnded(t *testing.T) {
	var set unix.CPUSet
	set.Set(0)
	ended := 1 << 30 // above any thread ID Linux hands out (pid_max is at most 2^22)
	if err := pinThread(ended, &set); err != nil {
		t.Errorf("pinning a thread that ended: %v, want no error", err)
	}
	var none unix.CPUSet // no CPU at all: refused
	if err := pinThread(unix.Gettid(), &none); err == nil {
		t.Error("pinning to an empty CPU set succeeded, want an error")
	}
}

// allowedCPUs is the Cpus_allowed_list of a /proc status file.
func allowedCPUs(status string) string {
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func TestBenchCPUReadsItsVariable(t *testing.T) {
	for _, c := range []struct {
		env     string
		cpu     int
		pin, ok bool
	}{{"0", 0, true, true}, {"3", 3, true, true}, {"none", 0, false, true}, {"-1", 0, false, false}, {"one", 0, false, false}} {
		t.Setenv("SLUICE_ENVOYHOST_CPU", c.env)
		cpu, pin, err := BenchCPU()
		if (err == nil) != c.ok || cpu != c.cpu || pin != c.pin {
			t.Errorf("SLUICE_ENVOYHOST_CPU=%s: cpu %d, pin %v, err %v", c.env, cpu, pin, err)
		}
		if err != nil && !strings.Contains(err.Error(), "SLUICE_ENVOYHOST_CPU") {
			t.Errorf("error %q does not name the variable", err)
		}
	}
	t.Setenv("SLUICE_ENVOYHOST_CPU", "")
	if cpu, pin, err := BenchCPU(); err != nil || !pin || cpu < 0 {
		t.Errorf("unset: cpu %d, pin %v, err %v; want the last CPU this process may use", cpu, pin, err)
	}
}
