package scenario

// Fleet mode for global windows and quotas: the rule leases counts of
// the rate limit service's current window (answered here as the admin
// does, with duration_until_reset the time to the window's end). Checked:
// the ask carries no rate override; a lease pays exactly its counts until
// the window's end and lapses there (a new window asks again, the old
// counts are not spent); a refusal with nothing left holds until the
// window's end (Retry-After the window's remainder, no call meanwhile); an
// idle pool returns its counts naming the window they were leased in
// (sluice_window, its start in unix ms): a fixed window's on the epoch, a
// quota's calendar period in its zone. A sliding window's refusal holds one
// sync interval only (its estimate falls within the window); a rolling
// window's lease ends, and its return is named, by its sub-period.

import (
	"strconv"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

func init() {
	register(Case{Name: "FleetGlobalFixedWindow", Run: fleetFixedWindow})
	register(Case{Name: "FleetGlobalQuotaReturnsNameTheirPeriod", Run: fleetQuota})
	register(Case{Name: "FleetGlobalSlidingWindowAsksAgainWithinItsWindow", Run: fleetSlidingWindow})
	register(Case{Name: "FleetGlobalRollingWindowLeasesEndWithTheirSubPeriod", Run: fleetRollingWindow})
}

func fleetWindowConfig(algorithm, config string) string {
	return `{"fleet": {"cluster": "rls", "timeout_ms": 50, "sync_interval_ms": 100, "lease_ttl_ms": 1000, "lease_min": 3, "lease_max": 4,
	  "on_backend_down": "deny"},
	 "rules": [{"name": "w", "scope": "global", "limit_keys": ["header:x-tenant"], "algorithm": "` + algorithm + `",
	   "algorithm_config": ` + config + `}]}`
}

// windowAsk checks a request-path ask of rule w and returns the counts asked.
func windowAsk(t testing.TB, r *rlsv3.RateLimitRequest) uint64 {
	t.Helper()
	if len(r.Descriptors) != 1 {
		t.Fatalf("%d descriptors, want 1", len(r.Descriptors))
	}
	d := r.Descriptors[0]
	if es := d.GetEntries(); len(es) != 2 || es[0].Value != "w" || !isHex(es[1].Value, 32) {
		t.Fatalf("descriptor entries %v", es)
	}
	if d.GetLimit() != nil {
		t.Errorf("a window's ask carries a rate override %v", d.GetLimit())
	}
	n := d.GetHitsAddend().GetValue()
	if n < 3 || n > 4 {
		t.Fatalf("hits_addend %d outside [lease_min 3, lease_max 4]", n)
	}
	return n
}

func windowStatus(code rlsv3.RateLimitResponse_Code, remaining uint32, reset time.Duration) *rlsv3.RateLimitResponse_DescriptorStatus {
	return &rlsv3.RateLimitResponse_DescriptorStatus{Code: code, LimitRemaining: remaining, DurationUntilReset: durationpb.New(reset)}
}

// leaseWindow sends one request of tenant, answers its ask with a grant of
// the window's remaining time, and returns the counts leased.
func leaseWindow(t *testing.T, h Host, tenant string, reset time.Duration) uint64 {
	t.Helper()
	res := do(t, h, req("x-tenant", tenant))
	if !res.Paused {
		t.Fatalf("%s: not paused for a lease (rejected %v)", tenant, res.Rejected)
	}
	c := onlyCall(t, h, tenant+"'s ask")
	n := windowAsk(t, rlsCall(t, c, "node-a"))
	answerRLS(t, h, c, "2", windowStatus(rlsv3.RateLimitResponse_OK, 5, reset))
	if settled(t, tenant, res).Rejected {
		t.Fatalf("%s: rejected with a lease granted", tenant)
	}
	return n
}

// spendLease leases tenant's counts (leaseWindow) and spends them all from
// the pool, without another call.
func spendLease(t *testing.T, h Host, tenant string, reset time.Duration) {
	t.Helper()
	lease := leaseWindow(t, h, tenant, reset)
	if got := admitted(t, h, int(lease)-1, req("x-tenant", tenant)); got != int(lease)-1 || len(pending(t, h)) != 0 {
		t.Fatalf("%d of the %d leased counts admitted, %d calls", got+1, lease, len(pending(t, h)))
	}
}

// idleReturn steps past the idle time and returns the sync's return
// descriptor, answered.
func idleReturn(t *testing.T, h Host) *ratelimitv3.RateLimitDescriptor {
	t.Helper()
	step(t, h, 300*time.Millisecond)
	c := onlyCall(t, h, "the idle pool's sync")
	r := rlsCall(t, c, "node-a")
	if len(r.Descriptors) != 1 || !isReturn(r.Descriptors[0]) {
		t.Fatalf("sync of an idle pool: %v, want one return", r.Descriptors)
	}
	answerRLS(t, h, c, "2", windowStatus(rlsv3.RateLimitResponse_OK, 9, time.Minute))
	return r.Descriptors[0]
}

func entry(d *ratelimitv3.RateLimitDescriptor, key string) string {
	for _, e := range d.GetEntries() {
		if e.Key == key {
			return e.Value
		}
	}
	return ""
}

func fleetFixedWindow(t *testing.T, start Starter) {
	// 30 s into the minute [12:00, 12:01).
	t0 := time.Date(2026, 3, 1, 12, 0, 30, 0, time.UTC)
	h := mustStart(t, start, Options{NodeID: "node-a", Start: t0,
		Config: []byte(fleetWindowConfig("fixed_window", `{"limit": 10, "window_seconds": 60}`))})
	acme := req("x-tenant", "acme")

	spendLease(t, h, "acme", 30*time.Second)

	// The pool is empty; the service has nothing left in this window.
	res := do(t, h, acme)
	c := onlyCall(t, h, "the second ask")
	windowAsk(t, rlsCall(t, c, "node-a"))
	answerRLS(t, h, c, "2", windowStatus(rlsv3.RateLimitResponse_OVER_LIMIT, 0, 30*time.Second))
	final := settled(t, "refused ask", res)
	if !final.Rejected {
		t.Fatal("admitted after the window's refusal")
	}
	// The window's remaining 30 s, plus the per-client jitter of at most 50%.
	if ra, _ := strconv.Atoi(header(final.ResponseHeaders, "retry-after")); ra < 30 || ra > 45 {
		t.Errorf("Retry-After %q, want the window's remaining 30 s (+ up to 50%% jitter)", header(final.ResponseHeaders, "retry-after"))
	}
	// The refusal holds until the window's end, with no call.
	step(t, h, 10*time.Second)
	if res := do(t, h, acme); !res.Rejected || res.Paused {
		t.Fatalf("10 s later in the spent window: rejected %v paused %v", res.Rejected, res.Paused)
	}
	step(t, h, 10*time.Second)
	for _, c := range pending(t, h) {
		if r := rlsCall(t, c, "node-a"); len(r.Descriptors) > 0 && !isReturn(r.Descriptors[0]) {
			t.Fatalf("asked %v for a spent window", r.Descriptors)
		}
		answerRLS(t, h, c, "2", windowStatus(rlsv3.RateLimitResponse_OK, 0, 10*time.Second))
	}

	// The next window: a new lease, spent in part; the rest goes back when
	// the pool is idle, naming 12:01 (unix ms).
	h.Advance(10 * time.Second)
	lease := leaseWindow(t, h, "acme", time.Minute)
	d := idleReturn(t, h)
	wantStart := strconv.FormatInt(time.Date(2026, 3, 1, 12, 1, 0, 0, time.UTC).UnixMilli(), 10)
	if got := entry(d, "sluice_window"); got != wantStart || d.GetHitsAddend().GetValue() != lease-1 {
		t.Errorf("return of %d naming window %q, want %d naming %s", d.GetHitsAddend().GetValue(), got, lease-1, wantStart)
	}
	wantMetrics(t, h, map[string]uint64{"sluice.rule.w.global_returned": lease - 1, "sluice.rule.w.global_denied": 1})
	noRecoveredPanics(t, h)
}

func fleetQuota(t *testing.T, start Starter) {
	// 2026-01-31 23:30 in Berlin: 30 minutes before the month ends.
	h := mustStart(t, start, Options{NodeID: "node-a", Start: time.Date(2026, 1, 31, 22, 30, 0, 0, time.UTC),
		Config: []byte(fleetWindowConfig("quota", `{"limit": 100, "period": "month", "time_zone": "Europe/Berlin"}`))})
	lease := leaseWindow(t, h, "acme", 30*time.Minute)
	d := idleReturn(t, h)
	january := strconv.FormatInt(time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("CET", 3600)).UnixMilli(), 10)
	if got := entry(d, "sluice_window"); got != january || d.GetHitsAddend().GetValue() != lease-1 {
		t.Errorf("return of %d naming %q, want %d naming January in Berlin (%s)", d.GetHitsAddend().GetValue(), got, lease-1, january)
	}

	// A lease that outlives its month lapses: February asks again instead
	// of spending January's counts.
	lease = leaseWindow(t, h, "acme", 30*time.Minute-300*time.Millisecond)
	h.Advance(30 * time.Minute)
	res := do(t, h, req("x-tenant", "acme"))
	if !res.Paused || len(pending(t, h)) != 1 {
		t.Fatalf("the first request of February: paused %v, %d calls; want an ask (January's %d counts lapsed)", res.Paused, len(pending(t, h)), lease-1)
	}
	c := onlyCall(t, h, "February's ask")
	windowAsk(t, rlsCall(t, c, "node-a"))
	answerRLS(t, h, c, "2", windowStatus(rlsv3.RateLimitResponse_OK, 90, 28*24*time.Hour))
	if settled(t, "February", res).Rejected {
		t.Fatal("rejected with February's lease granted")
	}
	noRecoveredPanics(t, h)
}

// refuseWindow sends one request of acme with its pool spent, answers the
// ask with a refusal (nothing left, reset after reset) and returns the
// rejection's Retry-After in seconds.
func refuseWindow(t *testing.T, h Host, reset time.Duration) int {
	t.Helper()
	res := do(t, h, req("x-tenant", "acme"))
	c := onlyCall(t, h, "the ask of a spent pool")
	windowAsk(t, rlsCall(t, c, "node-a"))
	answerRLS(t, h, c, "2", windowStatus(rlsv3.RateLimitResponse_OVER_LIMIT, 0, reset))
	final := settled(t, "refused ask", res)
	if !final.Rejected {
		t.Fatal("admitted after the window's refusal")
	}
	ra, _ := strconv.Atoi(header(final.ResponseHeaders, "retry-after"))
	return ra
}

func fleetSlidingWindow(t *testing.T, start Starter) {
	// 30 s into the minute [12:00, 12:01).
	t0 := time.Date(2026, 3, 1, 12, 0, 30, 0, time.UTC)
	h := mustStart(t, start, Options{NodeID: "node-a", Start: t0,
		Config: []byte(fleetWindowConfig("sliding_window", `{"limit": 10, "window_seconds": 60}`))})
	acme := req("x-tenant", "acme")

	spendLease(t, h, "acme", 30*time.Second)
	// The service refuses now, but the previous window's weight decays: the
	// refusal holds one sync interval (100 ms), not the window's 30 s.
	if ra := refuseWindow(t, h, 30*time.Second); ra < 1 || ra > 2 {
		t.Errorf("Retry-After %d, want about the sync interval (1 s, rounded up), not the window's remaining 30 s", ra)
	}
	if res := do(t, h, acme); !res.Rejected || res.Paused || len(pending(t, h)) != 0 {
		t.Fatalf("within the sync interval: rejected %v paused %v, %d calls; want a rejection without a call", res.Rejected, res.Paused, len(pending(t, h)))
	}
	h.Advance(200 * time.Millisecond)
	lease := leaseWindow(t, h, "acme", 29*time.Second+800*time.Millisecond)

	// The rest goes back when the pool is idle, naming the window 12:00.
	d := idleReturn(t, h)
	wantStart := strconv.FormatInt(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).UnixMilli(), 10)
	if got := entry(d, "sluice_window"); got != wantStart || d.GetHitsAddend().GetValue() != lease-1 {
		t.Errorf("return of %d naming window %q, want %d naming %s", d.GetHitsAddend().GetValue(), got, lease-1, wantStart)
	}
	wantMetrics(t, h, map[string]uint64{"sluice.rule.w.global_returned": lease - 1, "sluice.rule.w.global_denied": 1})
	noRecoveredPanics(t, h)
}

func fleetRollingWindow(t *testing.T, start Starter) {
	// 5 s into the sub-period [12:00:00, 12:00:10) of a minute in six.
	t0 := time.Date(2026, 3, 1, 12, 0, 5, 0, time.UTC)
	h := mustStart(t, start, Options{NodeID: "node-a", Start: t0,
		Config: []byte(fleetWindowConfig("rolling_window", `{"limit": 10, "window_seconds": 60, "period_seconds": 10}`))})
	acme := req("x-tenant", "acme")

	spendLease(t, h, "acme", 5*time.Second)
	// Nothing left in the window: the refusal holds to the sub-period's end,
	// when a sub-period leaves the sum.
	if ra := refuseWindow(t, h, 5*time.Second); ra < 5 || ra > 8 {
		t.Errorf("Retry-After %d, want the sub-period's remaining 5 s (+ up to 50%% jitter)", ra)
	}
	step(t, h, 2*time.Second)
	if res := do(t, h, acme); !res.Rejected || res.Paused {
		t.Fatalf("2 s later in the spent sub-period: rejected %v paused %v", res.Rejected, res.Paused)
	}
	step(t, h, 3*time.Second)
	for _, c := range pending(t, h) {
		if r := rlsCall(t, c, "node-a"); len(r.Descriptors) > 0 && !isReturn(r.Descriptors[0]) {
			t.Fatalf("asked %v in a spent sub-period", r.Descriptors)
		}
		answerRLS(t, h, c, "2", windowStatus(rlsv3.RateLimitResponse_OK, 0, 5*time.Second))
	}

	// The next sub-period asks again; its lease's return names 12:00:10.
	lease := leaseWindow(t, h, "acme", 10*time.Second)
	d := idleReturn(t, h)
	wantStart := strconv.FormatInt(time.Date(2026, 3, 1, 12, 0, 10, 0, time.UTC).UnixMilli(), 10)
	if got := entry(d, "sluice_window"); got != wantStart || d.GetHitsAddend().GetValue() != lease-1 {
		t.Errorf("return of %d naming sub-period %q, want %d naming %s", d.GetHitsAddend().GetValue(), got, lease-1, wantStart)
	}
	noRecoveredPanics(t, h)
}
