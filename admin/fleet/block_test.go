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

	"github.com/sluice-rl/sluice/shared/state"
)

// blockDesc is a block for a request of hits tokens: the descriptor the
// plugin sends just before a request-path ask of a rule with
// block_seconds. hits < 0 leaves hits_addend unset.
func blockDesc(rule, id string, hits int64) *ratelimitv3.RateLimitDescriptor {
	return opDesc(rule, id, hits, OpBlock)
}

// blockPolicy: "b" blocks for an hour (overrides: acme a minute, free
// never, vip its own rate and burst with the rule's block, was a minute
// but only until 2020); "debt" blocks and is charged from the response;
// "plain" never blocks; "w" is a global fixed window; "fast" refills 10
// tokens a second (a burst of 10) and blocks for a second. The slow rates (1 token per
// 1000 s) refill nothing while a test runs, so backlogs are exact to the
// test's own pace.
const blockPolicy = `{"fleet": {"cluster": "sluice_rls"}, "rules": [
  {"name": "b", "scope": "global", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
   "algorithm_config": {"tokens_per_second": 0.001, "burst": 10, "block_seconds": 3600},
   "overrides": [{"key": "acme", "algorithm_config": {"block_seconds": 60}},
     {"key": "free", "algorithm_config": {"block_seconds": 0}},
     {"key": "vip", "algorithm_config": {"tokens_per_second": 0.002, "burst": 4}},
     {"key": "was", "algorithm_config": {"block_seconds": 60}, "until": "2020-01-01T00:00:00Z"}]},
  {"name": "debt", "scope": "global", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
   "algorithm_config": {"tokens_per_second": 0.001, "burst": 10, "block_seconds": 3600,
     "cost_source": "response_header:x-tokens", "max_debt": 10}},
  {"name": "plain", "scope": "global", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
   "algorithm_config": {"tokens_per_second": 0.001, "burst": 10}},
  {"name": "w", "scope": "global", "limit_keys": ["header:x-api-key"], "algorithm": "fixed_window",
   "algorithm_config": {"limit": 10, "window_seconds": 3600}},
  {"name": "fast", "scope": "global", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
   "algorithm_config": {"tokens_per_second": 10, "burst": 10, "block_seconds": 1}}]}`

func blockRules(t *testing.T) *PolicyRules {
	t.Helper()
	rules := &PolicyRules{}
	rules.Set(1, []byte(blockPolicy))
	if len(rules.Names()) != 5 {
		t.Fatalf("the policy's global rules: %v (the parser refused part of it)", rules.Names())
	}
	return rules
}

// checkBacklog checks a bucket's duration_until_reset: want less the
// test's own pace since the backend wrote it, and strictly less than
// want (so that a TAT written again, from a later now, is told from one
// left as it was).
func checkBacklog(t *testing.T, what string, st *rlsv3.RateLimitResponse_DescriptorStatus, want time.Duration) {
	t.Helper()
	if got := st.DurationUntilReset.AsDuration(); got >= want || got < want-10*time.Second {
		t.Fatalf("%s: duration_until_reset %v, want a little under %v (left as it was)", what, got, want)
	}
}

const token = 1000 * time.Second // at 0.001/s

func TestPolicyRulesGiveAnIdentityItsBlock(t *testing.T) {
	rules := blockRules(t)
	now := time.Now()
	for _, c := range []struct {
		rule, key  string
		at         time.Time
		rate       float64
		blockSecs  int
		blockMicro int64
	}{
		{"b", "", now, 0.001, 3600, 3600e6},
		{"b", "acme", now, 0.001, 60, 60e6},
		{"b", "free", now, 0.001, 0, 0},
		// Its own rate and burst, the rule's block.
		{"b", "vip", now, 0.002, 3600, 3600e6},
		// The override applies until 2020 only.
		{"b", "was", now, 0.001, 3600, 3600e6},
		{"b", "was", time.Date(2019, 6, 1, 0, 0, 0, 0, time.UTC), 0.001, 60, 60e6},
		{"debt", "", now, 0.001, 3600, 3600e6},
		{"plain", "", now, 0.001, 0, 0},
	} {
		id := "anyone"
		if c.key != "" {
			id = state.SluiceIDOfKey(c.key)
		}
		l, ok := rules.IdentityLimit(c.rule, id, c.at)
		if !ok || l.Rate != c.rate || l.BlockSeconds != c.blockSecs || l.Block() != c.blockMicro {
			t.Errorf("%s for %q at %s: %+v (%v), block %d us; want rate %g, block_seconds %d", c.rule, c.key, c.at.Format(time.RFC3339),
				l, ok, l.Block(), c.rate, c.blockSecs)
		}
	}
	if l, _ := rules.GlobalLimit("b"); l.BlockSeconds != 3600 {
		t.Errorf("GlobalLimit of b: %+v, want block_seconds 3600", l)
	}
}

// A block puts an identity whose bucket cannot pay the request an
// hour below empty (an empty bucket too), answered OVER_LIMIT with the
// time until full; a take is then refused and changes nothing, and a
// block again, or of a bucket in debt from a charge, finds it below empty
// and changes nothing (OK): a refusal never lengthens a block. Blocks are
// counted per rule, and by the dashboard's usage.
func TestBlocksKeepARefusedIdentityOut(t *testing.T) { forEachBackend(t, testBlocksKeepOut) }

func testBlocksKeepOut(t *testing.T, b Backend) {
	m := NewMetrics()
	s := startRLS(t, Options{Backend: b, Rules: blockRules(t), Metrics: m, Timeout: time.Second})
	OK, OVER := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	const blocked = 10*token + time.Hour // tau + block_seconds

	checkStatus(t, "take 8 of 10", s.mustCall(t, "n1", desc("b", "A", 8, false)).Statuses[0], OK, 2)
	resp := s.mustCall(t, "n1", blockDesc("b", "A", 3))
	checkStatus(t, "block after an ask of 3 with 2 left", resp.Statuses[0], OVER, 0)
	if got := resp.Statuses[0].DurationUntilReset.AsDuration(); got != blocked {
		t.Fatalf("duration_until_reset %v after the block, want tau + block_seconds = %v exactly", got, blocked)
	}
	if cl := resp.Statuses[0].CurrentLimit; cl == nil || cl.Name != "b" || cl.RequestsPerUnit != 4 || cl.Unit != rlsv3.RateLimitResponse_RateLimit_HOUR {
		t.Errorf("current_limit %v, want the rule's, 4 per HOUR", cl)
	}
	if resp.OverallCode != OVER {
		t.Errorf("overall_code %v for a call that blocked, want OVER_LIMIT", resp.OverallCode)
	}
	resp = s.mustCall(t, "n1", desc("b", "A", 1, false))
	checkStatus(t, "a take during the block", resp.Statuses[0], OVER, 0)
	checkBacklog(t, "the refused take changed nothing", resp.Statuses[0], blocked)
	resp = s.mustCall(t, "n1", blockDesc("b", "A", 3))
	checkStatus(t, "a block again", resp.Statuses[0], OK, 0)
	checkBacklog(t, "the block again changed nothing", resp.Statuses[0], blocked)
	if resp.OverallCode != OK {
		t.Errorf("overall_code %v for a block that changed nothing, want OK", resp.OverallCode)
	}
	// Shortened by a return (below), still below empty: not lengthened.
	checkBacklog(t, "a return of 1 during the block", s.mustCall(t, "n1", desc("b", "A", 1, true)).Statuses[0], blocked-token)
	resp = s.mustCall(t, "n1", blockDesc("b", "A", 1))
	checkStatus(t, "a block of a blocked bucket a token short of the block", resp.Statuses[0], OK, 0)
	checkBacklog(t, "not lengthened", resp.Statuses[0], blocked-token)

	// An empty bucket, not in debt, cannot pay one token: blocked.
	checkStatus(t, "take all 10", s.mustCall(t, "n1", desc("b", "C", 10, false)).Statuses[0], OK, 0)
	if st := s.mustCall(t, "n1", blockDesc("b", "C", 1)).Statuses[0]; st.Code != OVER || st.DurationUntilReset.AsDuration() != blocked {
		t.Errorf("a block of an empty bucket: %v, want OVER_LIMIT and %v", st, blocked)
	}

	// In debt from a charge: below empty, left as it is (a block there
	// would have shortened the debt's 15000 s to 13600 s).
	checkStatus(t, "take 10 of debt", s.mustCall(t, "n1", desc("debt", "A", 10, false)).Statuses[0], OK, 0)
	checkStatus(t, "charge 5 into debt", s.mustCall(t, "n1", chargeDesc("debt", "A", 5)).Statuses[0], OK, 0)
	resp = s.mustCall(t, "n1", blockDesc("debt", "A", 1))
	checkStatus(t, "a block in debt", resp.Statuses[0], OK, 0)
	checkBacklog(t, "the debt left as it was", resp.Statuses[0], 15*token)

	if got := testutil.ToFloat64(m.blocks.WithLabelValues("b")); got != 2 {
		t.Errorf("blocks of b %g, want 2 (A once, C once)", got)
	}
	if got := testutil.CollectAndCount(m.blocks); got != 1 {
		t.Errorf("%d series of sluice_fleet_blocks_total, want b's only", got)
	}
	if got := testutil.ToFloat64(m.descriptors.WithLabelValues(DescriptorBlock)); got != 5 {
		t.Errorf("block descriptors %g, want 5", got)
	}
	if got := testutil.ToFloat64(m.tokens.WithLabelValues("b", "granted")); got != 18 {
		t.Errorf("granted tokens of b %g, want the takes' 18 only (a block takes none)", got)
	}
	if got := testutil.ToFloat64(m.tokens.WithLabelValues("b", "denied")); got != 1 {
		t.Errorf("denied tokens of b %g, want the take's 1 only", got)
	}
	var blocks uint64
	for _, u := range s.srv.fleet.snapshot(time.Now().Add(time.Second)) {
		for _, n := range u.Nodes {
			if u.Rule == "b" && n.Node == "n1" {
				blocks = n.Blocked
			}
		}
	}
	if blocks != 2 {
		t.Errorf("the dashboard's usage of b by n1: %d blocks, want 2", blocks)
	}
}

// A block changes nothing when the bucket can pay the request now (it
// refilled, or was returned to, since): OK with the bucket as a query
// shows it. hits_addend 0 is an ask of 1.
func TestBlocksLeaveABucketThatCanPay(t *testing.T) {
	forEachBackend(t, testBlocksLeaveABucketThatCanPay)
}

func testBlocksLeaveABucketThatCanPay(t *testing.T, b Backend) {
	s := startRLS(t, Options{Backend: b, Rules: blockRules(t), Timeout: time.Second})
	OK, OVER := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	checkStatus(t, "take 5 of 10", s.mustCall(t, "n1", desc("b", "B", 5, false)).Statuses[0], OK, 5)
	for _, hits := range []int64{5, 1, 0, -1} {
		resp := s.mustCall(t, "n1", blockDesc("b", "B", hits))
		checkStatus(t, "a block after an ask the bucket can pay", resp.Statuses[0], OK, 5)
		checkBacklog(t, "the bucket left as it was", resp.Statuses[0], 5*token)
		if cl := resp.Statuses[0].CurrentLimit; cl == nil || cl.Name != "b" {
			t.Errorf("current_limit %v, want the rule's", cl)
		}
	}
	if st := s.mustCall(t, "n1", blockDesc("b", "B", 6)).Statuses[0]; st.Code != OVER {
		t.Errorf("a block after an ask of 6 with 5 left: %v, want OVER_LIMIT (blocked)", st)
	}
	// 0 is an ask of 1: an empty bucket cannot pay it.
	checkStatus(t, "take all 10", s.mustCall(t, "n1", desc("b", "D", 10, false)).Statuses[0], OK, 0)
	if st := s.mustCall(t, "n1", blockDesc("b", "D", 0)).Statuses[0]; st.Code != OVER || st.DurationUntilReset.AsDuration() != 10*token+time.Hour {
		t.Errorf("a block with hits_addend 0 of an empty bucket: %v, want OVER_LIMIT (blocked)", st)
	}
}

// An identity's block is its override's when one applies, else the
// rule's; an override's 0 never blocks it (OK, left as it was).
func TestBlocksLastTheIdentitysBlockSeconds(t *testing.T) { forEachBackend(t, testBlocksOfOverrides) }

func testBlocksOfOverrides(t *testing.T, b Backend) {
	s := startRLS(t, Options{Backend: b, Rules: blockRules(t), Timeout: time.Second})
	OK, OVER := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	for _, c := range []struct {
		key   string
		burst int64
		want  time.Duration // after the block; 0: not blocked
	}{
		{"acme", 10, 10*token + time.Minute},
		{"vip", 4, 4*token/2 + time.Hour}, // its own rate (0.002/s) and burst, the rule's block
		{"was", 10, 10*token + time.Hour}, // its override ended: the rule's
		{"free", 10, 0},
	} {
		id := state.SluiceIDOfKey(c.key)
		checkStatus(t, c.key+" takes its burst", s.mustCall(t, "n1", desc("b", id, c.burst, false)).Statuses[0], OK, 0)
		st := s.mustCall(t, "n1", blockDesc("b", id, 1)).Statuses[0]
		if c.want == 0 {
			checkStatus(t, c.key+": never blocked", st, OK, 0)
			checkBacklog(t, c.key+": left as it was", st, 10*token)
			continue
		}
		checkStatus(t, c.key+" blocked", st, OVER, 0)
		if got := st.DurationUntilReset.AsDuration(); got != c.want {
			t.Errorf("%s: duration_until_reset %v after the block, want %v", c.key, got, c.want)
		}
	}
}

// A block of anything that cannot be blocked is OK and changes nothing:
// a rule the admin does not know (no limit, as a take of it), a rule
// without block_seconds, a window, a descriptor's own limit (answered as
// a query of it), a rule whose block a new version removed while the op
// travelled.
func TestBlocksOfWhatCannotBeBlockedAreOKAndChangeNothing(t *testing.T) {
	forEachBackend(t, testBlocksOfWhatCannotBeBlocked)
}

func testBlocksOfWhatCannotBeBlocked(t *testing.T, b Backend) {
	m := NewMetrics()
	rules := blockRules(t)
	s := startRLS(t, Options{Backend: b, Rules: rules, Metrics: m, Timeout: time.Second})
	OK, OVER := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	withLimit := desc("nope", "A", 5, false)
	withLimit.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_HOUR}
	blockLimit := blockDesc("nope", "A", 1)
	blockLimit.Limit = withLimit.Limit
	resp := s.mustCall(t, "n1", desc("plain", "A", 10, false), desc("w", "A", 10, false), withLimit)
	for _, st := range resp.Statuses {
		checkStatus(t, "take all", st, OK, 0)
	}
	resp = s.mustCall(t, "n1", blockDesc("nope", "A", 1), blockDesc("plain", "A", 1), blockDesc("w", "A", 1), blockLimit)
	if resp.OverallCode != OK {
		t.Errorf("overall_code %v, want OK", resp.OverallCode)
	}
	if st := resp.Statuses[0]; st.Code != OK || st.CurrentLimit != nil || st.DurationUntilReset != nil {
		t.Errorf("a block of a rule the admin does not know: %v, want OK without a limit", st)
	}
	checkStatus(t, "a block of a rule without block_seconds", resp.Statuses[1], OK, 0)
	checkBacklog(t, "the rule without block_seconds", resp.Statuses[1], 10*token)
	if cl := resp.Statuses[1].CurrentLimit; cl == nil || cl.Name != "plain" {
		t.Errorf("current_limit %v, want plain's", cl)
	}
	checkStatus(t, "a block of a window: a query of it", resp.Statuses[2], OK, 0)
	if cl := resp.Statuses[2].CurrentLimit; cl == nil || cl.Name != "w" || cl.RequestsPerUnit != 10 {
		t.Errorf("current_limit %v, want w's 10 per HOUR", cl)
	}
	checkStatus(t, "a block of a descriptor's limit: a query of it", resp.Statuses[3], OK, 0)
	checkBacklog(t, "the descriptor's limit", resp.Statuses[3], time.Hour)
	// The window's count is as it was: a return of 3 leaves 3.
	checkStatus(t, "the window after the block", s.mustCall(t, "n1", desc("w", "A", 3, true)).Statuses[0], OK, 3)

	// A new version without b's block: the op that was sent for the old
	// one changes nothing.
	rules.Set(2, []byte(strings.Replace(blockPolicy, `"burst": 10, "block_seconds": 3600},`, `"burst": 10},`, 1)))
	checkStatus(t, "take 10 of b", s.mustCall(t, "n1", desc("b", "A", 10, false)).Statuses[0], OK, 0)
	st := s.mustCall(t, "n1", blockDesc("b", "A", 1)).Statuses[0]
	checkStatus(t, "a block of b after its block_seconds was removed", st, OK, 0)
	checkBacklog(t, "b left as it was", st, 10*token)
	if st := s.mustCall(t, "n1", blockDesc("b", state.SluiceIDOfKey("acme"), 20)).Statuses[0]; st.Code != OVER {
		t.Errorf("acme's override keeps its own block: %v, want OVER_LIMIT", st)
	}
	if got := testutil.ToFloat64(m.blocks.WithLabelValues("b")); got != 1 {
		t.Errorf("blocks of b %g, want acme's 1", got)
	}
	if got := testutil.CollectAndCount(m.blocks); got != 1 {
		t.Errorf("%d series of sluice_fleet_blocks_total, want b's only", got)
	}
}

// After a block of S seconds, every take is refused until S + n·T have
// passed (n the take's tokens, T the time one takes to refill), on the
// backend's real clock: at 10 tokens/s, burst 10, block_seconds 1, the
// bucket is full 2 s after the block, and a take of 2 is granted 1.2 s
// after it.
func TestTakesAfterABlockWaitForTheBlockAndTheirRefill(t *testing.T) {
	forEachBackend(t, testTakesAfterABlock)
}

func testTakesAfterABlock(t *testing.T, b Backend) {
	s := startRLS(t, Options{Backend: b, Rules: blockRules(t), Timeout: time.Second})
	OK, OVER := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	start := time.Now()
	// One call: the bucket is blocked before it refills.
	resp := s.mustCall(t, "n1", desc("fast", "A", 10, false), blockDesc("fast", "A", 1))
	checkStatus(t, "take 10 of 10", resp.Statuses[0], OK, 0)
	checkStatus(t, "block after an ask of 1", resp.Statuses[1], OVER, 0)
	if d := resp.Statuses[1].DurationUntilReset.AsDuration(); d != 2*time.Second {
		t.Fatalf("duration_until_reset %v after a block of 1 s at 10/s, burst 10, want 2 s (full again)", d)
	}
	refused := 0
	for {
		st := s.mustCall(t, "n1", desc("fast", "A", 2, false)).Statuses[0]
		if st.Code == OK {
			break
		}
		refused++
		if time.Since(start) > 10*time.Second {
			t.Fatal("no grant 10 s after a block of 1 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The backend granted it at its time >= the block's + 1 s + 0.2 s.
	t.Logf("a take of 2 granted %v after the block, %d refused before", time.Since(start), refused)
	if took := time.Since(start); took < 1195*time.Millisecond || took > 4*time.Second || refused == 0 {
		t.Fatalf("a take of 2 granted %v after the block (%d takes refused before), want 1.2 s and not much more", took, refused)
	}
}

// Returns during a block move its TAT back as any return does: they
// shorten the block by their tokens' refill time. A block op meanwhile
// finds the bucket below empty and changes nothing, until the returns
// have made room for a take.
func TestReturnsDuringABlockShortenIt(t *testing.T) { forEachBackend(t, testReturnsDuringABlock) }

func testReturnsDuringABlock(t *testing.T, b Backend) {
	s := startRLS(t, Options{Backend: b, Rules: blockRules(t), Timeout: time.Second})
	OK, OVER := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	const blocked = 10*token + time.Hour
	checkStatus(t, "take 10", s.mustCall(t, "n1", desc("b", "R", 10, false)).Statuses[0], OK, 0)
	checkStatus(t, "block", s.mustCall(t, "n1", blockDesc("b", "R", 1)).Statuses[0], OVER, 0)
	resp := s.mustCall(t, "n1", desc("b", "R", 3, true), blockDesc("b", "R", 1), desc("b", "R", 1, false))
	checkBacklog(t, "a return of 3 during the block", resp.Statuses[0], blocked-3*token)
	checkStatus(t, "a block after it, still below empty", resp.Statuses[1], OK, 0)
	checkBacklog(t, "the block op changed nothing", resp.Statuses[1], blocked-3*token)
	checkStatus(t, "a take after it", resp.Statuses[2], OVER, 0)
	resp = s.mustCall(t, "n1", desc("b", "R", 2, true), desc("b", "R", 1, false))
	checkBacklog(t, "2 more returned", resp.Statuses[0], blocked-5*token)
	checkStatus(t, "a take of 1 once 1.4 tokens are back", resp.Statuses[1], OK, 0)
}

// A caller that gave up before the answer sends its blocks again (it
// counts the call as failed): the admin never undoes a block, and gives
// back no tokens for a block op that left the bucket as it was (a block
// takes none).
func TestRLSKeepsTheBlocksOfACallerThatGaveUp(t *testing.T) { forEachBackend(t, testKeepBlocks) }

func testKeepBlocks(t *testing.T, b Backend) {
	m := NewMetrics()
	s := startRLS(t, Options{Backend: b, Rules: blockRules(t), Metrics: m, Timeout: 5 * time.Second})
	OK := rlsv3.RateLimitResponse_OK
	checkStatus(t, "take 5 of X", s.mustCall(t, "n1", desc("b", "X", 5, false)).Statuses[0], OK, 5)
	checkStatus(t, "take 10 of Y", s.mustCall(t, "n1", desc("b", "Y", 10, false)).Statuses[0], OK, 0)
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.srv.ShouldRateLimit(gone, &rlsv3.RateLimitRequest{Domain: "sluice",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{blockDesc("b", "X", 1), blockDesc("b", "Y", 1)}})
	if status.Code(err) != codes.Canceled {
		t.Fatalf("the call of a caller that gave up ended with %v, want Canceled", err)
	}
	if n := testutil.ToFloat64(m.requests.WithLabelValues(RequestAbandoned)); n != 1 {
		t.Errorf("abandoned calls %v, want 1", n)
	}
	resp := s.mustCall(t, "n1", desc("b", "X", 0, false), desc("b", "Y", 0, false))
	checkStatus(t, "X as before (nothing given back)", resp.Statuses[0], OK, 5)
	checkBacklog(t, "X's backlog", resp.Statuses[0], 5*token)
	checkStatus(t, "Y still blocked", resp.Statuses[1], OK, 0)
	checkBacklog(t, "Y's block", resp.Statuses[1], 10*token+time.Hour)
}

func TestBlockDescriptorsParse(t *testing.T) {
	d := &ratelimitv3.RateLimitDescriptor{Entries: entries(KeyRule, "g", KeyOp, OpBlock, KeyID, "A")}
	d.HitsAddend = desc("g", "A", 7, false).HitsAddend
	it, err := parseDescriptor(3, d, 0)
	if err != nil || !it.block || it.charge || it.ret || it.hits != 7 || it.opEntry != 1 || it.rule != "g" || it.id != "A" {
		t.Fatalf("a block: %+v %v", it, err)
	}
	for _, c := range []struct {
		hits    int64
		reqHits uint32
		want    uint64
	}{
		{0, 9, 1},  // 0: an ask of 1
		{-1, 5, 5}, // the request's hits_addend
		{-1, 0, 1}, // neither: 1
	} {
		if it, err := parseDescriptor(0, blockDesc("g", "A", c.hits), c.reqHits); err != nil || !it.block || it.hits != c.want {
			t.Errorf("a block of hits_addend %d (the request's %d): %+v %v, want %d tokens", c.hits, c.reqHits, it, err, c.want)
		}
	}
	negative := blockDesc("g", "A", 1)
	negative.IsNegativeHits = true
	withWindow := blockDesc("g", "A", 1)
	withWindow.Entries = append(withWindow.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: KeyWindow, Value: "0"})
	twice := blockDesc("g", "A", 1)
	twice.Entries = append(twice.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: KeyOp, Value: OpCharge})
	for _, c := range []struct {
		d    *ratelimitv3.RateLimitDescriptor
		want string
	}{
		{negative, "descriptors[0].is_negative_hits: true with sluice_op=block"},
		{withWindow, "descriptors[0].entries: sluice_window without sluice_op=return"},
		{twice, "descriptors[0].entries[3]: sluice_op appears twice"},
		{&ratelimitv3.RateLimitDescriptor{Entries: entries(KeyRule, "g", KeyID, "A", KeyOp, "Block")},
			`descriptors[0].entries[2]: sluice_op "Block": want "return", "charge" or "block"`},
		{&ratelimitv3.RateLimitDescriptor{Entries: entries(KeyOp, OpBlock, KeyID, "A")}, "descriptors[0].entries: sluice_rule missing"},
	} {
		if _, err := parseDescriptor(0, c.d, 0); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want one containing %q", err, c.want)
		}
	}
	// Refused for the whole call, nothing run.
	fb := &fakeBackend{}
	s := NewServer(Options{Backend: fb, Rules: blockRules(t)})
	_, err = s.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "sluice",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("b", "A", 1, false), negative}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "descriptors[1].is_negative_hits") || fb.ops != 0 {
		t.Errorf("a call with a negative block: %v, %d ops, want INVALID_ARGUMENT naming descriptors[1].is_negative_hits and none", err, fb.ops)
	}
}
