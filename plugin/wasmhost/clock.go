package wasmhost

import (
	"sync"
	"sync/atomic"
	"time"
)

// Clock is shared by all VMs of a Host: the WASI realtime clock
// (clock_time_get REALTIME, which Go's time.Now reads for its wall reading)
// returns Now(), and the WASI monotonic clock is derived from it (see
// MonotonicClock). It must be goroutine-safe.
type Clock interface{ Now() time.Time }

// MonotonicClock may be implemented by a Clock to provide the WASI monotonic
// clock itself: Monotonic returns the time elapsed since an arbitrary fixed
// point and must never decrease. ManualClock implements it.
//
// For a Clock without it, the host derives the monotonic reading from Now()
// and clamps it so that it never goes backwards (a realtime step back freezes
// it until realtime catches up), as an operating system's CLOCK_MONOTONIC
// would not follow a wall-clock step either.
type MonotonicClock interface {
	Clock
	Monotonic() time.Duration
}

// ManualClock is a Clock that only moves when told to. It is goroutine-safe
// and cheap to read (atomics only).
//
// Realtime and monotonic readings are separate, as on a real machine:
// Advance moves both forward by d; Set steps realtime only (possibly
// backwards, like an NTP step), so the guest's monotonic clock, and with it
// Go's time.Since and Time.Sub between readings, never goes backwards while
// Time.Unix and friends do.
//
// A guest that sleeps (time.Sleep, poll_oneoff with a clock subscription)
// does not block the host: the sleep advances the clock by its duration,
// which is what the guest expects to observe afterwards.
type ManualClock struct {
	wall atomic.Int64 // unix nanoseconds
	mono atomic.Int64 // nanoseconds
}

// NewManualClock returns a ManualClock reading start.
func NewManualClock(start time.Time) *ManualClock {
	c := &ManualClock{}
	c.wall.Store(start.UnixNano())
	return c
}

// Now returns the clock's realtime reading (UTC, no monotonic reading).
func (c *ManualClock) Now() time.Time { return time.Unix(0, c.wall.Load()).UTC() }

// Monotonic returns the sum of all forward Advance steps (and guest sleeps).
func (c *ManualClock) Monotonic() time.Duration { return time.Duration(c.mono.Load()) }

// Advance moves the clock by d. A negative d steps realtime back and leaves
// the monotonic clock where it is.
func (c *ManualClock) Advance(d time.Duration) {
	c.wall.Add(int64(d))
	if d > 0 {
		c.mono.Add(int64(d))
	}
}

// Set steps the realtime clock to t, possibly backwards. The monotonic clock
// does not move.
func (c *ManualClock) Set(t time.Time) { c.wall.Store(t.UnixNano()) }

// sleep is what a guest's nanosleep does under a ManualClock.
func (c *ManualClock) sleep(ns int64) {
	if ns > 0 {
		c.Advance(time.Duration(ns))
	}
}

type systemClock struct{ start time.Time }

func (systemClock) Now() time.Time             { return time.Now() }
func (c systemClock) Monotonic() time.Duration { return time.Since(c.start) }
func (systemClock) sleep(ns int64)             { time.Sleep(time.Duration(ns)) }

var (
	sysClockOnce sync.Once
	sysClock     systemClock
)

// SystemClock returns the machine's clock (time.Now; the monotonic clock is
// Go's monotonic time since the first call).
func SystemClock() Clock {
	sysClockOnce.Do(func() { sysClock = systemClock{start: time.Now()} })
	return sysClock
}

// clocks adapts a Clock to the WASI walltime/nanotime/nanosleep hooks.
type clocks struct {
	c     Clock
	mono  MonotonicClock // nil: derive from c with clamping
	start time.Time
	last  atomic.Int64 // clamped monotonic reading
}

func newClocks(c Clock) *clocks {
	k := &clocks{c: c, start: c.Now()}
	k.last.Store(monoBase)
	if m, ok := c.(MonotonicClock); ok {
		k.mono = m
	}
	return k
}

func (k *clocks) walltime() (int64, int32) {
	ns := k.c.Now().UnixNano()
	sec, nsec := ns/1e9, ns%1e9
	if nsec < 0 {
		sec, nsec = sec-1, nsec+1e9
	}
	return sec, int32(nsec)
}

// monoBase offsets the WASI monotonic clock: the Go runtime refuses a
// nanotime of zero (a real monotonic clock counts from boot).
const monoBase = int64(time.Second)

func (k *clocks) nanotime() int64 {
	if k.mono != nil {
		return monoBase + int64(k.mono.Monotonic())
	}
	now := monoBase + int64(k.c.Now().Sub(k.start))
	for {
		last := k.last.Load()
		if now <= last {
			return last
		}
		if k.last.CompareAndSwap(last, now) {
			return now
		}
	}
}

func (k *clocks) nanosleep(ns int64) {
	if s, ok := k.c.(interface{ sleep(int64) }); ok {
		s.sleep(ns)
		return
	}
	// A foreign Clock: there is no way to know how it relates to real time.
	// Do not block the VM; the guest re-reads the clock and sleeps again if
	// it has not advanced, so yield a little real time to let it move.
	time.Sleep(time.Duration(min(ns, int64(time.Millisecond))))
}
