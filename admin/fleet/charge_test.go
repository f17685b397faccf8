package fleet

import (
	"context"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-rl/sluice/admin/fleet/redisgcra"
	"github.com/sluice-rl/sluice/shared/state"
)

// chargeDesc is a charge of hits tokens: the descriptor the plugin sends
// for a response's cost its pool could not pay.
func chargeDesc(rule, id string, hits int64) *ratelimitv3.RateLimitDescriptor {
	return opDesc(rule, id, hits, OpCharge)
}

// chargePolicy: "g" and "fast" charge costs read from the response (g
// with an override for acme), "plain" costs the request's, "w" is a
// global fixed window; the quotas "q" (with an override for acme) and
// "q-default" charge costs read from the response, "q-plain" costs the
// request's; "s", "r" and "r1" are sliding and rolling windows. Slow rates
// (1 token per 1000 s) refill nothing while a test runs, so backlogs are
// exact to the test's own pace.
const chargePolicy = `{"fleet": {"cluster": "sluice_rls"}, "rules": [
  {"name": "g", "scope": "global", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
   "algorithm_config": {"tokens_per_second": 0.001, "burst": 10, "cost_source": "response_header:x-tokens", "max_debt": 20},
   "overrides": [{"key": "acme", "algorithm_config": {"tokens_per_second": 0.002, "burst": 4}}]},
  {"name": "fast", "scope": "global", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
   "algorithm_config": {"tokens_per_second": 5, "burst": 5, "cost_source": "response_header:x-tokens", "max_debt": 5}},
  {"name": "default-debt", "scope": "global", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
   "algorithm_config": {"tokens_per_second": 0.001, "burst": 7, "cost_source": "response_trailer:x-tokens"}},
  {"name": "plain", "scope": "global", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
   "algorithm_config": {"tokens_per_second": 0.001, "burst": 10, "cost_source": "header:x-cost"}},
  {"name": "w", "scope": "global", "limit_keys": ["header:x-api-key"], "algorithm": "fixed_window",
   "algorithm_config": {"limit": 10, "window_seconds": 3600}},
  {"name": "q", "scope": "global", "limit_keys": ["header:x-api-key"], "algorithm": "quota",
   "algorithm_config": {"limit": 10, "period": "day", "cost_source": "response_header:x-tokens", "max_debt": 5},
   "overrides": [{"key": "acme", "algorithm_config": {"limit": 4}}]},
  {"name": "q-default", "scope": "global", "limit_keys": ["header:x-api-key"], "algorithm": "quota",
   "algorithm_config": {"limit": 7, "period": "day", "cost_source": "response_trailer:x-tokens"}},
  {"name": "q-plain", "scope": "global", "limit_keys": ["header:x-api-key"], "algorithm": "quota",
   "algorithm_config": {"limit": 10, "period": "day"}},
  {"name": "s", "scope": "global", "limit_keys": ["header:x-api-key"], "algorithm": "sliding_window",
   "algorithm_config": {"limit": 10, "window_seconds": 60}},
  {"name": "r", "scope": "global", "limit_keys": ["header:x-api-key"], "algorithm": "rolling_window",
   "algorithm_config": {"limit": 10, "window_seconds": 60, "period_seconds": 15}},
  {"name": "r1", "scope": "global", "limit_keys": ["header:x-api-key"], "algorithm": "rolling_window",
   "algorithm_config": {"limit": 10, "window_seconds": 60, "period_seconds": 60}}]}`

func chargeRules(t *testing.T) *PolicyRules {
	t.Helper()
	rules := &PolicyRules{}
	rules.Set(1, []byte(chargePolicy))
	if len(rules.Names()) != 11 {
		t.Fatalf("the policy's global rules: %v (the parser refused part of it)", rules.Names())
	}
	return rules
}

// checkReset checks a status's duration_until_reset: want, less at most
// the test's own pace since the backend answered.
func checkReset(t *testing.T, what string, st *rlsv3.RateLimitResponse_DescriptorStatus, want time.Duration) {
	t.Helper()
	if got := st.DurationUntilReset.AsDuration(); got > want || got < want-10*time.Second {
		t.Fatalf("%s: duration_until_reset %v, want %v", what, got, want)
	}
}

func TestPolicyRulesGiveAChargedRuleItsDebt(t *testing.T) {
	rules := chargeRules(t)
	now := time.Now()
	for _, c := range []struct {
		rule, id string
		want     redisgcra.Limit
	}{
		{"g", "anyone", redisgcra.Limit{Rate: 0.001, Burst: 10, MaxDebt: 20}},
		// The override's rate and burst, the rule's max_debt.
		{"g", state.SluiceIDOfKey("acme"), redisgcra.Limit{Rate: 0.002, Burst: 4, MaxDebt: 20}},
		{"default-debt", "anyone", redisgcra.Limit{Rate: 0.001, Burst: 7, MaxDebt: 7}},
		// Costs from the request: a charge empties the bucket at most.
		{"plain", "anyone", redisgcra.Limit{Rate: 0.001, Burst: 10}},
	} {
		if got, ok := rules.IdentityLimit(c.rule, c.id, now); !ok || got != c.want {
			t.Errorf("%s for %s: %+v (%v), want %+v", c.rule, c.id, got, ok, c.want)
		}
	}
	// Windows: a quota whose costs are read from the response may be
	// charged past its limit by its max_debt (an override's identity with
	// its own limit and the rule's max_debt; left at its default, the
	// limit); a quota charged by the request and a fixed window not past
	// the limit; sliding and rolling windows (one of a single sub-period
	// too) not at all.
	for _, c := range []struct {
		rule, id    string
		limit, debt int64
		chargeable  bool
	}{
		{"q", "anyone", 10, 5, true},
		{"q", state.SluiceIDOfKey("acme"), 4, 5, true},
		{"q-default", "anyone", 7, 7, true},
		{"q-plain", "anyone", 10, 0, true},
		{"w", "anyone", 10, 0, true},
		{"s", "anyone", 10, 0, false},
		{"r", "anyone", 10, 0, false},
		{"r1", "anyone", 10, 0, false},
	} {
		w, ok := rules.IdentityWindow(c.rule, c.id, now)
		if !ok || w.Limit != c.limit || w.MaxDebt != c.debt || w.chargeable() != c.chargeable || w.chargeCap() != c.limit+c.debt {
			t.Errorf("%s for %s: %+v (%v), chargeable %v, want limit %d, max_debt %d, chargeable %v",
				c.rule, c.id, w, ok, w.chargeable(), c.limit, c.debt, c.chargeable)
		}
	}
}

// A charge takes its tokens whatever is left, into the bucket's debt, and
// is answered OK with what is left (nothing while in debt) and the time
// until full; takes are refused while the debt lasts.
func TestGlobalChargesTakeIntoDebt(t *testing.T) { forEachBackend(t, testGlobalChargesTakeIntoDebt) }

func testGlobalChargesTakeIntoDebt(t *testing.T, b Backend) {
	m := NewMetrics()
	s := startRLS(t, Options{Backend: b, Rules: chargeRules(t), Metrics: m, Timeout: time.Second})
	OK, OVER := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	const token = 1000 * time.Second // at 0.001/s

	resp := s.mustCall(t, "n1", desc("g", "A", 4, false))
	checkStatus(t, "take 4 of 10", resp.Statuses[0], OK, 6)
	resp = s.mustCall(t, "n1", chargeDesc("g", "A", 12))
	checkStatus(t, "charge 12 with 6 left", resp.Statuses[0], OK, 0)
	checkReset(t, "16 taken", resp.Statuses[0], 16*token)
	if resp.OverallCode != OK {
		t.Errorf("overall_code %v for a charge, want OK", resp.OverallCode)
	}
	if cl := resp.Statuses[0].CurrentLimit; cl == nil || cl.Name != "g" {
		t.Errorf("current_limit %v, want the rule's", cl)
	}
	resp = s.mustCall(t, "n1", desc("g", "A", 1, false))
	checkStatus(t, "a take 6 tokens in debt", resp.Statuses[0], OVER, 0)
	checkReset(t, "the refused take changed nothing", resp.Statuses[0], 16*token)
	resp = s.mustCall(t, "n1", chargeDesc("g", "A", 0))
	checkStatus(t, "a charge of 0: a query", resp.Statuses[0], OK, 0)
	checkReset(t, "the query changed nothing", resp.Statuses[0], 16*token)

	// The debt is capped at max_debt (20) below empty: 30 tokens in all.
	resp = s.mustCall(t, "n1", chargeDesc("g", "A", 100))
	checkStatus(t, "charge 100 more", resp.Statuses[0], OK, 0)
	checkReset(t, "clamped at burst + max_debt", resp.Statuses[0], 30*token)
	resp = s.mustCall(t, "n1", desc("g", "A", 15, true))
	checkStatus(t, "return 15: 5 in debt", resp.Statuses[0], OK, 0)
	checkReset(t, "after the return", resp.Statuses[0], 15*token)
	resp = s.mustCall(t, "n1", desc("g", "A", 6, true))
	checkStatus(t, "return 6: out of debt", resp.Statuses[0], OK, 1)

	// An identity with an override: its own rate and burst, the rule's
	// max_debt: 4 + 20 tokens at 0.002/s.
	acme := state.SluiceIDOfKey("acme")
	resp = s.mustCall(t, "n1", chargeDesc("g", acme, 1000), chargeDesc("g", "B", 1000))
	checkStatus(t, "acme charged 1000", resp.Statuses[0], OK, 0)
	checkReset(t, "acme clamped at its burst + the rule's max_debt", resp.Statuses[0], 24*token/2)
	checkReset(t, "B clamped at the rule's", resp.Statuses[1], 30*token)
	resp = s.mustCall(t, "n1", chargeDesc("default-debt", "A", 1000))
	checkReset(t, "max_debt left at its default, the burst", resp.Statuses[0], 14*token)

	if got := testutil.ToFloat64(m.tokens.WithLabelValues("g", "charged")); got != 12+100+1000+1000 {
		t.Errorf("charged tokens of g %g, want 2112 (as asked, before the cap)", got)
	}
	// Clamped: 100 - 14 of A's, 1000 - 24 of acme's, 1000 - 30 of B's
	// (A's 14 a hair less: the refill since its last call).
	if got := testutil.ToFloat64(m.tokens.WithLabelValues("g", "clamped")); got > 2032 || got < 2031.9 {
		t.Errorf("clamped tokens of g %g, want 2032", got)
	}
	if got := testutil.ToFloat64(m.descriptors.WithLabelValues(DescriptorCharge)); got != 6 {
		t.Errorf("charge descriptors %g, want 6", got)
	}
	if got := testutil.ToFloat64(m.tokens.WithLabelValues("g", "granted")); got != 4 {
		t.Errorf("granted tokens of g %g, want the take's 4 only", got)
	}
}

// Where the admin knows no debt for the bucket, a charge empties it at
// most: a global token bucket whose costs are the request's, a
// descriptor's own limit. A rule it does not know at all has no limit.
func TestChargesWithoutADebtEmptyTheBucketAtMost(t *testing.T) {
	forEachBackend(t, testChargesWithoutADebt)
}

func testChargesWithoutADebt(t *testing.T, b Backend) {
	rules := chargeRules(t)
	s := startRLS(t, Options{Backend: b, Rules: rules, Timeout: time.Second})
	OK, OVER := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	withLimit := chargeDesc("nope", "A", 100)
	withLimit.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_HOUR}

	resp := s.mustCall(t, "n1", chargeDesc("plain", "A", 100), withLimit, chargeDesc("nope", "A", 100))
	checkStatus(t, "plain charged 100", resp.Statuses[0], OK, 0)
	checkReset(t, "plain: empty, no debt", resp.Statuses[0], 10000*time.Second)
	checkStatus(t, "a descriptor's limit charged 100", resp.Statuses[1], OK, 0)
	checkReset(t, "the descriptor's limit: empty, no debt", resp.Statuses[1], time.Hour)
	if st := resp.Statuses[2]; st.Code != OK || st.CurrentLimit != nil {
		t.Errorf("an unknown rule's charge: %v, want OK without a limit", st)
	}
	checkStatus(t, "plain's take after the charge", s.mustCall(t, "n1", desc("plain", "A", 1, false)).Statuses[0], OVER, 0)

	// The same rule later charged from the response: its debt from the
	// next call on.
	rules.Set(2, []byte(strings.Replace(chargePolicy, `"cost_source": "header:x-cost"`, `"cost_source": "response_header:x-cost", "max_debt": 3`, 1)))
	resp = s.mustCall(t, "n1", chargeDesc("plain", "A", 100))
	checkReset(t, "plain with max_debt 3", resp.Statuses[0], 13000*time.Second)

	// StaticRules hold no debt unless given one.
	s = startRLS(t, Options{Backend: b, Rules: &StaticRules{Limits: map[string]redisgcra.Limit{"static": {Rate: 0.001, Burst: 2}}}, Timeout: time.Second})
	checkReset(t, "a static rule", s.mustCall(t, "n1", chargeDesc("static", "A", 100)).Statuses[0], 2000*time.Second)
}

// A take after a charge is refused until the refill has paid the debt
// back, on the backend's real clock: at 5 tokens/s, burst 5, a charge of
// 8 on a full bucket leaves 3 in debt; one token is back 0.8 s later.
func TestTakesAfterAChargeWaitForTheRefillToPayTheDebt(t *testing.T) {
	forEachBackend(t, testTakesWaitForTheDebt)
}

func testTakesWaitForTheDebt(t *testing.T, b Backend) {
	s := startRLS(t, Options{Backend: b, Rules: chargeRules(t), Timeout: time.Second})
	OK := rlsv3.RateLimitResponse_OK
	start := time.Now()
	resp := s.mustCall(t, "n1", chargeDesc("fast", "A", 8))
	checkStatus(t, "charge 8 of 5", resp.Statuses[0], OK, 0)
	if d := resp.Statuses[0].DurationUntilReset.AsDuration(); d > 1600*time.Millisecond || d < 1100*time.Millisecond {
		t.Fatalf("duration_until_reset %v after a charge of 8 at 5/s, want 1.6 s less the call's time", d)
	}
	refused := 0
	for {
		st := s.mustCall(t, "n1", desc("fast", "A", 1, false)).Statuses[0]
		if st.Code == OK {
			break
		}
		refused++
		if time.Since(start) > 10*time.Second {
			t.Fatal("no token 10 s after the charge")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The backend granted it at its time >= the charge's + 0.8 s.
	if took := time.Since(start); took < 795*time.Millisecond || refused == 0 {
		t.Fatalf("a token granted %v after a charge that left 3 tokens of debt (%d takes refused before), want at least 0.8 s", took, refused)
	}
}

// A charge of a global sliding or rolling window is refused naming the
// entry: those weigh leases across windows or sub-periods, which a charge
// after the fact cannot join, and the plugin never sends one (even for a
// rolling window of one sub-period, counted as a fixed window). Nothing
// runs for any descriptor of the call. Fixed windows and quotas are
// charged.
func TestChargesOfSlidingAndRollingWindowsAreRefusedNamingTheEntry(t *testing.T) {
	fb := &fakeBackend{}
	m := NewMetrics()
	s := NewServer(Options{Backend: fb, Rules: chargeRules(t), Metrics: m})
	for _, c := range []struct {
		ds   []*ratelimitv3.RateLimitDescriptor
		want string
	}{
		{[]*ratelimitv3.RateLimitDescriptor{desc("g", "A", 1, false), chargeDesc("s", "A", 3)},
			`descriptors[1].entries[2]: sluice_op "charge" for rule "s", a global sliding or rolling window: charges apply to token_bucket, quota and fixed_window rules only`},
		{[]*ratelimitv3.RateLimitDescriptor{chargeDesc("q", "A", 1), {Entries: entries(KeyOp, OpCharge, KeyRule, "r", KeyID, "A")}},
			`descriptors[1].entries[0]: sluice_op "charge" for rule "r", a global sliding or rolling window`},
		{[]*ratelimitv3.RateLimitDescriptor{chargeDesc("r1", "A", 1)},
			`descriptors[0].entries[2]: sluice_op "charge" for rule "r1", a global sliding or rolling window`},
	} {
		_, err := s.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "sluice", Descriptors: c.ds})
		if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), c.want) {
			t.Errorf("%v, want INVALID_ARGUMENT %q", err, c.want)
		}
	}
	if fb.ops != 0 {
		t.Errorf("%d backend ops for calls refused", fb.ops)
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues(RequestInvalid)); got != 3 {
		t.Errorf("invalid requests %g, want 3", got)
	}
	resp, err := s.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "sluice",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{chargeDesc("w", "A", 3), chargeDesc("q", "A", 3), chargeDesc("q-plain", "A", 3)}})
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK || fb.ops != 3 {
		t.Errorf("charges of a fixed window and quotas: %v %v, %d backend ops, want OK and 3", resp, err, fb.ops)
	}
}

func TestChargeDescriptorsParse(t *testing.T) {
	d := &ratelimitv3.RateLimitDescriptor{Entries: entries(KeyRule, "g", KeyOp, OpCharge, KeyID, "A")}
	d.HitsAddend = desc("g", "A", 7, false).HitsAddend
	it, err := parseDescriptor(3, d, 0)
	if err != nil || !it.charge || it.ret || it.hits != 7 || it.opEntry != 1 || it.rule != "g" || it.id != "A" {
		t.Fatalf("a charge: %+v %v", it, err)
	}
	if it, err := parseDescriptor(0, chargeDesc("g", "A", -1), 5); err != nil || !it.charge || it.hits != 5 {
		t.Fatalf("a charge with the request's hits_addend: %+v %v", it, err)
	}
	negative := chargeDesc("g", "A", 1)
	negative.IsNegativeHits = true
	withWindow := chargeDesc("g", "A", 1)
	withWindow.Entries = append(withWindow.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: KeyWindow, Value: "0"})
	twice := chargeDesc("g", "A", 1)
	twice.Entries = append(twice.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: KeyOp, Value: OpReturn})
	for _, c := range []struct {
		d    *ratelimitv3.RateLimitDescriptor
		want string
	}{
		{negative, "descriptors[0].is_negative_hits: true with sluice_op=charge"},
		{withWindow, "descriptors[0].entries: sluice_window without sluice_op=return"},
		{twice, "descriptors[0].entries[3]: sluice_op appears twice"},
		{&ratelimitv3.RateLimitDescriptor{Entries: entries(KeyRule, "g", KeyID, "A", KeyOp, "Charge")},
			`descriptors[0].entries[2]: sluice_op "Charge": want "return", "charge" or "block"`},
		{&ratelimitv3.RateLimitDescriptor{Entries: entries(KeyOp, OpCharge, KeyID, "A")}, "descriptors[0].entries: sluice_rule missing"},
	} {
		if _, err := parseDescriptor(0, c.d, 0); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want one containing %q", err, c.want)
		}
	}
}

// A caller that gave up before the answer sends its charges again (it
// counts the call as failed): the admin undoes exactly what each charge
// added to a bucket or a quota, no more. Crediting a clamped charge's
// whole cost would free tokens (or room in the quota) that were never
// charged.
func TestRLSUndoesTheChargesOfACallerThatGaveUp(t *testing.T) {
	forEachBackend(t, testUndoCharges)
}

func testUndoCharges(t *testing.T, b Backend) {
	m := NewMetrics()
	now := chargeDay() // the quota's day, for the whole test
	s := startRLS(t, Options{Backend: b, Rules: chargeRules(t), Metrics: m, Timeout: 5 * time.Second, Now: func() time.Time { return now }})
	checkStatus(t, "take 5", s.mustCall(t, "n1", desc("g", "A", 5, false)).Statuses[0], rlsv3.RateLimitResponse_OK, 5)
	checkStatus(t, "take 5 of the quota", s.mustCall(t, "n1", desc("q", "A", 5, false)).Statuses[0], rlsv3.RateLimitResponse_OK, 5)
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.srv.ShouldRateLimit(gone, &rlsv3.RateLimitRequest{Domain: "sluice",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{chargeDesc("g", "A", 100), chargeDesc("g", "B", 3),
			chargeDesc("q", "A", 100), chargeDesc("q", "B", 3)}})
	if status.Code(err) != codes.Canceled {
		t.Fatalf("the call of a caller that gave up ended with %v, want Canceled", err)
	}
	if n := testutil.ToFloat64(m.requests.WithLabelValues(RequestAbandoned)); n != 1 {
		t.Errorf("abandoned calls %v, want 1", n)
	}
	resp := s.mustCall(t, "n1", desc("g", "A", 0, false), desc("g", "B", 0, false))
	checkStatus(t, "A as before the abandoned charge (25 of its 100 applied, 25 undone)", resp.Statuses[0], rlsv3.RateLimitResponse_OK, 5)
	checkReset(t, "A's backlog", resp.Statuses[0], 5000*time.Second)
	checkStatus(t, "B as before its abandoned charge", resp.Statuses[1], rlsv3.RateLimitResponse_OK, 10)
	// The quota's count likewise: 10 of A's 100 counted (up to 10 + 5)
	// and undone, B's 3 undone.
	resp = s.mustCall(t, "n1", desc("q", "A", 0, false), desc("q", "B", 0, false))
	checkStatus(t, "the quota's A as before the abandoned charge", resp.Statuses[0], rlsv3.RateLimitResponse_OK, 5)
	checkStatus(t, "the quota's B as before its abandoned charge", resp.Statuses[1], rlsv3.RateLimitResponse_OK, 10)
	checkStatus(t, "A's 5 left of the quota", s.mustCall(t, "n1", desc("q", "A", 5, false)).Statuses[0], rlsv3.RateLimitResponse_OK, 0)
}
