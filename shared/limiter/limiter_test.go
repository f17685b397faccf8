package limiter

import (
	"math"
	"strconv"
	"testing"

	"github.com/sluice-rl/sluice/shared/state"
)

const t0 = 1736940000.0

// near compares with a tolerance of 1e-6: t0 is a unix time, so t0+0.2-t0
// is 0.2 only to within its float64 spacing (about 2.4e-7).
func near(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Max(1, math.Abs(b)) }

func TestTakeNewBucketStartsFull(t *testing.T) {
	tb := TokenBucket{Rate: 5, Burst: 10}
	s, d := tb.Take(state.Bucket{Tokens: -99, LastRefill: 1}, false, t0, 1)
	if !d.Allowed || s != (state.Bucket{Tokens: 9, LastRefill: t0}) {
		t.Fatalf("first take: %+v %+v", s, d)
	}
	if d.Remaining != 9 || d.Wait != 0 || !near(d.Reset, 0.2) {
		t.Errorf("decision = %+v, want remaining 9, wait 0, reset 0.2", d)
	}
}

func TestTakeBurstThenReject(t *testing.T) {
	tb := TokenBucket{Rate: 5, Burst: 10}
	var s state.Bucket
	exists := false
	for i := 0; i < 10; i++ {
		var d Decision
		s, d = tb.Take(s, exists, t0, 1)
		exists = true
		if !d.Allowed {
			t.Fatalf("request %d rejected: %+v", i, d)
		}
		if d.Remaining != float64(9-i) {
			t.Errorf("request %d remaining %v", i, d.Remaining)
		}
	}
	s2, d := tb.Take(s, true, t0, 1)
	if d.Allowed || d.Remaining != 0 || !near(d.Wait, 0.2) || !near(d.Reset, 2) {
		t.Errorf("11th: %+v, want rejected, wait 0.2, reset 2", d)
	}
	if s2 != s {
		t.Errorf("reject changed the bucket: %+v -> %+v", s, s2)
	}
}

func TestTakeRefill(t *testing.T) {
	tb := TokenBucket{Rate: 5, Burst: 10}
	cases := []struct {
		name    string
		tokens  float64
		elapsed float64
		cost    float64
		allowed bool
		after   float64 // tokens after
		wait    float64
	}{
		{"refill partial", 0, 0.5, 1, true, 1.5, 0},
		{"refill exact", 0, 0.2, 1, true, 0, 0},
		{"refill not enough", 0, 0.1, 1, false, 0.5, 0.1},
		{"refill capped at burst", 3, 100, 1, true, 9, 0},
		{"cost larger than one", 2, 0.2, 4, false, 3, 0.2},
		{"fractional cost", 0.3, 0, 0.25, true, 0.05, 0},
		{"negative tokens (reservation debt)", -5, 1.4, 1, true, 1, 0},
		{"negative tokens still in debt", -5, 0.5, 1, false, -2.5, 0.7},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, d := tb.Take(state.Bucket{Tokens: tc.tokens, LastRefill: t0}, true, t0+tc.elapsed, tc.cost)
			if d.Allowed != tc.allowed || !near(s.Tokens, tc.after) || !near(d.Wait, tc.wait) {
				t.Errorf("got %+v %+v; want allowed=%v tokens=%v wait=%v", s, d, tc.allowed, tc.after, tc.wait)
			}
			if s.LastRefill != t0+tc.elapsed {
				t.Errorf("LastRefill = %v, want %v", s.LastRefill, t0+tc.elapsed)
			}
			if !near(d.Reset, (10-s.Tokens)/5) {
				t.Errorf("Reset = %v, want %v", d.Reset, (10-s.Tokens)/5)
			}
			wantRemaining := math.Max(0, s.Tokens)
			if !near(d.Remaining, wantRemaining) {
				t.Errorf("Remaining = %v, want %v", d.Remaining, wantRemaining)
			}
		})
	}
}

// The Fairvisor token bucket rule: burst tokens at once, then the steady rate.
func TestTakeSteadyRate(t *testing.T) {
	tb := TokenBucket{Rate: 5, Burst: 10}
	var s state.Bucket
	exists, allowed := false, 0
	// 10 seconds at 100 requests per second: burst + 10s*rate = 60 admitted.
	for i := 0; i < 1000; i++ {
		var d Decision
		s, d = tb.Take(s, exists, t0+float64(i)*0.01, 1)
		exists = true
		if d.Allowed {
			allowed++
		}
	}
	if allowed < 59 || allowed > 60 {
		t.Errorf("allowed %d of 1000 over 10s, want 59..60 (burst 10 + 5/s)", allowed)
	}
}

func TestTakeBackwardsClock(t *testing.T) {
	tb := TokenBucket{Rate: 5, Burst: 10}
	s := state.Bucket{Tokens: 0, LastRefill: t0}
	// The clock jumps back an hour: nothing is minted, last_refill stays.
	s2, d := tb.Take(s, true, t0-3600, 1)
	if d.Allowed || s2 != s {
		t.Fatalf("backwards: %+v %+v", s2, d)
	}
	if !near(d.Wait, 0.2) {
		t.Errorf("wait = %v", d.Wait)
	}
	// Coming back to t0+0.25 mints 0.25s worth, not 3600.25s worth.
	s3, d := tb.Take(s2, true, t0+0.25, 1)
	if !d.Allowed || !near(s3.Tokens, 0.25) || s3.LastRefill != t0+0.25 {
		t.Errorf("after recovery: %+v %+v", s3, d)
	}
	// Allowed requests while the clock is behind do not move last_refill back.
	s4, d := tb.Take(state.Bucket{Tokens: 5, LastRefill: t0}, true, t0-10, 1)
	if !d.Allowed || s4 != (state.Bucket{Tokens: 4, LastRefill: t0}) {
		t.Errorf("allowed while behind: %+v %+v", s4, d)
	}
}

func TestTakeCostAboveBurst(t *testing.T) {
	tb := TokenBucket{Rate: 5, Burst: 10}
	s := state.Bucket{Tokens: 10, LastRefill: t0}
	for _, now := range []float64{t0, t0 + 1e6} {
		s2, d := tb.Take(s, true, now, 25)
		if d.Allowed {
			t.Fatalf("cost 25 > burst 10 admitted at %v", now)
		}
		// Wait is the uncapped time to gather the cost: (25-10)/5 = 3s.
		if !near(d.Wait, 3) || d.Remaining != 10 || d.Reset != 0 {
			t.Errorf("decision = %+v, want wait 3, remaining 10, reset 0", d)
		}
		if s2.Tokens != 10 {
			t.Errorf("tokens = %v", s2.Tokens)
		}
	}
	_, d := tb.Take(s, true, t0, math.Inf(1))
	if d.Allowed || d.Wait != math.MaxInt32 {
		t.Errorf("infinite cost: %+v", d)
	}
}

func TestTakeDefensive(t *testing.T) {
	tb := TokenBucket{Rate: 5, Burst: 10}
	nan := math.NaN()
	// NaN / negative / zero cost consume nothing.
	for _, c := range []float64{nan, -1, 0} {
		s, d := tb.Take(state.Bucket{Tokens: 3, LastRefill: t0}, true, t0, c)
		if !d.Allowed || s.Tokens != 3 {
			t.Errorf("cost %v: %+v %+v", c, s, d)
		}
	}
	// Corrupt stored state is treated like a missing bucket.
	for _, b := range []state.Bucket{{Tokens: nan, LastRefill: t0}, {Tokens: math.Inf(-1), LastRefill: t0}, {Tokens: 1, LastRefill: nan}, {Tokens: 1, LastRefill: math.Inf(1)}} {
		s, d := tb.Take(b, true, t0, 1)
		if !d.Allowed || s != (state.Bucket{Tokens: 9, LastRefill: t0}) {
			t.Errorf("state %+v: %+v %+v", b, s, d)
		}
	}
	// A NaN clock mints nothing.
	s, d := tb.Take(state.Bucket{Tokens: 0, LastRefill: t0}, true, nan, 1)
	if d.Allowed || s != (state.Bucket{Tokens: 0, LastRefill: t0}) {
		t.Errorf("NaN now: %+v %+v", s, d)
	}
	// Stored tokens above a lowered burst are cut to the new burst.
	s, _ = tb.Take(state.Bucket{Tokens: 500, LastRefill: t0}, true, t0, 1)
	if s.Tokens != 9 {
		t.Errorf("tokens above burst: %+v", s)
	}
	// Zero or invalid rate/burst never yields NaN or Inf.
	for _, bad := range []TokenBucket{{}, {Rate: nan, Burst: nan}, {Rate: -1, Burst: -1}, {Rate: math.Inf(1), Burst: math.Inf(1)}} {
		s, d := bad.Take(state.Bucket{Tokens: 0, LastRefill: t0}, true, t0+1, 1)
		checkDecision(t, s, d)
		if d.Allowed {
			t.Errorf("%+v admitted with an empty bucket: %+v", bad, d)
		}
	}
}

func checkDecision(t *testing.T, s state.Bucket, d Decision) {
	t.Helper()
	for _, x := range []float64{s.Tokens, s.LastRefill, d.Remaining, d.Wait, d.Reset} {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			t.Fatalf("non-finite value in %+v %+v", s, d)
		}
	}
	if d.Remaining < 0 || d.Wait < 0 || d.Reset < 0 || d.Wait > math.MaxInt32 || d.Reset > math.MaxInt32 {
		t.Fatalf("out of range: %+v", d)
	}
	if d.Allowed != (d.Wait == 0) {
		t.Fatalf("Allowed and Wait disagree: %+v", d)
	}
}

func TestRetryAfter(t *testing.T) {
	cases := []struct {
		wait     float64
		min, max int
	}{
		{0, 0, 0},
		{-1, 0, 0},
		{math.NaN(), 0, 0},
		{1e-9, 1, 1}, // ceil 1, 50% of 1 rounds to 0
		{0.2, 1, 1},
		{1, 1, 1},
		{1.5, 2, 3},
		{2, 2, 3},
		{10, 10, 15},
		{9.01, 10, 15},
		{1e6, 1e6, 1.5e6},
		{1e300, math.MaxInt32, math.MaxInt32},
		{math.Inf(1), math.MaxInt32, math.MaxInt32},
	}
	for _, tc := range cases {
		for i := 0; i < 50; i++ {
			id := "client-" + strconv.Itoa(i)
			got := RetryAfter(tc.wait, id)
			if got < tc.min || got > tc.max {
				t.Errorf("RetryAfter(%v, %q) = %d, want %d..%d", tc.wait, id, got, tc.min, tc.max)
			}
			if tc.wait > 0 && float64(got) < math.Min(tc.wait, math.MaxInt32) {
				t.Errorf("RetryAfter(%v) = %d is earlier than the wait", tc.wait, got)
			}
			if again := RetryAfter(tc.wait, id); again != got {
				t.Errorf("RetryAfter(%v, %q) not deterministic: %d then %d", tc.wait, id, got, again)
			}
		}
	}
}

func TestRetryAfterJitterSpread(t *testing.T) {
	// With a 100s wait the jitter covers [0, 50]; 1000 identities should use
	// most of that range and average near the middle.
	seen := map[int]int{}
	sum := 0
	for i := 0; i < 1000; i++ {
		r := RetryAfter(100, "10.0.0."+strconv.Itoa(i))
		seen[r]++
		sum += r - 100
	}
	if len(seen) < 45 {
		t.Errorf("only %d distinct values over [100,150] for 1000 identities", len(seen))
	}
	if mean := float64(sum) / 1000; mean < 20 || mean > 30 {
		t.Errorf("mean jitter %.1f, want about 25", mean)
	}
	for v, n := range seen {
		if n > 60 {
			t.Errorf("value %d chosen by %d of 1000 identities", v, n)
		}
	}
	// The same identity gets the same offset for different waits' scale.
	if RetryAfter(100, "a") == RetryAfter(100, "b") && RetryAfter(100, "b") == RetryAfter(100, "c") && RetryAfter(100, "c") == RetryAfter(100, "d") {
		t.Error("four identities share one offset")
	}
}

func TestParseCost(t *testing.T) {
	good := map[string]float64{
		"1": 1, "5": 5, " 2.5\t": 2.5, "0.001": 0.001, "1e3": 1000, "1E9": 1e9, "+7": 7, "007": 7,
	}
	for in, want := range good {
		if got, ok := ParseCost(in); !ok || got != want {
			t.Errorf("ParseCost(%q) = %v, %v; want %v", in, got, ok, want)
		}
	}
	for _, in := range []string{
		"", " ", "0", "-1", "-0", "0.0", "1e10", "1000000001", "NaN", "nan", "Inf", "+Inf", "infinity",
		"0x10", "1_000", "abc", "5 tokens", "1,5", "1e400", "1e-400", "\x00", "٣",
		"1" + string(make([]byte, 100)),
	} {
		if got, ok := ParseCost(in); ok {
			t.Errorf("ParseCost(%q) = %v, true; want false", in, got)
		}
	}
}

func TestTakeAllocs(t *testing.T) {
	tb := TokenBucket{Rate: 5, Burst: 10}
	s := state.Bucket{Tokens: 3, LastRefill: t0}
	if n := testing.AllocsPerRun(100, func() { s, _ = tb.Take(s, true, t0+1, 1) }); n != 0 {
		t.Errorf("Take allocates %v", n)
	}
	if n := testing.AllocsPerRun(100, func() { _ = RetryAfter(3.2, "10.0.0.1") }); n != 0 {
		t.Errorf("RetryAfter allocates %v", n)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = ParseCost("12.5") }); n != 0 {
		t.Errorf("ParseCost allocates %v", n)
	}
}

func BenchmarkTake(b *testing.B) {
	tb := TokenBucket{Rate: 100, Burst: 200}
	s := state.Bucket{Tokens: 50, LastRefill: t0}
	now := t0
	b.ReportAllocs()
	for b.Loop() {
		now += 0.001
		s, _ = tb.Take(s, true, now, 1)
	}
}

func BenchmarkRetryAfter(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = RetryAfter(1.7, "203.0.113.7")
	}
}

func BenchmarkParseCost(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_, _ = ParseCost("12.5")
	}
}

func TestLevelAndFull(t *testing.T) {
	tb := TokenBucket{Rate: 5, Burst: 10}
	for _, tc := range []struct {
		s     state.Bucket
		now   float64
		level float64
		full  bool
	}{
		{state.Bucket{Tokens: 9, LastRefill: t0}, t0, 9, false},
		{state.Bucket{Tokens: 9, LastRefill: t0}, t0 + 0.1, 9.5, false},
		{state.Bucket{Tokens: 9, LastRefill: t0}, t0 + 0.2, 10, true},
		{state.Bucket{Tokens: 0, LastRefill: t0}, t0 + 100, 10, true},
		{state.Bucket{Tokens: 12, LastRefill: t0}, t0, 10, true},       // above a lowered burst
		{state.Bucket{Tokens: 3, LastRefill: t0}, t0 - 3600, 3, false}, // backwards clock mints nothing
		{state.Bucket{Tokens: -4, LastRefill: t0}, t0, -4, false},      // a debt (reservations) ranks below empty
		{state.Bucket{Tokens: -4, LastRefill: t0}, t0 + 1, 1, false},
		{state.Bucket{Tokens: math.NaN(), LastRefill: t0}, t0, 10, true},
		{state.Bucket{Tokens: 9, LastRefill: t0}, math.NaN(), 9, false},
	} {
		if got := tb.Level(tc.s, tc.now); !near(got, tc.level) {
			t.Errorf("Level(%+v, %v) = %v, want %v", tc.s, tc.now-t0, got, tc.level)
		}
		if got := tb.Full(tc.s, tc.now); got != tc.full {
			t.Errorf("Full(%+v, %v) = %v, want %v", tc.s, tc.now-t0, got, tc.full)
		}
	}
}

// TestAClientSendingAtExactlyTheRateIsAdmitted sends, after a burst, one
// request each time a token is due, on the clock the filter reads (whole
// microseconds of a nanosecond clock) and through the stored state's
// rounding to micro-units. Without DueSlack the first such request is
// refused now and then (a float64 of unix seconds is not an exact count of
// microseconds). Rounding the tokens to micro-tokens may still lose one
// request in many thousands; the refused one then leaves a token of
// headroom.
func TestAClientSendingAtExactlyTheRateIsAdmitted(t *testing.T) {
	for _, rate := range []float64{0.3, 1, 3, 7, 10, 1000} {
		for _, start := range []int64{1772452800_000000000, 1772452800_123456789, 1772452811_987654321} {
			tb := TokenBucket{Rate: rate, Burst: max(rate, 1)}
			// The filter's clock: nanoseconds, read in whole microseconds.
			now := func(i int) float64 { return float64((start+int64(float64(i)*1e9/rate))/1000) / 1e6 }
			s, d := tb.Take(state.Bucket{}, false, now(0), tb.Burst) // the burst, used up
			if !d.Allowed {
				t.Fatalf("rate %v: the burst was refused", rate)
			}
			if _, d := tb.Take(s.Stored(), true, float64((start+int64(0.5e9/rate))/1000)/1e6, 1); d.Allowed {
				t.Errorf("rate %v: a request half a token early was admitted", rate)
			}
			rejected := 0
			for i := 1; i <= 20000; i++ {
				if s, d = tb.Take(s.Stored(), true, now(i), 1); !d.Allowed {
					rejected++
				}
				if i == 1 && !d.Allowed {
					t.Errorf("rate %v, start %d: the first request sent when its token was due was rejected (wait %v s)", rate, start, d.Wait)
				}
			}
			if rejected > 1 {
				t.Errorf("rate %v, start %d: %d of 20000 requests sent when their tokens were due were rejected", rate, start, rejected)
			}
		}
	}
}
