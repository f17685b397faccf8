package wasmhost

import (
	"fmt"
	"math"
	"strconv"
	"sync"
	"testing"
)

// TestSharedDataCASRules pins proxy-wasm-cpp-host's shared-data semantics on
// the Go API. Each step names the wrong implementation it rules out.
func TestSharedDataCASRules(t *testing.T) {
	s := NewSharedData()
	if _, _, st := s.Get("a"); st != StatusNotFound {
		t.Fatalf("get missing: status %v, want NotFound", st)
	}
	// A missing key is created whatever cas is passed (no create-if-absent).
	if st := s.Set("a", []byte("1"), 12345); st != StatusOK {
		t.Fatalf("set missing key with nonzero cas: %v, want OK (there is no create-if-absent)", st)
	}
	v, cas, st := s.Get("a")
	if st != StatusOK || string(v) != "1" || cas != 1 {
		t.Fatalf("get a = %q cas %d %v, want \"1\" cas 1 (the counter starts at 1)", v, cas, st)
	}
	// The counter is global: another key takes the next value, not 1.
	s.Set("b", []byte("x"), 0)
	if _, cas, _ := s.Get("b"); cas != 2 {
		t.Fatalf("cas of b = %d, want 2 (one counter for the whole store, not per key)", cas)
	}
	// cas 0 overwrites an existing key unconditionally.
	if st := s.Set("a", []byte("2"), 0); st != StatusOK {
		t.Fatalf("set existing with cas 0: %v, want OK (cas 0 overwrites)", st)
	}
	if v, cas, _ := s.Get("a"); string(v) != "2" || cas != 3 {
		t.Fatalf("a = %q cas %d, want \"2\" cas 3", v, cas)
	}
	// A stale cas is rejected and changes nothing (not even the counter).
	if st := s.Set("a", []byte("3"), 1); st != StatusCasMismatch {
		t.Fatalf("set with stale cas: %v, want CasMismatch", st)
	}
	if v, cas, _ := s.Get("a"); string(v) != "2" || cas != 3 {
		t.Fatalf("after mismatch a = %q cas %d, want unchanged \"2\" cas 3", v, cas)
	}
	// The current cas succeeds and the key takes the next counter value.
	if st := s.Set("a", []byte("4"), 3); st != StatusOK {
		t.Fatalf("set with current cas: %v", st)
	}
	if _, cas, _ := s.Get("a"); cas != 4 {
		t.Fatalf("cas after matching set = %d, want 4 (the mismatch must not consume a value)", cas)
	}
	// Empty values are values: the key stays.
	s.Set("b", nil, 0)
	if v, _, st := s.Get("b"); st != StatusOK || len(v) != 0 {
		t.Fatalf("empty value: %q %v", v, st)
	}
	if got := s.Keys(); fmt.Sprint(got) != "[a b]" || s.Len() != 2 {
		t.Fatalf("keys %v len %d", got, s.Len())
	}
	if s.Bytes() != len("a")+len("4")+len("b") {
		t.Fatalf("bytes = %d, want %d", s.Bytes(), 3)
	}
	// Get returns a copy.
	v, _, _ = s.Get("a")
	v[0] = 'X'
	if v2, _, _ := s.Get("a"); string(v2) != "4" {
		t.Fatalf("Get does not copy: %q", v2)
	}
}

// TestSharedDataCASWrap checks that the counter wraps to 1, never 0.
func TestSharedDataCASWrap(t *testing.T) {
	s := NewSharedData()
	s.setNextCAS(math.MaxUint32 - 1)
	want := []uint32{math.MaxUint32 - 1, math.MaxUint32, 1, 2}
	for i, w := range want {
		s.Set("k", []byte(strconv.Itoa(i)), 0)
		if _, cas, _ := s.Get("k"); cas != w {
			t.Fatalf("set %d: cas %d, want %d (0 is skipped on wrap)", i, cas, w)
		}
	}
	// With cas 0 never handed out, a cas of 0 can only mean "overwrite".
	if st := s.Set("k", []byte("z"), 2); st != StatusOK {
		t.Fatalf("set with current cas after wrap: %v", st)
	}
}

func TestSharedDataFaults(t *testing.T) {
	s := NewSharedData()
	s.Set("k", []byte("v"), 0)

	s.InjectFaults(Faults{GetFailRate: 1, GetFailStatus: StatusBadArgument})
	if _, _, st := s.get([]byte("k"), nil); st != StatusBadArgument {
		t.Fatalf("get with GetFailRate 1: %v, want the configured BadArgument", st)
	}
	if _, _, st := s.Get("k"); st != StatusOK {
		t.Fatalf("the Go API must not see faults: %v", st)
	}
	s.InjectFaults(Faults{SetFailRate: 1})
	if st := s.set("k", nil, []byte("w"), 0, true); st != StatusInternalFailure {
		t.Fatalf("set with SetFailRate 1: %v, want InternalFailure (the default)", st)
	}
	if v, _, _ := s.Get("k"); string(v) != "v" {
		t.Fatalf("a failed set wrote %q", v)
	}

	s.InjectFaults(Faults{CASMismatchRate: 1})
	_, cas, _ := s.Get("k")
	if st := s.set("k", nil, []byte("w"), cas, true); st != StatusCasMismatch {
		t.Fatalf("forced mismatch with matching cas: %v", st)
	}
	if st := s.set("k", nil, []byte("w"), 0, true); st != StatusOK {
		t.Fatalf("cas 0 cannot mismatch: %v", st)
	}
	if st := s.set("new", nil, []byte("w"), 77, true); st != StatusOK {
		t.Fatalf("a missing key cannot mismatch: %v", st)
	}
	if c := s.Injected(); c.CASMismatches != 1 {
		t.Fatalf("injected = %+v", c)
	}

	// Rates: about half, and the same seed gives the same sequence.
	pattern := func(seed int64) string {
		s.InjectFaults(Faults{GetFailRate: 0.5, Seed: seed})
		b := make([]byte, 1000)
		for i := range b {
			_, _, st := s.get([]byte("k"), nil)
			b[i] = '0' + byte(st)
		}
		return string(b)
	}
	p1, p2, p3 := pattern(1), pattern(1), pattern(2)
	if p1 != p2 {
		t.Fatal("same seed, different faults")
	}
	if p1 == p3 {
		t.Fatal("different seeds, same faults")
	}
	if c := s.Injected(); c.GetFailures < 400 || c.GetFailures > 600 {
		t.Fatalf("rate 0.5 gave %d failures of 1000", c.GetFailures)
	}
	s.InjectFaults(Faults{})
	if _, _, st := s.get([]byte("k"), nil); st != StatusOK {
		t.Fatalf("faults off: %v", st)
	}
}

// TestSharedDataConcurrentCAS: many goroutines CAS-increment one key; every
// successful set is one increment, so none may be lost.
func TestSharedDataConcurrentCAS(t *testing.T) {
	s := NewSharedData()
	s.Set("n", []byte("0"), 0)
	const workers, each = 8, 200
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; {
				v, cas, _ := s.Get("n")
				n, _ := strconv.Atoi(string(v))
				if s.Set("n", []byte(strconv.Itoa(n+1)), cas) == StatusOK {
					i++
				}
			}
		}()
	}
	wg.Wait()
	if v, _, _ := s.Get("n"); string(v) != strconv.Itoa(workers*each) {
		t.Fatalf("n = %s, want %d", v, workers*each)
	}
}

// TestGuestSharedData runs the same rules through the ABI from a Go guest on
// two VMs (the store is shared).
func TestGuestSharedData(t *testing.T) {
	h := newHost(t, Config{Clock: NewManualClock(t0), VMs: 2})
	vm0, vm1 := h.VM(0), h.VM(1)
	steps := []struct {
		vm   *VM
		cmd  string
		want string
	}{
		{vm0, "get k", "err:NotFound"},
		{vm0, "set k a 999", "ok"}, // missing key: any cas
		{vm1, "get k", "ok:a:1"},   // shared, counter starts at 1
		{vm1, "set other x 0", "ok"},
		{vm0, "get other", "ok:x:2"}, // global counter
		{vm1, "set k b 0", "ok"},     // cas 0 overwrites
		{vm0, "get k", "ok:b:3"},
		{vm0, "set k c 1", "err:CasMismatch"},
		{vm1, "get k", "ok:b:3"},
		{vm1, "set k c 3", "ok"},
		{vm0, "get k", "ok:c:4"},
		{vm0, "set empty _ 0", "ok"},
		{vm1, "get empty", "ok::5"},
	}
	for _, s := range steps {
		if got := one(t, s.vm, s.cmd); got != s.want {
			t.Fatalf("vm %d %q = %q, want %q", s.vm.ID(), s.cmd, got, s.want)
		}
	}
	if v, cas, _ := h.SharedData().Get("k"); string(v) != "c" || cas != 4 {
		t.Fatalf("host view: %q %d", v, cas)
	}
}

func TestGuestSharedDataWrap(t *testing.T) {
	h := newHost(t, Config{Clock: NewManualClock(t0)})
	h.SharedData().setNextCAS(math.MaxUint32)
	vm := h.VM(0)
	if got := results(t, vm, "set k a 0;get k;set k b 0;get k"); fmt.Sprint(got) != "[ok ok:a:4294967295 ok ok:b:1]" {
		t.Fatalf("wrap through the guest: %v", got)
	}
}

func TestGuestSharedDataFaults(t *testing.T) {
	h := newHost(t, Config{Clock: NewManualClock(t0)})
	vm := h.VM(0)
	one(t, vm, "set k v 0")
	h.SharedData().InjectFaults(Faults{GetFailRate: 1, GetFailStatus: StatusInternalFailure})
	if got := one(t, vm, "get k"); got != "err:InternalFailure" {
		t.Fatalf("get with faults: %q", got)
	}
	h.SharedData().InjectFaults(Faults{SetFailRate: 1, SetFailStatus: StatusBadArgument})
	if got := one(t, vm, "set k w 0"); got != "err:BadArgument" {
		t.Fatalf("set with faults: %q", got)
	}
	h.SharedData().InjectFaults(Faults{CASMismatchRate: 1})
	if got := results(t, vm, "get k;set k w 1;set k w 0"); fmt.Sprint(got) != "[ok:v:1 err:CasMismatch ok]" {
		t.Fatalf("forced CAS mismatch: %v", got)
	}
	// Rate 0.5 through the guest, reproducible by seed.
	count := func() int {
		h.SharedData().InjectFaults(Faults{GetFailRate: 0.5, Seed: 7})
		n := 0
		for i := 0; i < 200; i++ {
			if one(t, vm, "get k") != "ok:w:2" {
				n++
			}
		}
		return n
	}
	a, b := count(), count()
	if a != b || a < 60 || a > 140 {
		t.Fatalf("rate 0.5 with seed 7: %d then %d failures of 200", a, b)
	}
}

// TestGuestConcurrentCAS: VMs on their own goroutines CAS-increment one key
// through the guest; no increment may be lost (run with -race).
func TestGuestConcurrentCAS(t *testing.T) {
	const vms, each = 4, 50
	h := newHost(t, Config{Clock: NewManualClock(t0), VMs: vms})
	h.SharedData().Set("n", []byte("0"), 0)
	var wg sync.WaitGroup
	errs := make(chan error, vms*each)
	for _, vm := range h.VMs() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				res, err := vm.HTTP(t.Context(), &Request{Headers: []Header{{"x-probe", "incr n"}}})
				if err != nil {
					errs <- err
					return
				}
				if r := resultsOf(res.UpstreamHeaders, "x-r"); len(r) != 1 || r[0][:3] != "ok:" {
					errs <- fmt.Errorf("incr: %v", r)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if v, _, _ := h.SharedData().Get("n"); string(v) != strconv.Itoa(vms*each) {
		t.Fatalf("n = %s, want %d", v, vms*each)
	}
}

// TestSharedDataWritesInPlace: a set reuses the stored value's memory, so
// every read must hand out a copy: a value read earlier never changes.
func TestSharedDataWritesInPlace(t *testing.T) {
	s := NewSharedData()
	s.Set("k", []byte("first value"), 0)
	got, _, _ := s.Get("k")
	guest, _, _ := s.get([]byte("k"), nil)
	in := []byte("second")
	s.Set("k", in, 0)
	in[0] = 'X' // the store keeps its own copy of what it was given
	if string(got) != "first value" || string(guest) != "first value" {
		t.Fatalf("earlier reads changed: %q, %q", got, guest)
	}
	if v, _, _ := s.Get("k"); string(v) != "second" {
		t.Fatalf("value %q, want second", v)
	}
	if s.Bytes() != len("k")+len("second") {
		t.Fatalf("Bytes() = %d", s.Bytes())
	}
}
