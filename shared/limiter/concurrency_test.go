package limiter

import (
	"testing"

	"github.com/sluice-rl/sluice/shared/state"
)

// TestConcurrencyCountsPlacesUntilGivenBackOrTwoPeriodsOld: places are
// taken up to the limit, given back to the period they were counted in,
// and a place never given back leaves the count when its period is two
// periods old, after which giving it back frees nothing.
func TestConcurrencyCountsPlacesUntilGivenBackOrTwoPeriodsOld(t *testing.T) {
	c := Concurrency{Limit: 2, Lease: 60}
	var w state.Window
	take := func(now float64) Decision { return c.Take(&w, w.N > 0, now, 1) }
	if d := take(1000); !d.Allowed || d.Remaining != 1 || d.Reset == 0 {
		t.Fatalf("first: %+v", d)
	}
	firstAt := w.Start
	if d := take(1030); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("second: %+v", d)
	}
	if d := take(1031); d.Allowed || d.Wait != ConcurrencyRetry || d.Remaining != 0 {
		t.Fatalf("third: %+v, want refused with a wait of %v", d, float64(ConcurrencyRetry))
	}
	if !RefundWindow(&w, firstAt, c.Lease, 1) {
		t.Fatal("the first place was not given back")
	}
	if d := take(1032); !d.Allowed {
		t.Fatalf("after giving one back: %+v", d)
	}
	// The first place was counted in the period from 960, the next ones in
	// the period from 1020; the period from 1140 is two periods after it.
	if d := take(1140); !d.Allowed || d.Remaining != 1 {
		t.Fatalf("two periods on: %+v, want both old places gone", d)
	}
	if RefundWindow(&w, firstAt, c.Lease, 1) {
		t.Fatal("a place two periods old was given back")
	}
	if d := take(1141); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("second place of the new period: %+v", d)
	}
	probe := w
	if d := c.Take(&probe, true, 1141, 0); d.Reset == 0 {
		t.Fatalf("a state with places taken reads as idle: %+v", d)
	}
	idle := state.Window{Start: 1020, N: 2}
	if d := c.Take(&idle, true, 1141, 0); d.Reset != 0 || d.Remaining != 2 {
		t.Fatalf("an empty state: %+v, want idle", d)
	}
}
