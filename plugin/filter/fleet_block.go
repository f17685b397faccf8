package filter

import (
	"math"

	"github.com/sluice-rl/sluice/shared/rls"
	"github.com/sluice-rl/sluice/shared/state"
)

// Blocking on a global rule ("block_seconds" with "scope": "global",
// docs/filter.md "Blocks on a global rule"). The block lives in the rate
// limit service's bucket, so one refusal keeps the client out of every
// Envoy of the fleet:
//
//   - A request-path ask of a rule that blocks carries, just before the
//     ask in the same call, the operation sluice_op "block" with the
//     request's cost. The service blocks the identity (puts its bucket
//     block_seconds below empty) when the bucket cannot pay that cost and
//     is not below empty already, and answers OVER_LIMIT when it did. So
//     the ask after it is refused, and the request with it.
//   - Syncs never block: a refill asked ahead of need is not a request
//     refused.
//   - The answer of a blocked bucket (the block's, or any refused ask's
//     showing the bucket below empty) denies the identity's pool until the
//     block ends, not for one sync interval as an ordinary refusal: the
//     requests of the block are refused from the pool, with a Retry-After
//     that says so, and ask nothing.
//   - While the backend is down nothing blocks (on_backend_down decides),
//     and a service that does not know the operation (an older admin)
//     makes the plugin send none for a minute.

// addBlock puts the block operation of a's rule ahead of its request-path
// ask in batch, when the rule (or the identity's override) blocks.
func (p *pluginContext) addBlock(batch *syncBatch, a *application, ref poolRef) {
	r := a.rule
	if r.blockSecs <= 0 || p.vm.fleet.nowMS() < p.vm.fleet.blocksHeldUntilMS {
		return
	}
	batch.add(r, ref, opBlock, blockTokens(r, a.cost), 0)
}

// blockTokens is what the refused request needed, in whole tokens as the
// service counts (at least one): blockCost rounded up.
func blockTokens(r *compiledRule, cost float64) int64 {
	c := math.Ceil(min(blockCost(r, cost), 1<<52))
	if !(c >= 1) {
		return 1
	}
	return int64(c)
}

// blockAnswered applies the answer of a block operation: OVER_LIMIT says
// the service blocked the identity, which the rule counts, and the pool
// is denied until the bucket can pay the request again.
func (p *pluginContext) blockAnswered(it *batchItem, st *rls.Status, now int64) {
	if st.Code == rls.CodeOK {
		return // the bucket could pay, or was below empty already: nothing changed
	}
	it.rule.m.blocked.inc()
	it.rule.tc.blocked++
	until := now + belowEmptyMS(it.rule, st, it.amount)
	p.updatePool(it, now, func(pl *state.Pool) {
		if pl.Mode != state.PoolLease || pl.Stamp <= now {
			*pl = state.Pool{Mode: state.PoolLease, Stamp: until, Spent: pl.Spent}
		}
		keepDenial(pl, until)
	})
}

// belowEmptyMS is how long, by a token-bucket status st of rule r, the
// bucket takes to hold n tokens when it is below empty (blocked, or in
// debt): duration_until_reset (until full) less the refill of the burst,
// plus the refill of n. 0 when the bucket is not below empty.
func belowEmptyMS(r *compiledRule, st *rls.Status, n int64) int64 {
	rate := r.fleet.tb.Rate
	if !(rate > 0) || math.IsInf(rate, 0) {
		return 0
	}
	below := float64(st.ResetMillis()) - r.fleet.tb.Burst*1000/rate
	if !(below > 0) {
		return 0
	}
	return int64(math.Ceil(min(below+float64(n)*1000/rate, 1<<52)))
}

// keepDenial denies the pool until until at least, and keeps an empty
// lease alive as long, so that the requests of a block are refused from
// the pool instead of asking the service again when the lease's TTL ends.
// A lease holding tokens keeps its own end: its tokens were granted before
// the block and are spent as granted.
func keepDenial(pl *state.Pool, until int64) {
	pl.DenyUntil = max(pl.DenyUntil, until)
	if pl.Tokens == 0 {
		pl.Stamp = max(pl.Stamp, until)
	}
}
