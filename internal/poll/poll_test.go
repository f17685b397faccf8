package poll

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// recorder is a testing.TB that records a Fatalf instead of stopping.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
}

func TestUntilReturnsOnceTheConditionHolds(t *testing.T) {
	var calls atomic.Int32
	r := &recorder{TB: t}
	Until(r, "the third call", func() bool { return calls.Add(1) == 3 })
	if r.failed != "" || calls.Load() != 3 {
		t.Fatalf("failed %q after %d calls, want success on the third", r.failed, calls.Load())
	}
}

func TestUntilFailsNamingWhatItWaitedFor(t *testing.T) {
	r := &recorder{TB: t}
	Within(r, 30*time.Millisecond, "a condition that never holds", func() bool { return false })
	if r.failed != "timed out waiting for a condition that never holds" {
		t.Fatalf("failure %q", r.failed)
	}
}

func TestWatchFailsWithWhatTheLastCheckSaw(t *testing.T) {
	var calls atomic.Int32
	r := &recorder{TB: t}
	Watch(r, 30*time.Millisecond, time.Millisecond, "the node to ACK v3", func() (bool, string) {
		return false, fmt.Sprintf("acked v%d", calls.Add(1))
	})
	want := fmt.Sprintf("timed out after 30ms waiting for the node to ACK v3; last seen: acked v%d", calls.Load())
	if calls.Load() < 2 || r.failed != want {
		t.Fatalf("failure %q after %d checks, want %q", r.failed, calls.Load(), want)
	}
}

func TestWatchPacesItsChecksByTheInterval(t *testing.T) {
	var calls atomic.Int32
	r := &recorder{TB: t}
	Watch(r, 100*time.Millisecond, 40*time.Millisecond, "a condition that never holds", func() (bool, string) {
		calls.Add(1)
		return false, "no"
	})
	// Checks at 0, 40, 80 and 120 ms at most (sleeps only lengthen them).
	if n := calls.Load(); n < 2 || n > 4 {
		t.Fatalf("%d checks in 100 ms at a 40 ms interval, want 2 to 4", n)
	}
}

func TestWatchReturnsWhenTheCheckIsDone(t *testing.T) {
	var calls atomic.Int32
	r := &recorder{TB: t}
	Watch(r, time.Second, time.Millisecond, "the second check", func() (bool, string) {
		return calls.Add(1) == 2, "not yet"
	})
	if r.failed != "" || calls.Load() != 2 {
		t.Fatalf("failed %q after %d checks, want success on the second", r.failed, calls.Load())
	}
}
