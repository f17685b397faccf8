package filter

// Blocking after a refusal ("block_seconds", token_bucket rules): when a
// rule refuses an identity whose bucket is empty (not in debt, not blocked
// already), the bucket is put block_seconds of refill below empty
// (limiter.TokenBucket.Block) and stored, so the identity is refused for
// that long whatever it sends, and the refusal's Retry-After says so.
// Requests refused during a block do not lengthen it.
//
// It is the one write a refusal makes, and it is the refusing rule's own:
// the other rules of a refused request are left as they are. A shadow rule
// blocks its own state, so what it marks is what enforcing it would do.
// The write is one CAS attempt: a write that loses a race with another
// worker, or fails, is dropped, and the identity's next refusal blocks it.
// An identity decided by its group's overflow bucket (bounded storage,
// more identities active at once than max_keys) is not blocked: the
// bucket is shared, and blocking it would block the group's other
// identities.

// block applies a's rule's block to its refusal.
func (p *pluginContext) block(a *application) {
	r := a.rule
	if r.win != nil || r.fleet != nil || a.read.claim == claimOverflow {
		return
	}
	next, ok := r.tb.Block(&a.dec, a.next, blockCost(r, a.cost), r.blockSecs)
	if !ok {
		return
	}
	a.next = next
	if p.store(a) == nil {
		r.m.blocked.inc()
		r.tc.blocked++
	}
}

// blockCost is what a refused request of rule r needed, for the wait a
// block announces: nothing for a cost charged from the response (the
// request is admitted while the bucket holds anything), a counted
// response's fixed cost for a status-charged rule, else its own cost.
func blockCost(r *compiledRule, cost float64) float64 {
	switch {
	case r.respStatus:
		return r.fixedCost
	case r.respCost:
		return 0
	}
	return cost
}
