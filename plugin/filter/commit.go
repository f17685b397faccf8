package filter

import (
	"errors"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"
)

type commitResult int

const (
	commitOK      commitResult = iota
	commitFailed               // storage error or retries exhausted: fail open
	commitRefused              // after a re-read the rule refuses the request
)

// commit writes a's new state with CAS, re-reading and re-deciding on
// mismatch.
func (p *pluginContext) commit(a *application, now float64) commitResult {
	if a.rule.fleet != nil {
		return p.fleetCommit(a, now) // fleet.go
	}
	if a.rule.respCost {
		return commitOK // admitted, nothing taken: the response is charged (charge.go)
	}
	return p.committed(a, now, p.store(a))
}

// committed finishes a commit whose first store returned err: counts an
// overflow decision, or re-reads, re-decides and stores again on a CAS
// mismatch. (decide makes the first store itself for the commonest rules,
// saving the call to commit.)
func (p *pluginContext) committed(a *application, now float64, err error) commitResult {
	for attempt := 1; ; attempt++ {
		if err == nil {
			if a.read.claim == claimOverflow {
				a.overflowed = true
				p.countOverflow(a)
			}
			return commitOK
		}
		if !p.mayRetry(a, attempt, err) {
			return commitFailed
		}
		corrupt, lerr := p.load(a, now)
		if corrupt {
			p.logCorrupt(a)
		}
		if lerr != nil {
			p.failOpen(a, lerr)
			return commitFailed
		}
		a.take(now)
		if !a.dec.Allowed {
			return commitRefused
		}
		err = p.store(a)
	}
}

// mayRetry handles a failed write of rule a on its attempt-th try: a CAS
// mismatch is counted and may be retried (after a re-read) until
// maxAttempts; anything else, or running out of attempts, fails the rule
// open.
func (p *pluginContext) mayRetry(a *application, attempt int, err error) bool {
	if !errors.Is(err, types.ErrorStatusCasMismatch) {
		p.failOpen(a, err)
		return false
	}
	a.rule.m.casRetries.inc()
	if attempt >= maxAttempts {
		p.failOpen(a, errRetriesExhausted)
		return false
	}
	return true
}

// refundCommitted gives back the tokens of rules this request already
// committed, because a later rule refused it.
func (p *pluginContext) refundCommitted(apps []application) {
	for i := range apps {
		a := &apps[i]
		if !a.committed {
			continue
		}
		a.committed = false
		if a.rule.respCost {
			continue // admitted without taking anything (charge.go)
		}
		if !p.refund(a) {
			p.vm.globals().refundFailed.inc()
			p.vm.logLimited(logRefund, "sluice: rule "+a.rule.name+": could not refund a rejected request's tokens")
		}
	}
}
