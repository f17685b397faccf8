package fleet

import (
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-rl/sluice/shared/state"
)

// chargeDay is the admin's clock in the tests of charged quotas and fixed
// windows: noon (UTC) tomorrow, so that the day's counters outlive the
// test on the backend's real clock.
func chargeDay() time.Time {
	return time.Now().UTC().Truncate(24 * time.Hour).Add(36 * time.Hour)
}

// checkWindowReset checks a counted status's duration_until_reset: the
// time from the admin's (fixed) clock to the window's end, exactly.
func checkWindowReset(t *testing.T, what string, st *rlsv3.RateLimitResponse_DescriptorStatus, want time.Duration) {
	t.Helper()
	if got := st.DurationUntilReset.AsDuration(); got != want {
		t.Fatalf("%s: duration_until_reset %v, want %v", what, got, want)
	}
}

// A charge of a global quota or fixed window counts in the current window
// unconditionally, answered OK with what is left of the limit (nothing
// past it) and the time to the window's end: past the limit by the rule's
// max_debt at most when its costs are read from the response (an
// override's identity with its own limit and the rule's max_debt; left at
// its default, the limit), up to the limit otherwise. Takes after it, in
// the same call or later, see the count. What the cap dropped is counted
// as clamped.
func TestGlobalQuotaChargesCountPastTheLimitUpToTheDebt(t *testing.T) {
	forEachBackend(t, testQuotaCharges)
}

func testQuotaCharges(t *testing.T, b Backend) {
	m := NewMetrics()
	now := chargeDay()
	s := startRLS(t, Options{Backend: b, Rules: chargeRules(t), Metrics: m, Timeout: time.Second, Now: func() time.Time { return now }})
	OK, OVER := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	day := now.Truncate(24 * time.Hour).UnixMilli() // the quota's period
	hour := now.Truncate(time.Hour).UnixMilli()     // the fixed window's
	// count checks a window's count through returns: give back n
	// (count - n is at most the limit, so nothing is left), then one more.
	count := func(what, rule, id string, start, n int64) {
		t.Helper()
		checkStatus(t, what+", less its excess", s.mustCall(t, "n1", windowReturn(rule, id, n, start)).Statuses[0], OK, 0)
		checkStatus(t, what+", less one more", s.mustCall(t, "n1", windowReturn(rule, id, 1, start)).Statuses[0], OK, 1)
	}

	checkStatus(t, "take 4 of 10", s.mustCall(t, "n1", desc("q", "A", 4, false)).Statuses[0], OK, 6)
	resp := s.mustCall(t, "n1", chargeDesc("q", "A", 8))
	checkStatus(t, "charge 8 with 6 left", resp.Statuses[0], OK, 0)
	checkWindowReset(t, "the day's end", resp.Statuses[0], 12*time.Hour)
	if cl := resp.Statuses[0].CurrentLimit; resp.OverallCode != OK || cl == nil || cl.Name != "q" ||
		cl.Unit != rlsv3.RateLimitResponse_RateLimit_DAY || cl.RequestsPerUnit != 10 {
		t.Errorf("overall_code %v, current_limit %v, want OK and q's 10 per DAY", resp.OverallCode, cl)
	}
	checkStatus(t, "a take with the count 2 past the limit", s.mustCall(t, "n1", desc("q", "A", 1, false)).Statuses[0], OVER, 0)
	checkStatus(t, "a charge of 0: a query", s.mustCall(t, "n1", chargeDesc("q", "A", 0)).Statuses[0], OK, 0)
	// At most limit + max_debt = 15: 3 of the 100 counted.
	checkStatus(t, "charge 100 more", s.mustCall(t, "n1", chargeDesc("q", "A", 100)).Statuses[0], OK, 0)
	count("A clamped at 15", "q", "A", day, 5)
	checkStatus(t, "A takes again", s.mustCall(t, "n1", desc("q", "A", 1, false)).Statuses[0], OK, 0)

	// In one call: a charge, then a take that no longer fits, then one
	// that does.
	resp = s.mustCall(t, "n1", chargeDesc("q", "C", 9), desc("q", "C", 2, false), desc("q", "C", 1, false))
	checkStatus(t, "C charged 9", resp.Statuses[0], OK, 1)
	checkStatus(t, "C's take of 2 after it", resp.Statuses[1], OVER, 1)
	checkStatus(t, "C's take of 1 after it", resp.Statuses[2], OK, 0)

	// An override's identity: its own limit (4), the rule's max_debt (5).
	acme := state.SluiceIDOfKey("acme")
	resp = s.mustCall(t, "n1", chargeDesc("q", acme, 1000), chargeDesc("q", "B", 1000))
	checkStatus(t, "acme charged 1000", resp.Statuses[0], OK, 0)
	checkStatus(t, "B charged 1000", resp.Statuses[1], OK, 0)
	if cl := resp.Statuses[0].CurrentLimit; cl == nil || cl.RequestsPerUnit != 4 {
		t.Errorf("acme's current_limit %v, want its own 4 per DAY", cl)
	}
	count("acme clamped at its 4 + the rule's 5", "q", acme, day, 5)
	count("B clamped at the rule's 10 + 5", "q", "B", day, 5)
	// max_debt left at its default: the limit.
	checkStatus(t, "q-default charged 1000", s.mustCall(t, "n1", chargeDesc("q-default", "A", 1000)).Statuses[0], OK, 0)
	count("q-default clamped at 7 + 7", "q-default", "A", day, 7)

	// No debt: a quota charged by the request, a fixed window; a charge
	// fills the window up to its limit at most.
	checkStatus(t, "q-plain charged 100", s.mustCall(t, "n1", chargeDesc("q-plain", "A", 100)).Statuses[0], OK, 0)
	checkStatus(t, "q-plain's take after it", s.mustCall(t, "n1", desc("q-plain", "A", 1, false)).Statuses[0], OVER, 0)
	count("q-plain at its limit", "q-plain", "A", day, 0)
	checkStatus(t, "w: take 3", s.mustCall(t, "n1", desc("w", "A", 3, false)).Statuses[0], OK, 7)
	resp = s.mustCall(t, "n1", chargeDesc("w", "A", 100))
	checkStatus(t, "w charged 100", resp.Statuses[0], OK, 0)
	checkWindowReset(t, "the hour's end", resp.Statuses[0], time.Hour)
	count("w at its limit", "w", "A", hour, 0)

	for _, c := range []struct {
		rule, decision string
		want           float64
	}{
		{"q", "charged", 8 + 100 + 9 + 1000 + 1000},
		// 97 of A's 100, 991 of acme's 1000, 985 of B's 1000.
		{"q", "clamped", 97 + 991 + 985},
		{"q", "granted", 4 + 1 + 1},
		{"q", "denied", 1 + 2},
		{"q-default", "clamped", 1000 - 14},
		{"q-plain", "clamped", 90},
		{"w", "charged", 100},
		{"w", "clamped", 93},
	} {
		if got := testutil.ToFloat64(m.tokens.WithLabelValues(c.rule, c.decision)); got != c.want {
			t.Errorf("%s tokens of %s: %g, want %g", c.decision, c.rule, got, c.want)
		}
	}
	if got := testutil.ToFloat64(m.descriptors.WithLabelValues(DescriptorCharge)); got != 9 {
		t.Errorf("charge descriptors %g, want 9", got)
	}
}
