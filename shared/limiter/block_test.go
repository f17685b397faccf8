package limiter

import (
	"testing"

	"github.com/sluice-rl/sluice/shared/state"
)

// A refused identity is refused for block_seconds more, then gets tokens
// at the rate again, from empty.
func TestBlockRefusesForItsSecondsThenRefillsFromEmpty(t *testing.T) {
	tb := TokenBucket{Rate: 1, Burst: 5}
	s, d := tb.Take(state.Bucket{}, false, t0, 5)
	if !d.Allowed {
		t.Fatal("the first 5 tokens were refused")
	}
	s, d = tb.Take(s, true, t0, 1)
	if d.Allowed {
		t.Fatal("an empty bucket admitted a request")
	}
	s, ok := tb.Block(&d, s, 1, 60)
	if !ok || !near(s.Tokens, -60) || !near(d.Wait, 61) || !near(d.Reset, 65) || d.Remaining != 0 {
		t.Fatalf("blocked: ok %v, tokens %g, wait %g, reset %g, remaining %g; want -60, 61, 65, 0", ok, s.Tokens, d.Wait, d.Reset, d.Remaining)
	}
	// 30 s into the block: refused, and the block is not lengthened.
	s2, d := tb.Take(s, true, t0+30, 1)
	if d.Allowed {
		t.Fatal("admitted during the block")
	}
	if s3, ok := tb.Block(&d, s2, 1, 60); ok || s3 != s2 || !near(d.Wait, 31) {
		t.Errorf("a refusal during the block changed it: ok %v, %+v (was %+v), wait %g", ok, s3, s2, d.Wait)
	}
	if _, d = tb.Take(s, true, t0+60.5, 1); d.Allowed {
		t.Error("admitted 60.5 s after the block began: the bucket has only refilled to empty")
	}
	if _, d = tb.Take(s, true, t0+61, 1); !d.Allowed {
		t.Errorf("refused 61 s after the block began (wait %g)", d.Wait)
	}
}

func TestBlockLeavesAdmissionsDebtsAndZeroSecondsAlone(t *testing.T) {
	tb := TokenBucket{Rate: 2, Burst: 10}
	in := state.Bucket{Tokens: 3, LastRefill: t0}
	admitted := Decision{Allowed: true, Remaining: 2}
	if s, ok := tb.Block(&admitted, in, 1, 60); ok || s != in || !admitted.Allowed {
		t.Errorf("an admission was blocked: %+v %+v", s, admitted)
	}
	debt := state.Bucket{Tokens: -4, LastRefill: t0}
	d := Decision{Wait: 2}
	if s, ok := tb.Block(&d, debt, 0, 60); ok || s != debt || d.Wait != 2 {
		t.Errorf("a debt became a block: %+v %+v", s, d)
	}
	for _, secs := range []float64{0, -5} {
		d := Decision{Wait: 0.5}
		if s, ok := tb.Block(&d, in, 1, secs); ok || s != in {
			t.Errorf("block_seconds %g blocked: %+v", secs, s)
		}
	}
	// Admit's refusal (cost 0): blocked for exactly the seconds.
	d = Decision{Wait: minWait}
	s, ok := tb.Block(&d, state.Bucket{Tokens: 0, LastRefill: t0}, 0, 30)
	if !ok || !near(s.Tokens, -60) || !near(d.Wait, 30) {
		t.Errorf("an empty response-charged bucket: %+v, wait %g; want -60 tokens, 30 s", s, d.Wait)
	}
}

// A rule refilling next to nothing still blocks once its bucket is stored
// (in micro-tokens): at least one below empty.
func TestBlockOfAnAlmostStillBucketSurvivesStorage(t *testing.T) {
	tb := TokenBucket{Rate: 1e-9, Burst: 0.5}
	d := Decision{Wait: 1e9}
	s, ok := tb.Block(&d, state.Bucket{Tokens: 0.5, LastRefill: t0}, 1, 60)
	if stored := s.Stored(); !ok || !(stored.Tokens < 0) {
		t.Fatalf("blocked %v to %g tokens, stored as %g: not below empty", ok, s.Tokens, stored.Tokens)
	}
	if _, again := tb.Block(&d, s.Stored(), 1, 60); again {
		t.Error("the stored block was blocked again: it would be written on every refusal")
	}
}
