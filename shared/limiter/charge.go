package limiter

import (
	"math"
	"strconv"

	"github.com/sluice-rl/sluice/shared/state"
)

// Costs known only from the response (a rule whose cost_source is
// "response_header:<name>" or "response_trailer:<name>"): the request is
// decided by Admit, which takes nothing, and the cost the response reports
// is charged afterwards by Charge, which never rejects: it may leave the
// bucket in debt (negative tokens, down to -maxDebt), and later requests
// are refused until the refill has paid the debt back. Over any interval
// of t seconds the charged costs of the admitted requests are then at most
// Burst + Rate*t + maxDebt plus what the requests still in flight will
// report: every request is admitted against a bucket that is not empty.

// Admit decides the request phase of a response-charged token bucket: the
// bucket is refilled to now (as Take does) and the request is admitted
// while it holds more than nothing (not empty, not in debt). Nothing is
// taken. A rejected request's Wait is the time until the bucket holds
// something again.
func (tb TokenBucket) Admit(s state.Bucket, exists bool, now float64) (state.Bucket, Decision) {
	next, d := tb.Take(s, exists, now, 0)
	if next.Tokens > 0 {
		return next, d
	}
	// Empty or in debt: refused until the refill pays the debt back.
	rate := tb.Rate
	if !(rate > 0) || math.IsInf(rate, 0) {
		rate = math.SmallestNonzeroFloat64
	}
	d.Allowed = false
	d.Wait = max(finite(-next.Tokens/rate), minWait)
	d.Remaining = 0
	return next, d
}

// AdmitCost decides the request phase of a rule that charges a known cost
// for some responses only ("response_status:<statuses>": a failed login
// costs 1, a successful one nothing). The request is admitted when the
// bucket holds that cost, as Take would admit it, so a bucket of burst 3
// admits three failures and then one per 1/Rate seconds; but nothing is
// taken: the response decides whether Charge takes it. A rejected
// request's Wait is Take's, the time until the bucket holds the cost.
func (tb TokenBucket) AdmitCost(s state.Bucket, exists bool, now, cost float64) (state.Bucket, Decision) {
	next, d := tb.Take(s, exists, now, 0)
	if _, dc := tb.Take(s, exists, now, cost); !dc.Allowed {
		return next, dc
	}
	return next, d
}

// Charge refills the bucket s to now and takes cost from it whatever it
// holds: the bucket may go negative, but not below -maxDebt; a cost that
// would take it lower is clamped there and clamped is true. A NaN or
// negative cost (or maxDebt) counts as 0. A bucket already below -maxDebt
// (after max_debt was lowered) is brought up to it.
func (tb TokenBucket) Charge(s state.Bucket, exists bool, now, cost, maxDebt float64) (next state.Bucket, clamped bool) {
	next, _ = tb.Take(s, exists, now, 0)
	floor := -validCost(maxDebt)
	if math.IsInf(floor, 0) {
		floor = -MaxCost
	}
	t := next.Tokens - validCost(cost)
	if t < floor || math.IsInf(t, 0) {
		t, clamped = floor, true
	}
	next.Tokens = t
	return next, clamped
}

// ParseReportedCost parses a cost a response reports (a response header or
// trailer): a decimal number >= 0 (strconv.ParseFloat syntax, surrounding
// spaces and tabs trimmed; 0 is a valid report: nothing used). A number
// above MaxCost, or too large for a float64, reads as MaxCost (Charge then
// clamps it at the debt limit). It returns false for an empty value,
// garbage, "inf", "nan", hexadecimal and negative numbers: the caller
// charges the rule's default cost instead.
func ParseReportedCost(v string) (float64, bool) {
	v, ok := costText(v)
	if !ok {
		return 0, false
	}
	f, err := strconv.ParseFloat(v, 64)
	switch {
	case math.IsInf(f, 1):
		return MaxCost, true
	case err != nil || !(f >= 0):
		return 0, false
	case f > MaxCost:
		return MaxCost, true
	}
	return f, true
}

// storedUnit is the least amount of tokens shared data keeps: a bucket is
// stored in micro-tokens (state.Bucket.Stored).
const storedUnit = 1e-6

// Block is what a refusal does to the bucket of a rule that blocks
// ("block_seconds"): s, the bucket Take, Admit or AdmitCost returned with
// the refusal d (refilled to now, nothing taken), is put seconds of refill
// below empty, so that the identity is refused for at least that long
// whatever it sends, and d says so: Wait is the time until the bucket
// holds cost again (the refused request's cost: its own for Take, the
// fixed cost for AdmitCost, 0 for Admit), Reset the time until it is full.
//
// A bucket already below empty (in debt, or blocked) is left as it is and
// ok is false: requests refused during a block do not lengthen it, and a
// debt the responses ran up is not turned into a block. An admitted
// request, or seconds <= 0 (or NaN), blocks nothing either. The bucket goes
// at least a micro-token below empty, the least shared data keeps
// (state.Bucket.Stored), so that a block of a rule refilling next to
// nothing is still a block once stored: it then lasts longer than seconds.
func (tb *TokenBucket) Block(d *Decision, s state.Bucket, cost, seconds float64) (state.Bucket, bool) {
	if d.Allowed || !(seconds > 0) || !(s.Tokens >= 0) {
		return s, false
	}
	rate, burst := tb.Rate, tb.Burst
	if !(rate > 0) || math.IsInf(rate, 0) {
		rate = math.SmallestNonzeroFloat64
	}
	if !(burst >= 0) || math.IsInf(burst, 0) {
		burst = 0
	}
	s.Tokens = min(-rate*finite(seconds), -storedUnit)
	d.Remaining = 0
	d.Wait = max(finite((validCost(cost)-s.Tokens)/rate), minWait)
	d.Reset = finite((burst - s.Tokens) / rate)
	return s, true
}
