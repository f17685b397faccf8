package filter_test

import (
	"context"
	"math/rand"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/plugin/wasmhost"
	"github.com/sluice-rl/sluice/shared/state"
)

// Delayed admission (max_delay_ms), run on the compiled filter in wasmhost:
// requests are held with Pause and resumed from on_tick, driven here by
// ManualClock and Host.Tick.

// delayConfig: burst 10, 10 tokens/s, max delay 500 ms. A burst of
// simultaneous requests: 10 pass at once, 5 are held 100, 200, ... 500 ms,
// the rest are rejected (the 16th would wait 600 ms).
const delayConfig = `{"rules": [{"name": "smooth", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
  "algorithm_config": {"tokens_per_second": 10, "burst": 10, "max_delay_ms": 500}}]}`

// held is a request the filter paused, with the clock offset (from the
// burst) at which it was seen resumed.
type held struct {
	i         int
	s         *wasmhost.Stream
	resumedAt time.Duration // -1 while still held
}

// burst sends n simultaneous requests (the clock does not move) on VM vm
// and sorts them into passed, held and rejected.
func (f *fixture) burst(vm, n int, kv ...string) (passed []*wasmhost.Result, hs []*held, rejected []*wasmhost.Result) {
	f.t.Helper()
	for i := 0; i < n; i++ {
		res := f.doOn(vm, rq(kv...))
		switch {
		case res.Paused:
			hs = append(hs, &held{i: i, s: res.Stream, resumedAt: -1})
		case res.Rejected:
			rejected = append(rejected, res)
		default:
			passed = append(passed, res)
		}
	}
	return passed, hs, rejected
}

// stepUntil advances the clock in steps, ticking after each, until total
// has passed, and records when each held request was resumed. It returns
// the order in which they resumed.
func (f *fixture) stepUntil(hs []*held, step, total time.Duration) []int {
	f.t.Helper()
	var order []int
	for at := step; at <= total; at += step {
		f.clock.Advance(step)
		if err := f.h.Tick(context.Background()); err != nil {
			f.t.Fatalf("tick at %v: %v", at, err)
		}
		for _, h := range hs {
			if h.resumedAt >= 0 {
				continue
			}
			select {
			case <-h.s.Resumed():
				h.resumedAt = at
				order = append(order, h.i)
			default:
			}
		}
	}
	return order
}

func TestDelayHoldsWithinBoundInOrder(t *testing.T) {
	f := start(t, delayConfig, 1)
	passed, hs, rejected := f.burst(0, 18, "x-api-key", "k")
	if len(passed) != 10 || len(hs) != 5 || len(rejected) != 3 {
		t.Fatalf("passed %d, held %d, rejected %d; want 10, 5, 3", len(passed), len(hs), len(rejected))
	}
	for _, r := range passed {
		if _, ok := header(r.UpstreamHeaders, "x-sluice-delay-ms"); ok {
			t.Fatalf("a request that was not held carries the delay header: %v", r.UpstreamHeaders)
		}
	}
	// Beyond the bound: 429 with Retry-After covering the wait (600 ms and
	// more), and nothing taken: the bucket holds the five reservations only.
	for _, r := range rejected {
		if r.Status != 429 || mustAtoi(t, headerOr(t, r.ResponseHeaders, "retry-after")) < 1 {
			t.Fatalf("rejection %d %v", r.Status, r.ResponseHeaders)
		}
	}
	if got := f.tokens("smooth", "k"); !near(got, -5) {
		t.Fatalf("tokens %v after 5 reservations, want -5", got)
	}
	if got := f.metric("sluice.rule.smooth.delayed"); got != 5 {
		t.Fatalf("delayed = %d", got)
	}
	if got := f.metric("sluice.rule.smooth.delay_ms"); got != 100+200+300+400+500 {
		t.Fatalf("delay_ms = %d", got)
	}

	order := f.stepUntil(hs, 10*time.Millisecond, 600*time.Millisecond)
	for k, h := range hs {
		want := time.Duration(k+1) * 100 * time.Millisecond
		if h.resumedAt != want {
			t.Fatalf("held request %d resumed at %v, want %v (its reserved time)", k, h.resumedAt, want)
		}
		if order[k] != h.i {
			t.Fatalf("resume order %v, want arrival order", order)
		}
		sr, err := h.s.Wait(ctxTimeout(t))
		if err != nil || sr.Action != wasmhost.ActionContinue {
			t.Fatalf("held request %d: %+v %v", k, sr, err)
		}
		wantMS := strconv.Itoa((k + 1) * 100)
		if v, _ := header(sr.Headers, "x-sluice-delay-ms"); v != wantMS {
			t.Fatalf("upstream x-sluice-delay-ms %q, want %s", v, wantMS)
		}
		res, err := h.s.Complete(ctxTimeout(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		if v, _ := header(res.ResponseHeaders, "x-ratelimit-delay-ms"); v != wantMS {
			t.Fatalf("response x-ratelimit-delay-ms %q, want %s: %v", v, wantMS, res.ResponseHeaders)
		}
		if v, _ := remainingField(res.ResponseHeaders); v != "0" {
			t.Fatalf("ratelimit-remaining %q", v)
		}
	}
	// At 650 ms the debt is paid and 1.5 tokens refilled: the next
	// request passes at once; the one after it is held 50 ms.
	f.clock.Advance(50 * time.Millisecond)
	if r := f.do("x-api-key", "k"); r.Paused || r.Rejected {
		t.Fatalf("after the debt: %+v", r)
	}
	r := f.do("x-api-key", "k")
	if !r.Paused {
		t.Fatalf("want held, got %+v", r)
	}
	if err := r.Stream.Reset(); err != nil {
		t.Fatal(err)
	}
	if n := f.metric("sluice.panics_recovered"); n != 0 {
		t.Fatalf("panics_recovered = %d", n)
	}
}

func headerOr(t *testing.T, hs []wasmhost.Header, name string) string {
	t.Helper()
	v, ok := header(hs, name)
	if !ok {
		t.Fatalf("no %s in %v", name, hs)
	}
	return v
}

func ctxTimeout(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// A client that goes away while held: its stream is reset, Envoy runs
// on_log, on_done, on_delete. The filter takes it off the queue and refunds
// its tokens; the next tick neither traps nor resumes the dead stream, the
// others keep their times, and the refunded token serves a newcomer.
func TestDelayStreamResetWhileHeld(t *testing.T) {
	f := start(t, delayConfig, 1)
	_, hs, _ := f.burst(0, 13, "x-api-key", "k") // 10 pass, 3 held: 100, 200, 300 ms
	if len(hs) != 3 {
		t.Fatalf("held %d", len(hs))
	}
	if err := hs[1].s.Reset(); err != nil {
		t.Fatal(err)
	}
	if got := f.tokens("smooth", "k"); !near(got, -2) {
		t.Fatalf("tokens %v after the reset, want -2 (refunded)", got)
	}
	if got := f.metric("sluice.delay.cancelled"); got != 1 {
		t.Fatalf("cancelled = %d", got)
	}
	// The refunded token goes to a newcomer, who waits behind the debt
	// that is left: 300 ms, as long as the last held request.
	r := f.do("x-api-key", "k")
	if !r.Paused {
		t.Fatalf("newcomer not held: %+v", r)
	}
	all := []*held{hs[0], hs[2], {i: 99, s: r.Stream, resumedAt: -1}}
	f.stepUntil(all, 10*time.Millisecond, 400*time.Millisecond)
	want := []time.Duration{100 * time.Millisecond, 300 * time.Millisecond, 300 * time.Millisecond}
	for k, h := range all {
		if h.resumedAt != want[k] {
			t.Fatalf("request %d resumed at %v, want %v", h.i, h.resumedAt, want[k])
		}
	}
	select {
	case <-hs[1].s.Resumed():
		t.Fatal("the reset stream was resumed")
	default:
	}
	if _, err := hs[1].s.Wait(ctxTimeout(t)); err == nil {
		t.Fatal("Wait on the reset stream succeeded")
	}
	for _, vm := range f.h.VMs() {
		if err := vm.Err(); err != nil {
			t.Fatalf("VM broken: %v", err)
		}
	}
	if n := f.metric("sluice.panics_recovered"); n != 0 {
		t.Fatalf("panics_recovered = %d", n)
	}
	for _, h := range all {
		if _, err := h.s.Complete(ctxTimeout(t), nil); err != nil {
			t.Fatal(err)
		}
	}
}

// Several rules: the request waits for the longest delay; a rule that
// rejects rejects the request and nothing is taken from the others.
func TestDelaySeveralRules(t *testing.T) {
	const cfg = `{"policies": [
	  {"name": "a", "rules": [{"name": "fast", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
	    "algorithm_config": {"tokens_per_second": 1, "burst": 1, "max_delay_ms": 5000}}]},
	  {"name": "b", "rules": [{"name": "slow", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
	    "algorithm_config": {"tokens_per_second": 0.25, "burst": 2, "max_delay_ms": 5000}}]},
	  {"name": "c", "rules": [{"name": "strict", "limit_keys": ["header:x-tenant"], "algorithm": "token_bucket",
	    "algorithm_config": {"tokens_per_second": 1, "burst": 1}}]}]}`
	f := start(t, cfg, 1)
	// 1st: passes both. 2nd: fast holds 1 s, slow passes: held 1 s.
	// 3rd: fast 2 s, slow 4 s: held 4 s.
	_, hs, rejected := f.burst(0, 3, "x-api-key", "k")
	if len(hs) != 2 || len(rejected) != 0 {
		t.Fatalf("held %d rejected %d", len(hs), len(rejected))
	}
	// 4th, with a tenant whose strict rule is exhausted: rejected, and
	// neither fast nor slow loses a token.
	if r := f.do("x-tenant", "t"); r.Rejected {
		t.Fatal("first tenant request rejected")
	}
	fast, slow := f.tokens("fast", "k"), f.tokens("slow", "k")
	if r := f.do("x-api-key", "k", "x-tenant", "t"); !r.Rejected || r.Paused {
		t.Fatalf("want rejected by strict, got %+v", r)
	}
	if f.tokens("fast", "k") != fast || f.tokens("slow", "k") != slow {
		t.Fatal("a rejected request took tokens")
	}
	f.stepUntil(hs, 500*time.Millisecond, 5*time.Second)
	if hs[0].resumedAt != time.Second || hs[1].resumedAt != 4*time.Second {
		t.Fatalf("resumed at %v and %v, want 1s and 4s", hs[0].resumedAt, hs[1].resumedAt)
	}
	if f.metric("sluice.rule.fast.delayed") != 2 || f.metric("sluice.rule.slow.delayed") != 1 {
		t.Fatalf("delayed fast=%d slow=%d", f.metric("sluice.rule.fast.delayed"), f.metric("sluice.rule.slow.delayed"))
	}
	for _, h := range hs {
		if _, err := h.s.Complete(ctxTimeout(t), nil); err != nil {
			t.Fatal(err)
		}
	}
}

// A shadow rule never holds a request; its bucket goes negative exactly as
// enforcing would, counted in shadow_delayed. A client-sent delay header is
// removed when a rule can delay.
func TestDelayShadowNeverHolds(t *testing.T) {
	const cfg = `{"mode": "shadow", "rules": [{"name": "preview", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
	  "algorithm_config": {"tokens_per_second": 1, "burst": 1, "max_delay_ms": 2000}}]}`
	f := start(t, cfg, 1)
	for i := 0; i < 4; i++ {
		r := f.do("x-api-key", "k", "x-sluice-delay-ms", "9999")
		if r.Paused || r.Rejected {
			t.Fatalf("request %d: %+v", i, r)
		}
		if _, ok := header(r.UpstreamHeaders, "x-sluice-delay-ms"); ok {
			t.Fatalf("client-sent delay header reached upstream: %v", r.UpstreamHeaders)
		}
		if _, ok := header(r.ResponseHeaders, "x-ratelimit-delay-ms"); ok {
			t.Fatal("delay header on a request that was not held")
		}
	}
	// 1 passed, 2 reserved (1 s, 2 s), 1 would have been rejected.
	if got := f.tokens("preview", "k"); !near(got, -2) {
		t.Fatalf("tokens %v, want -2", got)
	}
	if f.metric("sluice.rule.preview.shadow_delayed") != 2 || f.metric("sluice.rule.preview.shadow_rejected") != 1 ||
		f.metric("sluice.rule.preview.delayed") != 0 {
		t.Fatalf("metrics %v", f.h.Metrics())
	}
}

// At most 4096 requests are held per VM: the next one that would be held
// is rejected and its tokens given back.
func TestDelayQueueBounded(t *testing.T) {
	const cfg = `{"rules": [{"name": "wide", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
	  "algorithm_config": {"tokens_per_second": 1000, "burst": 1000, "max_delay_ms": 60000}}]}`
	const maxHeld = 4096
	f := start(t, cfg, 1)
	passed, hs, rejected := f.burst(0, 1000+maxHeld+1, "x-api-key", "k")
	if len(passed) != 1000 || len(hs) != maxHeld || len(rejected) != 1 {
		t.Fatalf("passed %d held %d rejected %d", len(passed), len(hs), len(rejected))
	}
	if got := f.tokens("wide", "k"); !near(got, -maxHeld) {
		t.Fatalf("tokens %v, want %d: the rejected request must take nothing", got, -maxHeld)
	}
	if f.metric("sluice.delay.queue_full") != 1 || f.metric("sluice.rule.wide.rejected") != 1 {
		t.Fatalf("metrics %v", f.h.Metrics())
	}
	if ra := mustAtoi(t, headerOr(t, rejected[0].ResponseHeaders, "retry-after")); ra < 5 {
		t.Fatalf("retry-after %d, want >= the 4.097 s it would have waited", ra)
	}
	// Once some are released there is room again.
	f.stepUntil(nil, time.Second, time.Second)
	if r := f.do("x-api-key", "k"); !r.Paused {
		t.Fatalf("want held after room freed, got %+v", r)
	}
}

// Telemetry shares on_tick: while the tick is fast for held requests,
// reports still go out once per interval, and the telemetry period comes
// back once nothing is held.
func TestDelayKeepsTelemetryInterval(t *testing.T) {
	const cfg = `{"telemetry": {"cluster": "sluice_admin", "token": "tel-s3cret", "interval_ms": 1000},
	  "rules": [{"name": "smooth", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
	  "algorithm_config": {"tokens_per_second": 1, "burst": 1, "max_delay_ms": 30000}}]}`
	f := startTelemetry(t, cfg, 1)
	_, hs, _ := f.burst(0, 11, "x-api-key", "k") // 1 passes, 10 held 1..10 s
	if len(hs) != 10 {
		t.Fatalf("held %d", len(hs))
	}
	reports := func() uint64 {
		return f.metric("sluice.telemetry.sent") + f.metric("sluice.telemetry.skipped")
	}
	for at := 5 * time.Millisecond; at <= 12*time.Second; at += 5 * time.Millisecond {
		f.clock.Advance(5 * time.Millisecond)
		if err := f.h.Tick(context.Background()); err != nil {
			t.Fatal(err)
		}
		for _, c := range f.h.PendingCalls() {
			b := decodeReport(t, c)
			for _, bk := range b.Buckets {
				if bk.Tokens < 0 {
					t.Fatalf("report with negative tokens %v", bk.Tokens)
				}
			}
			answer(t, c, "204")
		}
	}
	if got := reports(); got < 11 || got > 12 {
		t.Fatalf("%d report ticks in 12 s at a 1 s interval while ticking every 5 ms", got)
	}
	for k, h := range hs {
		select {
		case <-h.s.Resumed():
		default:
			t.Fatalf("held request %d not resumed after 12 s", k)
		}
		if _, err := h.s.Complete(ctxTimeout(t), nil); err != nil {
			t.Fatal(err)
		}
	}
	// Nothing held: back to one tick per interval (ticks at 5 ms steps now
	// run on_tick once a second only).
	before := reports()
	for i := 0; i < 400; i++ { // 2 s
		f.clock.Advance(5 * time.Millisecond)
		if err := f.h.Tick(context.Background()); err != nil {
			t.Fatal(err)
		}
		for _, c := range f.h.PendingCalls() {
			answer(t, c, "204")
		}
	}
	if got := reports() - before; got < 1 || got > 2 {
		t.Fatalf("%d report ticks in 2 s after the holds ended", got)
	}
}

// A configuration update while requests are held: the old root context
// keeps ticking until its streams end and resumes them on time.
func TestDelaySurvivesReconfigure(t *testing.T) {
	f := start(t, delayConfig, 1)
	_, hs, _ := f.burst(0, 12, "x-api-key", "k") // 2 held: 100, 200 ms
	if err := f.h.Reconfigure(context.Background(), []byte(delayConfig)); err != nil {
		t.Fatal(err)
	}
	f.stepUntil(hs, 50*time.Millisecond, 300*time.Millisecond)
	if hs[0].resumedAt != 100*time.Millisecond || hs[1].resumedAt != 200*time.Millisecond {
		t.Fatalf("resumed at %v, %v", hs[0].resumedAt, hs[1].resumedAt)
	}
	for _, h := range hs {
		if _, err := h.s.Complete(ctxTimeout(t), nil); err != nil {
			t.Fatal(err)
		}
	}
	// The new root context decides new requests: 1.5 tokens refilled.
	f.clock.Advance(50 * time.Millisecond)
	if r := f.do("x-api-key", "k"); r.Paused || r.Rejected {
		t.Fatalf("%+v", r)
	}
	if r := f.do("x-api-key", "k"); !r.Paused {
		t.Fatalf("%+v", r)
	} else if err := r.Stream.Reset(); err != nil {
		t.Fatal(err)
	}
}

// The hot-key race with delays on: 4 VMs on 4 goroutines send 50
// simultaneous requests each for a fresh key (burst B = 100, rate
// r = 100/s, max delay D = 500 ms), 200 times, plainly and with 30%
// injected CAS mismatches. Asserted every trial: exactly B requests pass at
// once and exactly r*D = 50 are held, so admitted-or-scheduled is
// B + r*D = 150 of 200, never more; the other 50 get 429. Then the clock moves in steps of
// 1/r = 10 ms: the reservations are for 10, 20, ... 500 ms, so after the
// step to t at most r*t held requests may have been released (none before
// its reserved time), and all 50 are released by D. It is exactly r*t
// here because each step reaches exactly one reservation's time.
func TestRaceDelayBound(t *testing.T) {
	const (
		vms, perVM = 4, 50
		burst      = 100
		rate       = 100
		maxDelay   = 500 * time.Millisecond
	)
	cfg := `{"rules": [{"name": "race", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
	  "algorithm_config": {"tokens_per_second": 100, "burst": 100, "max_delay_ms": 500}}]}`
	for _, c := range []struct {
		name   string
		faults wasmhost.Faults
	}{
		{"plain", wasmhost.Faults{}},
		{"injected-cas-mismatch", wasmhost.Faults{CASMismatchRate: 0.3, Seed: 11}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := start(t, cfg, vms)
			f.h.SharedData().InjectFaults(c.faults)
			trials := 200
			if testing.Short() {
				trials = 20
			}
			for trial := 0; trial < trials; trial++ {
				passed, hs, rejected := raceHeld(t, f, vms, perVM, rq("x-api-key", c.name+"-"+strconv.Itoa(trial)))
				if passed != burst || len(hs) != rate*int(maxDelay/time.Millisecond)/1000 || rejected != vms*perVM-passed-len(hs) {
					t.Fatalf("trial %d: %d passed, %d held, %d rejected; want exactly %d, %d (B + r*D = %d admitted or scheduled)",
						trial, passed, len(hs), rejected, burst, rate/2, burst+rate/2)
				}
				step := time.Second / rate
				released := 0
				for at := step; at <= maxDelay; at += step {
					f.clock.Advance(step)
					if err := f.h.Tick(context.Background()); err != nil {
						t.Fatal(err)
					}
					released = 0
					for _, s := range hs {
						select {
						case <-s.Resumed():
							released++
						default:
						}
					}
					if allowed := int(at * rate / time.Second); released > allowed {
						t.Fatalf("trial %d: %d released by %v, more than r*t = %d: released before their time", trial, released, at, allowed)
					} else if released != allowed {
						t.Fatalf("trial %d: %d released by %v, want %d", trial, released, at, allowed)
					}
				}
				for _, s := range hs {
					if _, err := s.Complete(ctxTimeout(t), nil); err != nil {
						t.Fatal(err)
					}
				}
			}
			if n := f.metric("sluice.rule.race.fail_open"); n != 0 {
				t.Errorf("fail_open = %d", n)
			}
			if n := f.metric("sluice.panics_recovered"); n != 0 {
				t.Errorf("panics_recovered = %d", n)
			}
			t.Logf("cas_retries=%d delayed=%d", f.metric("sluice.rule.race.cas_retries"), f.metric("sluice.rule.race.delayed"))
		})
	}
}

// raceHeld sends perVM copies of r on each of vms VMs at once, one
// goroutine per VM, and returns how many passed, the held streams and how
// many were rejected.
func raceHeld(t *testing.T, f *fixture, vms, perVM int, r *wasmhost.Request) (passed int, hs []*wasmhost.Stream, rejected int) {
	t.Helper()
	type out struct {
		passed, rejected int
		held             []*wasmhost.Stream
		err              error
	}
	ch := make(chan out, vms)
	for v := 0; v < vms; v++ {
		go func(vm *wasmhost.VM) {
			var o out
			for i := 0; i < perVM; i++ {
				res, err := vm.HTTP(context.Background(), r)
				switch {
				case err != nil:
					o.err = err
					ch <- o
					return
				case res.Paused:
					o.held = append(o.held, res.Stream)
				case res.Rejected:
					o.rejected++
				default:
					o.passed++
				}
			}
			ch <- o
		}(f.h.VM(v))
	}
	for v := 0; v < vms; v++ {
		o := <-ch
		if o.err != nil {
			t.Fatalf("HTTP: %v", o.err)
		}
		passed += o.passed
		rejected += o.rejected
		hs = append(hs, o.held...)
	}
	return passed, hs, rejected
}

// TestDelayRandomizedNoTrap mixes, at random, requests of arbitrary cost
// (header values of any kind), resets of held streams, completions, clock
// steps with ticks and configuration updates, on two VMs sharing the
// bucket. The VMs never trap or panic, the bucket's debt never exceeds
// rate * max_delay, and in the end every held stream has been resumed or
// reset.
func TestDelayRandomizedNoTrap(t *testing.T) {
	const cfg = `{"rules": [{"name": "r", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
	  "algorithm_config": {"tokens_per_second": 20, "burst": 20, "max_delay_ms": 2000, "cost_source": "header:x-cost"}}]}`
	f := start(t, cfg, 2)
	rng := rand.New(rand.NewSource(3))
	n := 3000
	if testing.Short() {
		n = 300
	}
	costs := []string{"1", "0.5", "7", "20", "21", "0", "-3", "NaN", "1e400", "\xff\x00", "3.25"}
	var hs []*wasmhost.Stream
	for i := 0; i < n; i++ {
		switch op := rng.Intn(10); {
		case op < 6:
			r := rq("x-api-key", []string{"a", "b"}[rng.Intn(2)], "x-cost", costs[rng.Intn(len(costs))], "x-sluice-delay-ms", "1")
			res := f.doOn(rng.Intn(2), r)
			if res.Paused {
				hs = append(hs, res.Stream)
			} else if v, ok := header(res.UpstreamHeaders, "x-sluice-delay-ms"); ok && !res.Rejected {
				t.Fatalf("client-sent delay header %q passed through", v)
			}
		case op == 6 && len(hs) > 0:
			k := rng.Intn(len(hs))
			select {
			case <-hs[k].Resumed():
				_, err := hs[k].Complete(ctxTimeout(t), nil)
				if err != nil {
					t.Fatal(err)
				}
			default:
				if err := hs[k].Reset(); err != nil {
					t.Fatal(err)
				}
			}
			hs = append(hs[:k], hs[k+1:]...)
		case op == 7:
			if err := f.h.Reconfigure(context.Background(), []byte(cfg)); err != nil {
				t.Fatal(err)
			}
		default:
			f.clock.Advance(time.Duration(rng.Intn(300)) * time.Millisecond)
			if err := f.h.Tick(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		for _, key := range []string{"a", "b"} {
			if b, ok := f.bucket("r", key); ok && b.Tokens < -20*2-1e-6 {
				t.Fatalf("bucket %s in debt %v beyond rate*max_delay", key, b.Tokens)
			}
		}
	}
	for step := 0; step < 500; step++ { // 2.5 s: past every held request's time
		f.clock.Advance(5 * time.Millisecond)
		if err := f.h.Tick(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range hs {
		if _, err := s.Complete(ctxTimeout(t), nil); err != nil {
			t.Fatalf("held stream never resumed: %v", err)
		}
	}
	for _, vm := range f.h.VMs() {
		if err := vm.Err(); err != nil {
			t.Fatal(err)
		}
	}
	if n := f.metric("sluice.panics_recovered"); n != 0 {
		t.Fatalf("panics_recovered = %d: %v", n, f.h.LogsAtLeast(wasmhost.LogLevelWarn))
	}
	t.Logf("delayed=%d cancelled=%d", f.metric("sluice.rule.r.delayed"), f.metric("sluice.delay.cancelled"))
}

// Bounded storage never takes a way whose bucket is in debt (or empty): a
// newcomer to a group whose ways are all active is decided by the group's
// overflow bucket, and the debt (held requests' reservations) is not
// forgiven.
func TestDelayOverflowSparesDebt(t *testing.T) {
	const maxKeys = 4
	f := start(t, `{"rules": [{"name": "per-ip", "max_keys": 4, "limit_keys": ["ip:address"], "algorithm": "token_bucket",
	  "algorithm_config": {"rps": 1, "burst": 10, "max_delay_ms": 10000}}]}`, 1)
	ids := findIdentities(t, 0, 5, maxKeys, 0) // one group of four ways
	b := ids[4]
	now := float64(t0.Unix())
	// A owes 3 tokens (held requests), C is empty, D and E are in debt too:
	// every way is active.
	var ways [][]byte
	tokens := []float64{-3, 0, -1, -2}
	for i, tk := range tokens {
		ways = append(ways, state.EncodeSlot(nil, testFP(ipOf(ids[i])), state.Bucket{Tokens: tk, LastRefill: now}, ipOf(ids[i])))
	}
	if st := f.h.SharedData().Set(state.SlotKey("per-ip", 0), state.AppendGroup(nil, ways, 0, ways[0]), 0); st != wasmhost.StatusOK {
		t.Fatalf("set: %d", st)
	}
	if r := f.do("@ip", ipOf(b)+":1"); r.Rejected || r.Paused {
		t.Fatalf("B: %+v", r)
	}
	checkWays(t, f, "per-ip", 0, ids[:4], tokens)
	if n := f.metric("sluice.rule.per-ip.overflowed"); n != 1 {
		t.Fatalf("overflowed = %d, want 1", n)
	}
}
