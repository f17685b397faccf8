package filter

import (
	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/state"
)

// Windowed rules (fixed_window, sliding_window, rolling_window).
//
// They share the token bucket's storage machinery (store.go): the same
// two-phase decision, CAS retries, fail-open, refunds, bounded slots with
// fingerprint and identity in the value, and the overflow limit. Only the state and
// the decision differ: a state.Window (use per period) decided by a
// limiter.Window, under key prefixes of their own (fw:, sw:, rw:), so a
// rule that changes algorithm never decodes another algorithm's state (its
// identities simply start fresh). A slot whose window holds no use inside
// the current window (Reset 0) is equivalent to a fresh one, like a full
// bucket: it may be reused.

// keyPrefix returns the shared-data key prefix of an algorithm's state.
func keyPrefix(algorithm string) string {
	switch algorithm {
	case policy.AlgorithmFixedWindow:
		return state.PrefixFixedWindow
	case policy.AlgorithmSlidingWindow:
		return state.PrefixSlidingWindow
	case policy.AlgorithmRollingWindow:
		return state.PrefixRollingWindow
	case policy.AlgorithmQuota:
		return state.PrefixQuota
	case policy.AlgorithmConcurrency:
		return state.PrefixConcurrency
	}
	return state.PrefixTokenBucket
}

// take decides a's request at now from the state read (phase 1, and again
// after a CAS mismatch): into a.next for a token bucket, a.ws.next for a
// window. Small enough to inline, so the token bucket's path is a branch
// and its Take.
func (a *application) take(now float64) {
	a.now = now
	if a.rule.win == nil && !a.rule.respCost {
		a.next = a.rule.tb.TakeInto(&a.dec, a.read.b, a.read.exists, now, a.cost)
		return
	}
	a.takeWindow(now)
}

func (a *application) takeWindow(now float64) {
	if a.rule.respCost {
		a.takeAdmit(now) // charge.go
		return
	}
	a.ws.next = a.ws.read
	a.dec = a.rule.win.Take(&a.ws.next, a.read.exists, now, a.cost)
}

// windowScratch is a windowed rule's per-request state.
type windowScratch struct {
	read state.Window // the state read (valid when read.exists)
	next state.Window // the state to store
}
