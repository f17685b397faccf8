package scenario

// block_seconds on a global rule: the block lives in the rate limit
// service's bucket, so one refusal keeps the client out of the whole
// fleet. A request-path ask of a rule that blocks carries the operation
// sluice_op "block" (the request's cost) just before the ask, in the same
// call; the service answers OVER_LIMIT when it blocked. The pool is then
// denied until the block ends: the block's requests are refused with a
// Retry-After that says so, and ask nothing. Syncs never block, nor does
// an override with block_seconds 0, and an older admin that refuses the
// operation makes the plugin send none for a minute while its asks go on.

import (
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

func init() {
	register(Case{Name: "GlobalBlockKeepsARefusedClientOutOfTheFleet", Run: globalBlock})
	register(Case{Name: "GlobalBlockIsNotSentBySyncsNorForAnOverrideWithout", Run: globalBlockNotSentBySyncs})
	register(Case{Name: "BlocksAnOlderAdminRefusesAreDroppedWhileItsAsksGoOn", Run: blocksRefusedByAnOlderAdmin})
}

// fleetBlockConfig: 1 token a second, a burst of 3, a minute's block; the
// partner's override never blocks.
const fleetBlockConfig = `{"fleet": {"cluster": "rls", "timeout_ms": 50, "sync_interval_ms": 100, "lease_ttl_ms": 1000, "lease_max": 40},
 "rules": [{"name": "g", "scope": "global", "limit_keys": ["header:x-tenant"], "algorithm": "token_bucket",
   "overrides": [{"key": "partner", "algorithm_config": {"block_seconds": 0}}],
   "algorithm_config": {"tokens_per_second": 1, "burst": 3, "block_seconds": 60}}]}`

// blockOf returns the tokens a block descriptor carries, or -1 for another
// descriptor.
func blockOf(t testing.TB, d *ratelimitv3.RateLimitDescriptor) int64 {
	t.Helper()
	es := d.GetEntries()
	if len(es) != 3 || es[2].Key != "sluice_op" || es[2].Value != "block" {
		return -1
	}
	if es[0].Key != "sluice_rule" || es[0].Value != "g" || es[1].Key != "sluice_id" || !isHex(es[1].Value, 32) {
		t.Fatalf("block descriptor entries %v", es)
	}
	return int64(d.GetHitsAddend().GetValue())
}

// blockedStatus is a token bucket's answer with the time until it is full.
func blockedStatus(code rlsv3.RateLimitResponse_Code, untilFull time.Duration) *rlsv3.RateLimitResponse_DescriptorStatus {
	return &rlsv3.RateLimitResponse_DescriptorStatus{Code: code, DurationUntilReset: durationpb.New(untilFull)}
}

// askWithBlock checks that call c carries the block of 1 token, then the
// ask, for one identity.
func askWithBlock(t testing.TB, c Call, node string) {
	t.Helper()
	r := rlsCall(t, c, node)
	if len(r.Descriptors) != 2 || blockOf(t, r.Descriptors[0]) != 1 || blockOf(t, r.Descriptors[1]) != -1 ||
		r.Descriptors[0].Entries[1].Value != r.Descriptors[1].Entries[1].Value {
		t.Fatalf("descriptors %v; want the block of 1 token, then the ask, of one identity", r.Descriptors)
	}
}

// grantedAlone checks that the one pending call is a lone ask (no block)
// for the paused request res, grants it and wants res admitted.
func grantedAlone(t testing.TB, h Host, node, what string, res Response) {
	t.Helper()
	c := onlyCall(t, h, what)
	if r := rlsCall(t, c, node); len(r.Descriptors) != 1 || blockOf(t, r.Descriptors[0]) != -1 {
		t.Fatalf("%s: %v, want the ask alone", what, r.Descriptors)
	}
	answerRLS(t, h, c, "1", okStatus())
	if settled(t, what, res).Rejected {
		t.Fatalf("%s: rejected with a lease granted", what)
	}
}

func globalBlock(t *testing.T, start Starter) {
	const node = "node-a"
	h := mustStart(t, start, Options{NodeID: node, Config: []byte(fleetBlockConfig), Start: noon})
	acme := req("x-tenant", "acme")

	// The service refuses acme's ask and blocks it: 60 s below empty, so
	// its bucket is full again in 3 + 60 s.
	res := do(t, h, acme)
	if !res.Paused {
		t.Fatalf("the first request did not ask (rejected %v)", res.Rejected)
	}
	c := onlyCall(t, h, "acme's ask")
	askWithBlock(t, c, node)
	answerRLS(t, h, c, "1", blockedStatus(rlsv3.RateLimitResponse_OVER_LIMIT, 63*time.Second),
		blockedStatus(rlsv3.RateLimitResponse_OVER_LIMIT, 63*time.Second))
	final := settled(t, "acme's refused ask", res)
	if !final.Rejected || final.Status != 429 {
		t.Fatalf("acme after the block: rejected %v status %d", final.Rejected, final.Status)
	}
	// The block, then a second for a token, plus the jitter (at most half).
	if ra := atoi(t, "retry-after", header(final.ResponseHeaders, "retry-after")); ra < 61 || ra > 92 {
		t.Errorf("acme's refusal: Retry-After %d, want the block's 61 s (with jitter, at most 92)", ra)
	}
	wantMetrics(t, h, map[string]uint64{"sluice.rule.g.blocked": 1})

	// Half a minute on, well past the lease's TTL: still refused from the
	// pool, and nothing asks the service, neither a request nor a sync.
	h.Advance(30 * time.Second)
	res = do(t, h, acme)
	if !res.Rejected || res.Paused {
		t.Fatalf("30 s into the block: rejected %v paused %v; want refused from the pool", res.Rejected, res.Paused)
	}
	if ra := atoi(t, "retry-after", header(res.ResponseHeaders, "retry-after")); ra < 31 || ra > 47 {
		t.Errorf("30 s into the block: Retry-After %d, want what is left, 31 s (with jitter, at most 47)", ra)
	}
	for range 3 {
		step(t, h, 100*time.Millisecond)
		if calls := pending(t, h); len(calls) != 0 {
			t.Fatalf("%d calls during the block; a blocked pool asks nothing", len(calls))
		}
	}

	// Another Envoy blocked bob already: the service changes nothing (OK)
	// and refuses the ask, whose answer shows the bucket 40 s below empty.
	// The pool is denied that long; no block is counted here.
	bob := req("x-tenant", "bob")
	res = do(t, h, bob)
	c = onlyCall(t, h, "bob's ask")
	askWithBlock(t, c, node)
	answerRLS(t, h, c, "1", blockedStatus(rlsv3.RateLimitResponse_OK, 43*time.Second),
		blockedStatus(rlsv3.RateLimitResponse_OVER_LIMIT, 43*time.Second))
	final = settled(t, "bob's refused ask", res)
	if ra := atoi(t, "retry-after", header(final.ResponseHeaders, "retry-after")); !final.Rejected || ra < 40 || ra > 60 {
		t.Fatalf("bob, blocked elsewhere: rejected %v, Retry-After %d; want refused for the 40 s left", final.Rejected, ra)
	}
	h.Advance(20 * time.Second)
	if res := do(t, h, bob); !res.Rejected || res.Paused {
		t.Fatalf("bob 20 s later: rejected %v paused %v; want refused from the pool", res.Rejected, res.Paused)
	}
	wantMetrics(t, h, map[string]uint64{"sluice.rule.g.blocked": 1})

	// After the block (and a token's second) acme asks again; the bucket
	// pays, the block changes nothing, and the ask is granted.
	h.Advance(11 * time.Second)
	res = do(t, h, acme)
	if !res.Paused {
		t.Fatalf("61 s after the block began acme did not ask (rejected %v)", res.Rejected)
	}
	c = onlyCall(t, h, "acme's ask after the block")
	askWithBlock(t, c, node)
	answerRLS(t, h, c, "1", blockedStatus(rlsv3.RateLimitResponse_OK, 3*time.Second), okStatus())
	if settled(t, "acme after the block", res).Rejected {
		t.Fatal("acme rejected after the block, with the ask granted")
	}
	wantMetrics(t, h, map[string]uint64{"sluice.rule.g.blocked": 1})
	noRecoveredPanics(t, h)
}

func globalBlockNotSentBySyncs(t *testing.T, start Starter) {
	const node = "node-a"
	h := mustStart(t, start, Options{NodeID: node, Config: []byte(fleetBlockConfig), Start: noon})

	// The partner's override has block_seconds 0: its ask goes alone.
	grantedAlone(t, h, node, "the partner's ask", do(t, h, req("x-tenant", "partner")))

	// acme gets a lease; the syncs that refill it, granted or refused,
	// never carry a block: a refill asked ahead of need refuses nobody.
	res := do(t, h, req("x-tenant", "acme"))
	c := onlyCall(t, h, "acme's ask")
	askWithBlock(t, c, node)
	answerRLS(t, h, c, "1", okStatus(), okStatus())
	if settled(t, "acme's first request", res).Rejected {
		t.Fatal("acme was rejected with a lease granted")
	}
	syncs := 0
	for i := range 10 {
		do(t, h, req("x-tenant", "acme")) // spends, so the sync refills
		step(t, h, 100*time.Millisecond)
		for _, c := range pending(t, h) {
			r := rlsCall(t, c, node)
			var st []*rlsv3.RateLimitResponse_DescriptorStatus
			for _, d := range r.Descriptors {
				if blockOf(t, d) != -1 {
					t.Fatalf("tick %d: a sync carried a block: %v", i, r.Descriptors)
				}
				code := rlsv3.RateLimitResponse_OVER_LIMIT // the bucket is empty: refills are refused
				if isReturn(d) {
					code = rlsv3.RateLimitResponse_OK
				}
				st = append(st, blockedStatus(code, 3*time.Second))
			}
			answerRLS(t, h, c, "1", st...)
			syncs++
		}
	}
	if syncs == 0 {
		t.Fatal("no sync went out: the test checks nothing")
	}
	wantMetrics(t, h, map[string]uint64{"sluice.rule.g.blocked": 0})
	noRecoveredPanics(t, h)
}

func blocksRefusedByAnOlderAdmin(t *testing.T, start Starter) {
	const node = "node-a"
	h := mustStart(t, start, Options{NodeID: node, Config: []byte(fleetBlockConfig), Start: noon})
	res := do(t, h, req("x-tenant", "acme"))
	c := onlyCall(t, h, "acme's ask")
	askWithBlock(t, c, node)
	refused := []Header{{":status", "200"}, {"content-type", "application/grpc"}, {"grpc-status", "3"},
		{"grpc-message", `descriptors[0].entries[2]: sluice_op "block": want "return" or "charge"`}}
	if err := h.Respond(c.ID, refused, nil); err != nil {
		t.Fatal(err)
	}
	// The ask goes out again at once, alone, for the same request.
	grantedAlone(t, h, node, "the ask again, without the block", res)
	if logsContaining(h, "refuses blocks") != 1 {
		t.Errorf("the refusal is not logged once: %q", h.Logs())
	}
	wantMetrics(t, h, map[string]uint64{"sluice.rule.g.backend_errors": 0})

	// For a minute asks carry no block; then they do again.
	h.Advance(30 * time.Second)
	grantedAlone(t, h, node, "bob's ask while blocks are held", do(t, h, req("x-tenant", "bob")))
	h.Advance(31 * time.Second)
	res = do(t, h, req("x-tenant", "carol"))
	c = onlyCall(t, h, "carol's ask a minute later")
	askWithBlock(t, c, node)
	answerRLS(t, h, c, "1", okStatus(), okStatus())
	if settled(t, "carol's request", res).Rejected {
		t.Fatal("carol was rejected with a lease granted")
	}
	noRecoveredPanics(t, h)
}
