package scenario

// Delayed admission (max_delay_ms): a request short of tokens whose tokens
// come within the bound is paused (it reserves them: the bucket goes into
// debt) and resumed from on_tick exactly when they are due, in arrival
// order, carrying x-sluice-delay-ms upstream and x-ratelimit-delay-ms
// downstream; beyond the bound it gets a 429 and takes nothing. A stream
// reset while paused gives its tokens back: the next request waits less.

import (
	"fmt"
	"testing"
	"time"
)

func init() {
	register(
		Case{Name: "DelayedAdmissionHoldsAndResumesOnTick", Run: delayHoldsAndResumes},
		Case{Name: "DelayedStreamResetRefundsItsTokens", Run: delayResetRefunds},
	)
}

// delayConfig: burst 10, 10 tokens/s, max delay 500 ms: of a burst of
// simultaneous requests 10 pass, 5 are held 100, 200, ... 500 ms, and the
// rest are rejected (the 16th would wait 600 ms).
const delayConfig = `{"legacy_headers": true, "rules": [{"name": "smooth", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
  "algorithm_config": {"tokens_per_second": 10, "burst": 10, "max_delay_ms": 500}}]}`

// burst sends n requests at one instant and sorts them.
func burst(t *testing.T, h Host, n int, r Request) (passed, rejected []Response, held []Stream) {
	t.Helper()
	rs := make([]Request, n)
	for i := range rs {
		rs[i] = r
	}
	for i, res := range many(t, h, 0, rs) {
		switch {
		case res.Paused:
			if res.Stream == nil {
				t.Fatalf("request %d paused without a stream", i)
			}
			held = append(held, res.Stream)
		case res.Rejected:
			rejected = append(rejected, res)
		default:
			passed = append(passed, res)
		}
	}
	return passed, rejected, held
}

// stepUntilSettled moves the clock by step and ticks until total has
// passed, and returns when each stream settled (-1: still paused).
func stepUntilSettled(t *testing.T, h Host, streams []Stream, stepBy, total time.Duration) []time.Duration {
	t.Helper()
	at := make([]time.Duration, len(streams))
	for i, s := range streams {
		at[i] = -1
		if s.Settled() {
			t.Fatalf("held request %d settled before the clock moved", i)
		}
	}
	for now := stepBy; now <= total; now += stepBy {
		step(t, h, stepBy)
		for i, s := range streams {
			if at[i] < 0 && s.Settled() {
				at[i] = now
			}
		}
	}
	return at
}

func delayHoldsAndResumes(t *testing.T, start Starter) {
	h := startConfig(t, start, delayConfig)
	passed, rejected, held := burst(t, h, 18, req("x-api-key", "k", "x-sluice-delay-ms", "9999"))
	if len(passed) != 10 || len(held) != 5 || len(rejected) != 3 {
		t.Fatalf("passed %d, held %d, rejected %d; want 10, 5, 3", len(passed), len(held), len(rejected))
	}
	for _, res := range passed {
		// Not held: no delay header (the client-sent one is removed).
		wantHeaders(t, "passed at once", res.UpstreamHeaders, "x-sluice-delay-ms", "-")
		wantHeaders(t, "passed at once", res.ResponseHeaders, "x-ratelimit-delay-ms", "-")
	}
	for _, res := range rejected {
		// Beyond the bound: the wait would be 600 ms or more.
		if res.Status != 429 {
			t.Errorf("rejection with status %d", res.Status)
		}
		wantHeaders(t, "beyond the bound", res.ResponseHeaders, "x-ratelimit-reason", "token_bucket_exceeded", "ratelimit-remaining", "0")
		if ra := atoi(t, "retry-after", header(res.ResponseHeaders, "retry-after")); ra < 1 {
			t.Errorf("retry-after %d", ra)
		}
	}
	wantMetrics(t, h, map[string]uint64{
		"sluice.rule.smooth.delayed": 5, "sluice.rule.smooth.delay_ms": 100 + 200 + 300 + 400 + 500,
		"sluice.rule.smooth.allowed": 15, "sluice.rule.smooth.rejected": 3,
	})

	at := stepUntilSettled(t, h, held, 10*time.Millisecond, 600*time.Millisecond)
	for k, s := range held {
		want := time.Duration(k+1) * 100 * time.Millisecond
		if at[k] != want {
			t.Fatalf("held request %d resumed at %v, want %v (its reserved time, in arrival order)", k, at[k], want)
		}
		res, err := s.Complete()
		if err != nil {
			t.Fatalf("completing held request %d: %v", k, err)
		}
		ms := fmt.Sprint((k + 1) * 100)
		if res.Rejected {
			t.Fatalf("held request %d rejected on resume", k)
		}
		wantHeaders(t, "resumed upstream", res.UpstreamHeaders, "x-sluice-delay-ms", ms)
		wantHeaders(t, "resumed downstream", res.ResponseHeaders, "x-ratelimit-delay-ms", ms, "ratelimit-remaining", "0")
	}
	// At 650 ms the debt is paid and 1.5 tokens are back: one request
	// passes at once, the next is held 50 ms.
	h.Advance(50 * time.Millisecond)
	if res := do(t, h, req("x-api-key", "k")); res.Paused || res.Rejected {
		t.Fatalf("after the debt: paused %v rejected %v", res.Paused, res.Rejected)
	}
	res := do(t, h, req("x-api-key", "k"))
	if !res.Paused {
		t.Fatalf("want held, got rejected %v", res.Rejected)
	}
	// Its time is 50 ms away, computed from unix seconds in float64: a
	// fraction of a microsecond late, which the documented bound allows
	// (never before its time, at most one 5 ms tick after it).
	at = stepUntilSettled(t, h, []Stream{res.Stream}, time.Millisecond, 60*time.Millisecond)
	if at[0] < 50*time.Millisecond || at[0] > 55*time.Millisecond {
		t.Fatalf("resumed at %v, want within [50ms, 55ms]", at[0])
	}
	if final, err := res.Stream.Complete(); err != nil || final.Rejected {
		t.Fatalf("complete: %+v %v", final, err)
	}
	noRecoveredPanics(t, h)
}

// delayResetRefunds: 3 held (100, 200, 300 ms); the second is reset: its
// token comes back, so a newcomer is held 300 ms (behind the remaining
// debt of 2), not 400; the others keep their times.
func delayResetRefunds(t *testing.T, start Starter) {
	h := startConfig(t, start, delayConfig)
	_, _, held := burst(t, h, 13, req("x-api-key", "k"))
	if len(held) != 3 {
		t.Fatalf("held %d, want 3", len(held))
	}
	if err := held[1].Reset(); err != nil {
		t.Fatalf("reset: %v", err)
	}
	wantMetrics(t, h, map[string]uint64{"sluice.delay.cancelled": 1})
	res := do(t, h, req("x-api-key", "k"))
	if !res.Paused {
		t.Fatalf("newcomer not held: rejected %v", res.Rejected)
	}
	live := []Stream{held[0], held[2], res.Stream}
	at := stepUntilSettled(t, h, live, 10*time.Millisecond, 400*time.Millisecond)
	for i, want := range []time.Duration{100 * time.Millisecond, 300 * time.Millisecond, 300 * time.Millisecond} {
		if at[i] != want {
			t.Fatalf("held request %d resumed at %v, want %v", i, at[i], want)
		}
	}
	for i, s := range live {
		if final, err := s.Complete(); err != nil || final.Rejected {
			t.Fatalf("complete %d: %+v %v", i, final, err)
		}
	}
	// The next request sees the bucket as the refund left it: at 400 ms the
	// debt (3 reservations after the refund) is paid and 1 token is back.
	if got := admitted(t, h, 1, req("x-api-key", "k")); got != 1 {
		t.Fatal("no token back at 400 ms")
	}
	if res := do(t, h, req("x-api-key", "k")); !res.Paused {
		t.Fatalf("want the next one held, got rejected %v", res.Rejected)
	} else if err := res.Stream.Reset(); err != nil {
		t.Fatal(err)
	}
	noRecoveredPanics(t, h)
}
