package filter

import (
	"errors"
	"math"
	"slices"
	"strings"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/sluice-rl/sluice/shared/limiter"
	"github.com/sluice-rl/sluice/shared/state"
)

// Fleet mode, costs reported by the response on a global token bucket
// (docs/filter.md "Costs reported by the response on a global rule").
//
// The request is admitted while the identity's pool holds something
// (decidePool's admitOnly) and takes nothing. The response's cost is
// charged where the admission came from:
//
//   - a live lease pays what it holds; the rest is owed to the rate limit
//     service, which takes it from the global bucket unconditionally, into
//     its debt (a descriptor with sluice_op "charge"). So the debt is the
//     fleet's: every process's next ask for the identity is refused until
//     the global refill has paid it back;
//   - a local-share bucket (the backend is down) goes into debt itself,
//     down to its share of max_debt, like a local rule's bucket;
//   - no pool (it lapsed or was evicted since the request, or the request
//     was admitted by on_backend_down "allow"): the whole cost is owed.
//
// What is owed waits in the VM's table (owedCharge) and goes out with the
// VM's next tick, one call for up to maxBatch identities, or ahead of a
// request-path ask for the same identity, in the same call, so that the ask
// is decided after the debt. A call that fails puts its charges back.

// maxOwed bounds the identities with charges waiting in one VM; a charge
// for another identity beyond it is dropped (response_cost_failed).
const maxOwed = maxHotPools

var errOwedFull = errors.New("too many charges waiting for the rate limit service")

// owedCharge is what one identity of a global rule owes the service.
type owedCharge struct {
	ref   poolRef
	micro int64
}

// chargePool charges cost to a global rule's pool (see the file comment)
// and updates the response's RateLimit fields when the rule sends them.
func (p *pluginContext) chargePool(h *httpContext, c *pendingCharge, cost float64) {
	a := p.pendingApp(h, c)
	r := c.rule
	now := nowSeconds()
	a.cost, a.now = cost, now
	state.AppendSluiceID(a.fl.id[:0], a.identity)
	costU := int64(math.Ceil(min(cost, limiter.MaxCost) * micro))
	env := p.poolEnv(a, now, true)
	shareDebt := r.maxDebt / float64(p.vm.fleet.fleetSize(r.fleet.fc))
	for attempt := 1; ; attempt++ {
		if err := p.readPool(a, now); err != nil {
			p.chargeFailed(a, err)
			return
		}
		next, owed, clamped := chargedPool(a.fl.pool, a.fl.exists, costU, &env, shareDebt)
		if a.fl.exists && next != a.fl.pool { // a lapsed lease is left as it is
			err := errZeroCAS
			if !a.fl.stored || a.fl.cas != 0 {
				err = p.putPool(a, a.fl.way, next, a.fl.stored, a.fl.cas)
			}
			if errors.Is(err, types.ErrorStatusCasMismatch) && attempt < maxChargeAttempts {
				r.m.casRetries.inc()
				continue
			}
			if err != nil {
				p.chargeFailed(a, err)
				return
			}
		}
		if owed > 0 && !p.vm.fleet.owe(poolRef{rule: r.name, id: a.fl.id, fp: a.fp}, owed) {
			p.chargeFailed(a, errOwedFull)
			return
		}
		if clamped {
			r.cm.clamped.inc()
		}
		r.cm.charged.inc()
		r.tc.respCharged++
		h.chargedNumbers(r, next, owed > 0, now)
		return
	}
}

// chargedPool applies a response's cost (micro-tokens) to the pool read:
// what a live lease cannot pay is owed to the service; a local-share
// bucket goes into debt, down to shareDebt tokens; without a pool the whole
// cost is owed. clamped: the share's debt limit was hit.
func chargedPool(p state.Pool, exists bool, costU int64, env *poolEnv, shareDebt float64) (next state.Pool, owed int64, clamped bool) {
	switch {
	case exists && p.Mode == state.PoolLease && p.Stamp > env.nowMS:
		paid := min(p.Tokens, costU)
		p.Tokens -= paid
		p.Spent += costU // the demand the next lease is sized from
		return p, costU - paid, false
	case exists && p.Mode == state.PoolShare:
		b := state.Bucket{Tokens: float64(p.Tokens) / micro, LastRefill: float64(p.Stamp) / 1000}
		nb, clamped := env.share.Charge(b, true, float64(env.nowMS)/1000, float64(costU)/micro, shareDebt)
		p.Tokens = int64(math.Floor(nb.Tokens * micro))
		p.Stamp = int64(math.Round(nb.LastRefill * 1000))
		p.Spent += costU
		return p, 0, clamped
	}
	return p, costU, false
}

// chargedNumbers updates the RateLimit fields (and a rule's own fields) of
// rule r to its pool after a charge: nothing is left once a charge is owed.
// The reset is a quota's lease's end (its period's), else the time the
// rule's rate takes to refill its burst, as on the request path.
func (h *httpContext) chargedNumbers(r *compiledRule, pl state.Pool, owing bool, now float64) {
	left := max(0, float64(pl.Tokens)/micro)
	if owing {
		left = 0
	}
	reset := r.fleet.poolReset(left, pl.Mode == state.PoolLease, pl.Stamp, now)
	if h.allowed.rule == r {
		h.allowed.remaining, h.allowed.resetF, h.allowed.reset = wholeTokens(left), reset, ceilSeconds(reset)
	}
	for i := range h.own { // limit_headers.go
		if o := &h.own[i]; o.rule == r {
			o.remaining, o.resetF, o.reset = wholeTokens(left), reset, ceilSeconds(reset)
		}
	}
}

// owe adds micro-tokens to what the identity of ref owes the service. False
// when the table is full.
func (fs *fleetState) owe(ref poolRef, amount int64) bool {
	k := hotKeyFleet{rule: ref.rule, id: ref.id}
	if o := fs.owed[k]; o != nil {
		o.micro = min(o.micro+amount, math.MaxInt64/2)
		return true
	}
	if len(fs.owed) >= maxOwed {
		return false
	}
	if fs.owed == nil {
		fs.owed = map[hotKeyFleet]*owedCharge{}
	}
	fs.owed[k] = &owedCharge{ref: ref, micro: amount}
	return true
}

// addOwed puts what the identity of ref owes ahead of an ask in batch, and
// clears it from the table. While charges are held, they stay owed.
func (fs *fleetState) addOwed(batch *syncBatch, r *compiledRule, ref poolRef) {
	k := hotKeyFleet{rule: ref.rule, id: ref.id}
	o := fs.owed[k]
	if o == nil || fs.nowMS() < fs.chargesHeldUntilMS {
		return
	}
	delete(fs.owed, k)
	batch.add(r, o.ref, opCharge, wholeOwed(o.micro), 0)
}

// wholeOwed is a charge in whole tokens, as the service counts: rounded up,
// against the client.
func wholeOwed(u int64) int64 { return (u + micro - 1) / micro }

// flushOwed sends what this VM's identities owe, up to maxBatch of them,
// in one call (at most one such call in flight). Owed charges wait while
// the backend is down: the sync's asks probe it.
func (p *pluginContext) flushOwed(now int64) {
	fs, fc := &p.vm.fleet, p.cfg.fleet
	if len(fs.owed) == 0 || !fs.healthy || now < fs.chargesHeldUntilMS {
		return
	}
	if fs.owedCall != nil {
		if now-fs.owedAtMS < 4*int64(fc.src.TimeoutMS)+fc.syncMS {
			return
		}
		fs.owedCall = nil // the host lost the callback: its charges are lost with it
	}
	refs := make([]poolRef, 0, len(fs.owed))
	for _, o := range fs.owed {
		refs = append(refs, o.ref)
	}
	slices.SortFunc(refs, compareRefs)
	batch := &syncBatch{owed: true}
	for _, ref := range refs[:min(len(refs), maxBatch)] {
		if r := p.cfg.byName[ref.rule]; r != nil && r.fleet != nil {
			fs.addOwed(batch, r, ref)
		} else {
			delete(fs.owed, hotKeyFleet{rule: ref.rule, id: ref.id}) // the rule is gone or no longer global
		}
	}
	if len(batch.items) > 0 && p.dispatch(batch) {
		fs.owedCall, fs.owedAtMS = batch, now
	}
}

// opRetryMS is how long an operation is held after the service refused
// it as one it does not know.
const opRetryMS = 60_000

// refusedOp reads a call's gRPC error: an admin older than the plugin (mid
// rolling upgrade) refuses the whole call with INVALID_ARGUMENT naming the
// descriptor's sluice_op it does not know, "charge" or "block". opFetch:
// neither.
func refusedOp(grpcStatus, grpcMessage string) fleetOp {
	switch {
	case grpcStatus != "3":
	case strings.Contains(grpcMessage, `sluice_op "charge"`):
		return opCharge
	case strings.Contains(grpcMessage, `sluice_op "block"`):
		return opBlock
	}
	return opFetch
}

// has reports whether the call carries an operation op.
func (b *syncBatch) has(op fleetOp) bool {
	return slices.ContainsFunc(b.items, func(it batchItem) bool { return it.op == op })
}

// resendWithout handles a call refused for an operation the service does
// not know (op: opCharge or opBlock). Charges are owed again and held for
// opRetryMS; blocks are dropped and not sent for as long (a block is the
// one write of a refusal, never retried). So the other operations of this
// VM (asks, refills, returns) go on against an older admin instead of
// failing with them; the rest of the call goes out again at once, for the
// same waiting requests. False when there is no rest, or it could not be
// sent (dispatch then counted the failure): the call is then finished.
func (p *pluginContext) resendWithout(batch *syncBatch, op fleetOp, now int64) bool {
	fs := &p.vm.fleet
	if op == opCharge {
		fs.oweAgain(batch)
		fs.chargesHeldUntilMS = now + opRetryMS
		p.vm.logLimited(logFleet, `sluice: fleet: the rate limit service refuses charges (sluice_op "charge"; an admin older than this plugin?): response costs beyond the leases are kept and sent again in 60 s; upgrade the admins`)
	} else {
		fs.blocksHeldUntilMS = now + opRetryMS
		p.vm.logLimited(logFleet, `sluice: fleet: the rate limit service refuses blocks (sluice_op "block"; an admin older than this plugin?): global rules do not block for 60 s; upgrade the admins`)
	}
	rest := &syncBatch{pending: batch.pending, requestPath: batch.requestPath}
	for _, it := range batch.items {
		if it.op != op {
			rest.items = append(rest.items, it)
		}
	}
	if batch.owed || len(rest.items) == 0 || !p.dispatch(rest) {
		return false
	}
	if fs.sync == batch {
		fs.sync = rest
	}
	return true
}

// oweAgain puts back the charges of a call that failed.
func (fs *fleetState) oweAgain(batch *syncBatch) {
	for _, it := range batch.items {
		if it.op == opCharge {
			fs.owe(it.ref, it.amount*micro)
		}
	}
}
