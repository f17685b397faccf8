package filter_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/plugin/wasmhost"
	"github.com/sluice-rl/sluice/shared/limiter"
	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/state"
)

// aligned is the first day boundary (Unix time) after t0: windows and
// periods align to the epoch, so tests start there.
var aligned = time.Unix((t0.Unix()/86400+1)*86400, 0)

func windowRule(name, alg, cfg string) string {
	return `{"legacy_headers": true, "rules": [{"name": "` + name + `", "limit_keys": ["header:x-api-key"], "algorithm": "` + alg +
		`", "algorithm_config": ` + cfg + `}]}`
}

// TestRollingWindowNominetHourByHour: the Nominet rolling window's combined example in the
// compiled filter. 10,000 per rolling 24 hours, at most 1,000 per hour,
// recalculated hourly. Each request costs 100 (cost_source), so an hour's
// 1,000 is 10 requests: the client sends 11 an hour for 48 hours and gets
// 10 an hour for 10 hours, then nothing until hour 24, when hour 0's use
// leaves the window, and so on. Hour 48 is replayed with unit-cost requests:
// 1,000 of 1,001 pass.
func TestRollingWindowNominetHourByHour(t *testing.T) {
	f := start(t, windowRule("nominet", "rolling_window", `{"limit": 10000, "window_seconds": 86400,
	  "period_seconds": 3600, "max_per_period": 1000, "cost_source": "header:x-cost", "default_cost": 1}`), 1)
	for h := 0; h < 48; h++ {
		f.clock.Set(aligned.Add(time.Duration(h)*time.Hour + 5*time.Minute))
		got := 0
		var last *wasmhost.Result
		for i := 0; i < 11; i++ {
			res := f.do("x-api-key", "client", "x-cost", "100")
			if !res.Rejected {
				got++
			} else {
				last = res
			}
		}
		want := 0
		if h%24 < 10 {
			want = 10
		}
		if got != want {
			t.Fatalf("hour %d: admitted %d requests of cost 100, want %d", h, got, want)
		}
		if h == 10 { // the window is used up: more quota when hour 0 leaves it, at hour 24
			wantT := int64((24*time.Hour - 10*time.Hour - 5*time.Minute).Seconds())
			checkRejected(t, last, "nominet", "rolling_window_exceeded", `"nominet";q=10000;w=86400`, "10000", wantT)
		}
		if h == 3 { // capped for the hour: more quota at the next hour
			checkRejected(t, last, "nominet", "rolling_window_exceeded", `"nominet";q=10000;w=86400`, "10000", 55*60)
		}
	}
	f.clock.Set(aligned.Add(48 * time.Hour))
	if got := f.admitted(1001, "x-api-key", "client"); got != 1000 {
		t.Fatalf("hour 48 with unit costs: admitted %d, want 1000", got)
	}
}

// checkRejected checks a window rule's 429: draft-10 fields, legacy fields,
// and Retry-After never earlier than t.
func checkRejected(t *testing.T, res *wasmhost.Result, rule, reason, policyHdr, limit string, wantT int64) {
	t.Helper()
	if res == nil || !res.Rejected || res.Local == nil {
		t.Fatalf("not rejected: %+v", res)
	}
	hs := res.Local.Headers
	for name, want := range map[string]string{
		"x-ratelimit-reason":  reason,
		"ratelimit-policy":    policyHdr,
		"ratelimit-limit":     limit,
		"ratelimit-remaining": "0",
		"ratelimit-reset":     fmt.Sprint(wantT),
		"ratelimit":           fmt.Sprintf(`"%s";r=0;t=%d`, rule, wantT),
	} {
		if got := mustHeader(t, hs, name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	if retry := mustAtoi(t, mustHeader(t, hs, "retry-after")); int64(retry) < wantT {
		t.Errorf("retry-after %d is earlier than t=%d", retry, wantT)
	}
}

// TestFixedWindowBoundaryBurstWasm: the documented boundary burst. 10 per
// aligned minute: 10 pass at :59, 10 more at :00 one second later.
func TestFixedWindowBoundaryBurstWasm(t *testing.T) {
	f := start(t, windowRule("fw", "fixed_window", `{"limit": 10, "window_seconds": 60}`), 1)
	f.clock.Set(aligned.Add(59 * time.Second))
	if got := f.admitted(15, "x-api-key", "k"); got != 10 {
		t.Fatalf("before the boundary: %d admitted, want 10", got)
	}
	checkRejected(t, f.do("x-api-key", "k"), "fw", "fixed_window_exceeded", `"fw";q=10;w=60`, "10", 1)
	f.clock.Advance(time.Second)
	res := f.do("x-api-key", "k")
	if res.Rejected {
		t.Fatal("rejected right after the boundary")
	}
	// Allowed: 9 left; the window's use resets at its end, 60 s away.
	for name, want := range map[string]string{
		"ratelimit": `"fw";r=9;t=60`, "ratelimit-limit": "10", "ratelimit-remaining": "9",
		"ratelimit-reset": "60", "ratelimit-policy": `"fw";q=10;w=60`,
	} {
		if got, _ := header(res.ResponseHeaders, name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	if got := f.admitted(15, "x-api-key", "k"); got != 9 {
		t.Fatalf("after the boundary: %d more admitted, want 9 (20 within 2 seconds in all)", got)
	}
}

// TestSlidingWindowEstimateWasm: 10 per minute; 8 used in the previous
// minute; 15 s into the next, the estimate is 8*0.75 = 6, so 4 pass, and a
// rejection waits until 8*(1-f) <= 5 (f = 3/8, 7.5 s later: t = 8).
func TestSlidingWindowEstimateWasm(t *testing.T) {
	f := start(t, windowRule("sw", "sliding_window", `{"limit": 10, "window_seconds": 60}`), 1)
	f.clock.Set(aligned.Add(30 * time.Second))
	if got := f.admitted(8, "x-api-key", "k"); got != 8 {
		t.Fatalf("first minute: %d admitted", got)
	}
	f.clock.Set(aligned.Add(75 * time.Second))
	if got := f.admitted(10, "x-api-key", "k"); got != 4 {
		t.Fatalf("15 s into the second minute: %d admitted, want 4", got)
	}
	checkRejected(t, f.do("x-api-key", "k"), "sw", "sliding_window_exceeded", `"sw";q=10;w=60`, "10", 8)
	f.clock.Set(aligned.Add(83 * time.Second)) // f = 23/60: 8*(37/60) = 4.93, +4 = 8.93: one passes
	if got := f.admitted(3, "x-api-key", "k"); got != 1 {
		t.Fatalf("at 23 s: %d admitted, want 1", got)
	}
}

// TestWindowRace: the race test for every windowed algorithm, as
// TestRaceExactBurst for token buckets: 4 VMs on 4 goroutines, a fresh key
// per trial, 200 trials, 100 requests against a quota of 50: exactly 50
// admitted, in bounded, exact (with injected CAS mismatches) and
// overflowing storage (max_keys 2: after the first two trials every trial's
// key is decided by the group's overflow window, which they share: the
// first of them is admitted the quota, the later ones nothing).
func TestWindowRace(t *testing.T) {
	algs := map[string]string{
		"fixed_window":   `{"limit": 50, "window_seconds": 86400}`,
		"sliding_window": `{"limit": 50, "window_seconds": 86400}`,
		"rolling_window": `{"limit": 80, "window_seconds": 86400, "period_seconds": 3600, "max_per_period": 50}`,
	}
	for alg, algCfg := range algs {
		for _, mode := range []struct {
			name, maxKeys string
			faults        wasmhost.Faults
		}{
			{"bounded", "", wasmhost.Faults{}},
			{"exact-cas-mismatch", `"max_keys": 0, `, wasmhost.Faults{CASMismatchRate: 0.3, Seed: 7}},
			{"overflowing", `"max_keys": 2, `, wasmhost.Faults{}},
		} {
			t.Run(alg+"/"+mode.name, func(t *testing.T) {
				cfg := `{"rules": [{"name": "race", ` + mode.maxKeys + `"limit_keys": ["header:x-api-key"], "algorithm": "` + alg +
					`", "algorithm_config": ` + algCfg + `}]}`
				f := start(t, cfg, 4)
				f.clock.Set(aligned.Add(time.Hour / 2))
				f.h.SharedData().InjectFaults(mode.faults)
				trials := 200
				if testing.Short() {
					trials = 20
				}
				for trial := 0; trial < trials; trial++ {
					want := 50
					if mode.name == "overflowing" && trial > 2 {
						want = 0
					}
					if got := race(t, f, 4, 25, rq("x-api-key", fmt.Sprintf("k-%d", trial))); got != want {
						t.Fatalf("trial %d: %d of 100 admitted, want exactly %d (fail_open=%d)",
							trial, got, want, f.metric("sluice.rule.race.fail_open"))
					}
				}
				if n := f.metric("sluice.rule.race.fail_open"); n != 0 {
					t.Errorf("fail_open = %d", n)
				}
				if n := f.metric("sluice.rule.race.overflowed"); mode.name == "overflowing" && n != uint64(trials-2)*100 {
					t.Errorf("overflowed = %d, want every request after the first two trials", n)
				}
			})
		}
	}
}

// TestWindowStackingRaceRefunds: a window rule refunds the use of requests
// a later rule rejected, under contention.
func TestWindowStackingRaceRefunds(t *testing.T) {
	const cfg = `{"policies": [
	  {"name": "users", "rules": [{"name": "per-user", "limit_keys": ["header:x-user"], "algorithm": "rolling_window",
	    "algorithm_config": {"limit": 50, "window_seconds": 3600, "period_seconds": 60}}]},
	  {"name": "ips", "rules": [{"name": "per-ip", "limit_keys": ["ip:address"], "algorithm": "fixed_window",
	    "algorithm_config": {"limit": 30, "window_seconds": 3600}}]}
	]}`
	f := start(t, cfg, 4)
	f.clock.Set(aligned.Add(10 * time.Second))
	for trial := 0; trial < 20; trial++ {
		user := fmt.Sprintf("user-%d", trial)
		ip := fmt.Sprintf("10.3.0.%d", trial)
		if got := race(t, f, 4, 50, rq("x-user", user, "@ip", ip+":9")); got != 30 {
			t.Fatalf("trial %d: %d admitted, want 30", trial, got)
		}
		// The user's window holds exactly the 30 admitted.
		if got := f.admitted(100, "x-user", user, "@ip", fmt.Sprintf("10.4.0.%d:1", trial)); got != 20 {
			t.Fatalf("trial %d: user has %d left, want 20 (refunds lost)", trial, got)
		}
	}
	if n := f.metric("sluice.refund_failed"); n != 0 {
		t.Errorf("refund_failed = %d", n)
	}
}

// TestWindowStorageFormats: exact and slot values, per-algorithm prefixes,
// and a rule changing algorithm never reads the other's state.
func TestWindowStorageFormats(t *testing.T) {
	cfg := `{"rules": [
	  {"name": "a", "max_keys": 0, "limit_keys": ["header:x-a"], "algorithm": "fixed_window", "algorithm_config": {"limit": 5, "window_seconds": 60}},
	  {"name": "b", "limit_keys": ["header:x-b"], "algorithm": "rolling_window", "algorithm_config": {"limit": 5, "window_seconds": 600, "period_seconds": 60}}
	]}`
	f := start(t, cfg, 1)
	f.clock.Set(aligned.Add(90 * time.Second))
	f.do("x-a", "id:1")
	f.do("x-b", "id:2")
	f.clock.Set(aligned.Add(150 * time.Second))
	f.do("x-b", "id:2")
	start := float64(aligned.Unix())
	want := state.EncodeWindow(nil, &state.Window{Start: start + 60, N: 1, Counts: [state.MaxCounts]float64{1}})
	if v, _, st := f.h.SharedData().Get("fw:a:id:1"); st != wasmhost.StatusOK || string(v) != string(want) || v[0] != state.WindowFormat {
		t.Errorf("fw exact value %x (status %d), want %x", v, st, want)
	}
	slot := state.WindowSlotKey(state.PrefixRollingWindow, "b", groupOf("id:2", policy.DefaultMaxKeys))
	v, _, _ := f.h.SharedData().Get(slot)
	rec := state.EncodeWindowSlot(nil, testFP("id:2"), &state.Window{Start: start + 120, N: 2, Counts: [state.MaxCounts]float64{1, 1}}, "id:2")
	want = state.AppendGroup(nil, nil, 0, rec)
	if string(v) != string(want) || v[0] != state.GroupFormatV1 || v[2] != state.WindowSlotFormat {
		t.Errorf("rw group value %x, want %x", v, want)
	}
	// A slot value in the text form of earlier versions (a group of one
	// way) keeps counting.
	f.h.SharedData().Set(slot, []byte(string(state.AppendHex16(nil, testFP("id:2")))+fmt.Sprintf(":%d:3,1:id:2", int64(start)+120)), 0)
	if res := f.do("x-b", "id:2"); res.Rejected {
		t.Fatal("id:2 rejected with 4 of 5 used")
	} else if got, _ := remainingField(res.ResponseHeaders); got != "0" {
		t.Errorf("after the text value's 4 uses: remaining %q, want 0", got)
	}
	// Rule a becomes a token bucket: its identities start full under tb:.
	if err := f.h.Reconfigure(t.Context(), []byte(strings.Replace(cfg,
		`"algorithm": "fixed_window", "algorithm_config": {"limit": 5, "window_seconds": 60}`,
		`"algorithm": "token_bucket", "algorithm_config": {"rps": 0.001, "burst": 3}`, 1))); err != nil {
		t.Fatal(err)
	}
	if got := f.admitted(5, "x-a", "id:1"); got != 3 {
		t.Errorf("after the change to token_bucket: %d admitted, want a full burst of 3", got)
	}
	if n := logsContaining(f.h, wasmhost.LogLevelTrace, "undecodable"); n != 0 {
		t.Errorf("%d undecodable-state logs: an algorithm read another's state", n)
	}
}

// TestWindowRetryAfterNeverEarly: over many clients and times, Retry-After
// >= t >= the true wait.
func TestWindowRetryAfterNeverEarly(t *testing.T) {
	f := start(t, windowRule("rw", "rolling_window", `{"limit": 3, "window_seconds": 300, "period_seconds": 60}`), 1)
	for i := 0; i < 20; i++ {
		f.clock.Set(aligned.Add(time.Duration(i*37) * time.Second))
		key := fmt.Sprintf("c%d", i)
		f.admitted(3, "x-api-key", key)
		res := f.do("x-api-key", key)
		if !res.Rejected {
			t.Fatalf("client %d: 4th request admitted", i)
		}
		tt := mustAtoi(t, strings.TrimPrefix(mustHeader(t, res.Local.Headers, "ratelimit"), `"rw";r=0;t=`))
		retry := mustAtoi(t, mustHeader(t, res.Local.Headers, "retry-after"))
		trueWait := 300 - (i*37)%60 // the first request's period leaves the window
		if tt < trueWait || retry < tt || retry != limiter.RetryAfter(float64(trueWait), key) && retry < tt {
			t.Errorf("client %d: t=%d retry=%d, true wait %d", i, tt, retry, trueWait)
		}
	}
}

// TestWindowBackwardsClockWasm: a clock jumping back never rotates a window
// nor mints quota; time moving past the stored window does.
func TestWindowBackwardsClockWasm(t *testing.T) {
	for _, alg := range []string{"fixed_window", "sliding_window", "rolling_window"} {
		t.Run(alg, func(t *testing.T) {
			cfg := `{"limit": 3, "window_seconds": 60}`
			if alg == "rolling_window" {
				cfg = `{"limit": 3, "window_seconds": 60, "period_seconds": 20}`
			}
			f := start(t, windowRule("c", alg, cfg), 1)
			f.clock.Set(aligned.Add(30 * time.Second))
			if got := f.admitted(4, "x-api-key", "k"); got != 3 {
				t.Fatalf("%d admitted, want 3", got)
			}
			for _, back := range []time.Duration{-time.Hour, -31 * time.Second, -1 * time.Second} {
				f.clock.Set(aligned.Add(30*time.Second + back))
				if got := f.admitted(2, "x-api-key", "k"); got != 0 {
					t.Fatalf("clock back %v: %d admitted", back, got)
				}
			}
			f.clock.Set(aligned.Add(200 * time.Second)) // the use has left every window
			if got := f.admitted(4, "x-api-key", "k"); got != 3 {
				t.Fatalf("after the window: %d admitted, want 3", got)
			}
		})
	}
}

// TestWindowFailsOpen: shared-data failures let windowed rules' requests
// through and count fail_open, in both storage modes.
func TestWindowFailsOpen(t *testing.T) {
	for _, maxKeys := range []string{"65536", "0"} {
		t.Run("max_keys="+maxKeys, func(t *testing.T) {
			f := start(t, `{"rules": [{"name": "f", "max_keys": `+maxKeys+`, "limit_keys": ["header:x-api-key"],
			  "algorithm": "fixed_window", "algorithm_config": {"limit": 1, "window_seconds": 3600}}]}`, 1)
			f.h.SharedData().InjectFaults(wasmhost.Faults{GetFailRate: 1, GetFailStatus: wasmhost.StatusInternalFailure})
			if got := f.admitted(20, "x-api-key", "k"); got != 20 {
				t.Fatalf("%d of 20 admitted during a shared-data failure", got)
			}
			if got := f.metric("sluice.rule.f.fail_open"); got != 20 {
				t.Errorf("fail_open = %d, want 20", got)
			}
			f.h.SharedData().InjectFaults(wasmhost.Faults{})
			if got := f.admitted(3, "x-api-key", "k"); got != 1 {
				t.Errorf("after recovery %d admitted, want 1", got)
			}
		})
	}
}

// Window groups follow probe's choice of way (TestBoundedSlotReuseAndOverflow):
// a new way while the group has fewer than four, then a fresh window's way
// (no use left inside its window); when every way is active the newcomer is
// decided by the group's overflow window and the ways are written back
// unchanged. A way claimed while the overflow window holds use starts as a
// copy of it (TestBoundedClaimCopiesOverflow).
func TestWindowGroupWays(t *testing.T) {
	const maxKeys = 4
	f := start(t, `{"rules": [{"name": "rw", "max_keys": 4, "limit_keys": ["ip:address"], "algorithm": "rolling_window",
	  "algorithm_config": {"limit": 10, "window_seconds": 60, "period_seconds": 6}}]}`, 1)
	key := state.WindowSlotKey(state.PrefixRollingWindow, "rw", 0)
	holders := func() []string {
		t.Helper()
		var ids []string
		for i, w := range groupWays(t, f.h.SharedData(), key) {
			var win state.Window
			fp, id, err := state.DecodeWindowSlot(w, &win)
			if err != nil || fp != testFP(string(id)) {
				t.Fatalf("way %d: %v (%x)", i, err, w)
			}
			ids = append(ids, string(id))
		}
		return ids
	}
	ids := findIdentities(t, 0, 6, maxKeys, 0)
	send := func(id, n int) {
		for i := 0; i < n; i++ {
			if res := f.doOn(0, ipRequest(id)); res.Rejected {
				t.Fatalf("%s rejected", ipOf(id))
			}
		}
	}
	send(ids[0], 1) // 9 left
	f.clock.Advance(30 * time.Second)
	send(ids[1], 5) // 5 left
	send(ids[2], 3) // 7 left
	send(ids[3], 6) // 4 left
	if got, want := holders(), []string{ipOf(ids[0]), ipOf(ids[1]), ipOf(ids[2]), ipOf(ids[3])}; !slices.Equal(got, want) {
		t.Fatalf("ways %q, want %q", got, want)
	}
	ways := holders()
	// Every way is active: the newcomer is decided by the overflow window
	// (the rule's limit, 10, for every overflowing identity of the group).
	for i := 0; i < 10; i++ {
		if res := f.doOn(0, ipRequest(ids[4])); res.Rejected {
			t.Fatalf("overflowing request %d rejected", i)
		}
	}
	if res := f.doOn(0, ipRequest(ids[4])); !res.Rejected {
		t.Fatal("11th overflowing request admitted: the overflow window's limit is 10")
	}
	if got := holders(); !slices.Equal(got, ways) {
		t.Fatalf("after overflow decisions: ways %q, want %q", got, ways)
	}
	if n := f.metric("sluice.rule.rw.overflowed"); n != 11 {
		t.Fatalf("overflowed = %d, want 11", n)
	}
	// The others kept their exact windows: ids[3] has 4 left.
	res := f.doOn(0, ipRequest(ids[3]))
	if got, _ := remainingField(res.ResponseHeaders); got != "3" {
		t.Fatalf("ids[3] after the overflow decisions: remaining %q, want 3", got)
	}
	// 31 s later ids[0]'s one use has left its window (its way is free),
	// The overflow window's ten have not: ids[4] would claim ids[0]'s way
	// with a copy of the overflow window, which has no quota left.
	f.clock.Advance(31 * time.Second)
	if res := f.doOn(0, ipRequest(ids[4])); !res.Rejected {
		t.Fatal("ids[4] admitted by claiming a free way after draining the overflow window")
	}
	if got := holders(); !slices.Equal(got, ways) {
		t.Fatalf("a refused claim changed the ways: %q, want %q", got, ways)
	}
	// 61 s later every use has left its window: a newcomer takes the first
	// fresh way, without an overflow decision.
	f.clock.Advance(61 * time.Second)
	send(ids[5], 1)
	if got := holders(); got[0] != ipOf(ids[5]) {
		t.Fatalf("ways %q, want the newcomer in way 0", got)
	}
	if n := f.metric("sluice.rule.rw.overflowed"); n != 11 { // a refused claim is not an overflow decision
		t.Fatalf("overflowed = %d after reusing a fresh window's way, want still 11", n)
	}
}

// TestWindowRaceClaims is TestRaceClaimNoDuplicate's "clock" mode for
// window groups: the window of another identity Y leaves its rolling window
// between two of the racing VMs' clock reads, so some VMs find only Z's way
// fresh and others find Y's fresh too (the first). Exactly the limit must
// be admitted in every trial (one window for X).
func TestWindowRaceClaims(t *testing.T) {
	const (
		maxKeys = 2
		limit   = 100
		step    = 2 * time.Millisecond
	)
	clock := &raceClock{base: t0, step: step, start: time.Now()}
	h, err := wasmhost.New(context.Background(), wasmhost.Config{
		Wasm: pluginWasm(t), VMs: 4, Clock: clock, SharedData: seededSharedData(),
		PluginConfig: []byte(fmt.Sprintf(`{"rules": [{"name": "race", "max_keys": %d, "limit_keys": ["header:x-api-key"],
		  "algorithm": "rolling_window", "algorithm_config": {"limit": %d, "window_seconds": 60, "period_seconds": 1}}]}`, maxKeys, limit)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close(context.Background()) })
	f := &fixture{t: t, h: h}
	sd := h.SharedData()
	key := state.WindowSlotKey(state.PrefixRollingWindow, "race", 0)
	trials := 300
	if testing.Short() {
		trials = 60
	}
	for trial := 0; trial < trials; trial++ {
		x := fmt.Sprintf("x-%d", trial)
		// Y's use leaves the window at boundary, between read r0+k and
		// r0+k+1 of this trial; Z's window is long fresh.
		boundary := t0.Add(time.Duration(trial+1) * 100 * time.Second)
		k := 1 + trial%8
		clock.base = boundary.Add(-time.Duration(float64(clock.reads()+int64(k))+0.5) * step)
		b := float64(boundary.Unix())
		y := state.Window{Start: b - 60, N: 1, Counts: [state.MaxCounts]float64{1}}
		z := state.Window{Start: b - 1000, N: 1, Counts: [state.MaxCounts]float64{1}}
		ways := [][]byte{state.EncodeWindowSlot(nil, testFP("y"), &y, "y")}
		sd.Set(key, state.AppendGroup(nil, ways, 1, state.EncodeWindowSlot(nil, testFP("z"), &z, "z")), 0)
		clock.arm(16, nil)
		if got := race(t, f, 4, 250, rq("x-api-key", x)); got != limit {
			v, _, _ := sd.Get(key)
			t.Fatalf("trial %d: %d of 1000 admitted, want exactly %d (two windows for one identity?); group %q", trial, got, limit, v)
		}
	}
	if n, _ := h.Metric("sluice.rule.race.fail_open"); n != 0 {
		t.Errorf("fail_open = %d", n)
	}
}
