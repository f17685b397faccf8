package poll

import (
	"strings"
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
	r.failed = format
	if len(args) > 0 {
		r.failed = strings.ReplaceAll(format, "%s", args[0].(string))
	}
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
