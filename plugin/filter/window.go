package filter

import (
	"strconv"

	"github.com/sluice-rl/sluice/shared/limiter"
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
	}
	return state.PrefixTokenBucket
}

// compileWindow sets a windowed rule's algorithm and precomputed headers:
// RateLimit-Limit and q are the limit, w the window length (draft-10: the
// policy's quota and window).
func (cr *compiledRule) compileWindow(r *policy.Rule) {
	w := r.Window
	win := float64(w.WindowSeconds)
	switch r.Algorithm {
	case policy.AlgorithmFixedWindow:
		cr.win = limiter.FixedWindow{Limit: w.Limit, Window: win}
	case policy.AlgorithmSlidingWindow:
		cr.win = limiter.SlidingWindow{Limit: w.Limit, Window: win}
	default:
		cr.win = limiter.RollingWindow{Limit: w.Limit, Period: float64(w.PeriodSeconds), Periods: w.Periods(), MaxPerPeriod: w.MaxPerPeriod}
	}
	cr.reason = r.Algorithm + "_exceeded"
	cr.limitHdr = strconv.FormatInt(wholeTokens(w.Limit), 10)
	cr.policyHdr = `"` + r.Name + `";q=` + cr.limitHdr + ";w=" + strconv.FormatInt(int64(w.WindowSeconds), 10)
}

// quotaPeriods maps the configuration's period names to the limiter's.
var quotaPeriods = map[string]limiter.Period{
	policy.PeriodHour: limiter.PeriodHour, policy.PeriodDay: limiter.PeriodDay,
	policy.PeriodWeek: limiter.PeriodWeek, policy.PeriodMonth: limiter.PeriodMonth,
}

// compileQuota sets a quota rule's algorithm (a window of one count per
// calendar period, with its own bounds cache: this VM runs one callback at
// a time) and headers: q is the limit, w the period's nominal length.
// Retry-After is the time to the reset, without jitter: a jitter of up to
// half a month would say nothing useful.
func (cr *compiledRule) compileQuota(r *policy.Rule) {
	q := r.Quota
	cr.quota = limiter.NewQuota(q.Limit, quotaPeriods[q.Period], q.Location)
	cr.win = cr.quota
	cr.exactRetry = true
	cr.reason = "quota_exceeded"
	cr.limitHdr = strconv.FormatInt(wholeTokens(q.Limit), 10)
	cr.policyHdr = `"` + r.Name + `";q=` + cr.limitHdr + ";w=" + strconv.FormatInt(int64(cr.quota.PeriodSeconds()), 10)
}

// take decides a's request at now from the state read (phase 1, and again
// after a CAS mismatch): into a.next for a token bucket, a.ws.next for a
// window. Small enough to inline, so the token bucket's path is a branch
// and its Take.
func (a *application) take(now float64) {
	a.now = now
	if a.rule.win == nil && !a.rule.respCost {
		a.next, a.dec = a.rule.tb.Take(a.read.b, a.read.exists, now, a.cost)
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
