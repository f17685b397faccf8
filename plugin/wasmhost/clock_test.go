package wasmhost

import (
	"strconv"
	"testing"
	"time"
)

func atoi64(tb testing.TB, s string) int64 {
	tb.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		tb.Fatalf("not a number: %q", s)
	}
	return n
}

// TestGuestClock checks that Go's time.Now() in the guest follows the
// ManualClock shared by all VMs: frozen, advanced, stepped backwards (wall
// goes back, monotonic does not), and that a guest sleep advances the clock
// instead of blocking.
func TestGuestClock(t *testing.T) {
	clock := NewManualClock(t0)
	h := newHost(t, Config{Clock: clock, VMs: 2})
	vm0, vm1 := h.VM(0), h.VM(1)

	now := func(vm *VM) int64 { return atoi64(t, one(t, vm, "now")) }
	since := func(vm *VM) int64 { return atoi64(t, one(t, vm, "since")) }

	if got := now(vm0); got != t0.UnixNano() {
		t.Fatalf("guest time.Now() = %v, want the clock's %v", time.Unix(0, got).UTC(), t0)
	}
	s0 := since(vm0)
	if now(vm0) != t0.UnixNano() || now(vm1) != t0.UnixNano() || since(vm0) != s0 {
		t.Fatal("a frozen clock moved")
	}

	clock.Advance(1500 * time.Millisecond)
	if got := now(vm1); got != t0.Add(1500*time.Millisecond).UnixNano() {
		t.Fatalf("after Advance: %v", time.Unix(0, got).UTC())
	}
	if d := since(vm0) - s0; d != int64(1500*time.Millisecond) {
		t.Fatalf("monotonic advanced by %v, want 1.5s", time.Duration(d))
	}

	// Step realtime back an hour: time.Now().UnixNano() goes back, the
	// monotonic clock (time.Since) does not.
	back := t0.Add(-time.Hour)
	clock.Set(back)
	if got := now(vm0); got != back.UnixNano() {
		t.Fatalf("after Set backwards: %v, want %v", time.Unix(0, got).UTC(), back)
	}
	if d := since(vm0) - s0; d != int64(1500*time.Millisecond) {
		t.Fatalf("monotonic moved on a realtime step: %v", time.Duration(d))
	}
	clock.Advance(time.Second)
	if got := now(vm1); got != back.Add(time.Second).UnixNano() {
		t.Fatalf("advance after step back: %v", time.Unix(0, got).UTC())
	}

	// A guest sleep advances the manual clock and returns at once.
	start := time.Now()
	before := now(vm0)
	if got := results(t, vm0, "sleep 10m;now"); got[0] != "ok" || atoi64(t, got[1])-before < int64(10*time.Minute) {
		t.Fatalf("sleep: %v (before %d)", got, before)
	}
	if real := time.Since(start); real > 5*time.Second {
		t.Fatalf("a guest sleep under ManualClock took %v of real time", real)
	}
	if got := clock.Now().Sub(time.Unix(0, before)); got < 10*time.Minute {
		t.Fatalf("the shared clock advanced only %v during the guest's sleep", got)
	}
}

func TestSystemClock(t *testing.T) {
	h := newHost(t, Config{}) // default SystemClock
	got := time.Unix(0, atoi64(t, one(t, h.VM(0), "now")))
	if d := time.Since(got); d < -time.Second || d > 5*time.Second {
		t.Fatalf("guest now %v is %v away from the host's", got, d)
	}
	if got := results(t, h.VM(0), "since;sleep 20ms;since"); atoi64(t, got[2])-atoi64(t, got[0]) < int64(20*time.Millisecond) {
		t.Fatalf("monotonic during a real sleep: %v", got)
	}
}

func TestManualClockUnit(t *testing.T) {
	c := NewManualClock(t0)
	c.Advance(time.Second)
	c.Set(t0.Add(-time.Minute))
	c.Advance(-time.Second)
	if !c.Now().Equal(t0.Add(-time.Minute - time.Second)) {
		t.Fatalf("now %v", c.Now())
	}
	if c.Monotonic() != time.Second {
		t.Fatalf("monotonic %v, want 1s (only forward Advance moves it)", c.Monotonic())
	}
	// A Clock without Monotonic: derived and clamped.
	k := newClocks(clockFunc(func() time.Time { return c.Now() }))
	m0 := k.nanotime()
	c.Advance(time.Second)
	m1 := k.nanotime()
	c.Set(t0.Add(-24 * time.Hour))
	m2 := k.nanotime()
	if m1-m0 != int64(time.Second) || m2 != m1 {
		t.Fatalf("derived monotonic: %d %d %d", m0, m1, m2)
	}
	if m0 <= 0 {
		t.Fatal("nanotime must never be 0 (Go's runtime aborts)")
	}
}

type clockFunc func() time.Time

func (f clockFunc) Now() time.Time { return f() }
