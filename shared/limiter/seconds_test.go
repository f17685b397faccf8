package limiter

import (
	"math"
	"testing"

	"github.com/sluice-rl/sluice/shared/state"
)

// TestTheClockReadsWholeMicrosecondsAsSharedDataStoresThem: a time the
// filter reads is one a stored bucket keeps unchanged.
func TestTheClockReadsWholeMicrosecondsAsSharedDataStoresThem(t *testing.T) {
	for _, ns := range []int64{1772452800_123456789, 1772452800_000000999, 1772452811_987654321, 4102444800_999999999} {
		s := Seconds(ns)
		if stored := (state.Bucket{LastRefill: s}).Stored().LastRefill; stored != s {
			t.Errorf("%d ns reads as %v s, stored as %v", ns, s, stored)
		}
		if got, want := int64(math.Round(s*1e6)), ns/1000; got != want {
			t.Errorf("%d ns reads as %d µs, want %d (truncated)", ns, got, want)
		}
	}
}
