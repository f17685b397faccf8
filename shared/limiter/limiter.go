// Package limiter holds Sluice's rate-limiting algorithms as pure functions of
// (state, now, cost, config) -> (new state, decision). There is no clock, no
// I/O and no global state here: the caller reads the bucket, calls Take with
// the current time, and writes the new bucket back (with CAS in the plugin).
package limiter

import (
	"math"
	"strconv"

	"github.com/sluice-rl/sluice/shared/state"
)

// TokenBucket is a continuous-time token bucket (the Fairvisor token bucket design).
//
// The bucket holds up to Burst tokens and is refilled at Rate tokens per
// second, continuously. It starts full. Each request consumes cost tokens; a
// request is allowed when the bucket holds at least cost tokens. Over any
// window of t seconds at most Burst + Rate*t tokens' worth of requests are
// admitted.
//
// Refill is computed lazily when a request arrives; there is no timer:
//
//	elapsed = max(0, now - last_refill)
//	tokens' = min(tokens + elapsed*Rate, Burst)
//	if tokens' >= cost: allow, tokens = tokens' - cost
//	else:               reject, wait = (cost - tokens') / Rate
//
// Delayed admission (MaxDelay > 0) changes only the last line: a request
// whose wait is at most MaxDelay is admitted as a reservation,
//
//	else if wait <= MaxDelay and cost <= Burst:
//	                    allow, tokens = tokens' - cost (negative), Delay = wait
//
// The tokens are taken now, at decision time, and the request is told to
// wait until the refill has paid its debt: at now + Delay the bucket is
// back at zero (if nothing else arrived). Stored tokens may therefore be
// negative, down to -Rate*MaxDelay. A later request sees the debt and waits
// longer, so reservations are served first come, first served by
// construction, and the time a reservation may proceed never comes earlier
// than the time a non-delayed bucket would have admitted it: at most
// Burst + Rate*t tokens' worth of requests are released over any t seconds
// after a full bucket, and over a burst of simultaneous requests at most
// Burst + Rate*MaxDelay are admitted or scheduled. A reservation that is
// abandoned before its time is undone by giving its cost back (the caller
// writes tokens + cost, capped at Burst), which restores exactly the state
// in which it never happened, except that requests scheduled after it keep
// their later times.
//
// The zero value is not useful: Rate must be > 0 and Burst >= Rate (the
// configuration parser enforces both). Take is defensive anyway: an invalid
// Rate (<= 0, NaN, Inf) refills nothing, an invalid Burst holds nothing, and
// no input makes it return NaN or Inf; see Take for the edge cases.
type TokenBucket struct {
	Rate  float64 // tokens per second, > 0
	Burst float64 // capacity in tokens, > 0

	// MaxDelay (seconds, >= 0) turns on delayed admission (reservations,
	// Guava's RateLimiter and golang.org/x/time/rate's Reserve): a request
	// that finds too few tokens but would have them within MaxDelay takes
	// them anyway, leaving the bucket negative (a debt the refill pays
	// back), and must wait Decision.Delay seconds before it proceeds.
	// 0 turns it off: Take then behaves exactly as without the field.
	MaxDelay float64
}

// Decision is the outcome of one Take.
type Decision struct {
	Allowed bool
	// Remaining is the number of tokens left after this request when
	// allowed, or the number available now when rejected. Never negative.
	Remaining float64
	// Wait is the number of seconds until cost tokens are available:
	// 0 when allowed, finite and > 0 when rejected (capped at
	// math.MaxInt32 seconds).
	Wait float64
	// Delay is > 0 when the request was admitted as a reservation
	// (TokenBucket.MaxDelay): the seconds it must wait before it proceeds,
	// at most MaxDelay. 0 otherwise.
	Delay float64
	// Reset is the number of seconds until the bucket is full again
	// (after this request's consumption when allowed). Finite and >= 0.
	Reset float64
}

// Take refills the bucket s to time now (unix seconds) and tries to consume
// cost tokens. It returns the bucket to store and the decision.
//
// When exists is false the bucket is new and starts full at now (s is
// ignored).
//
// Edge cases, handled here so callers do not have to:
//
//   - Clock going backwards (now < s.LastRefill): elapsed is 0, so no tokens
//     are minted, and LastRefill is NOT moved backwards: the stored time stays
//     the later one. Time therefore never runs backwards for a bucket.
//   - A rejected request consumes nothing: the returned bucket only carries
//     the refill (tokens' and LastRefill = max(now, last)). Storing it or
//     keeping the old one is equivalent (up to float rounding): the same
//     tokens would be minted later anyway. So a caller combining several
//     rules may drop every returned bucket when any rule rejects.
//   - cost > Burst: the request can never be admitted. It is rejected and
//     Wait is the time needed to gather cost tokens from the current level as
//     if the bucket had no cap, (cost - tokens')/Rate: finite and > 0, a
//     meaningful "come back much later" hint rather than +Inf. Callers should
//     not rely on the request ever passing.
//   - cost that is NaN, +Inf or <= 0: the caller is expected to replace it
//     (see ParseCost and the rule's default cost). If it reaches Take anyway,
//     NaN and negative costs are treated as 0 (allowed, consume nothing),
//     and +Inf is rejected with Wait capped at math.MaxInt32 seconds.
//   - Stored tokens or LastRefill that are NaN/Inf (corrupt state) are
//     treated like a missing bucket (full at now); DecodeBucket already
//     rejects such values.
//   - now that is NaN/Inf (a broken clock) is replaced by the stored
//     LastRefill, so nothing is minted; now < 0 is treated as 0 so the
//     stored LastRefill stays >= 0, as state.DecodeBucket requires.
//   - tokens' is clamped to Burst, so a stored value above Burst (e.g. after
//     the burst was lowered by a config update) is cut back to the new cap.
//   - Negative stored tokens (reservations, MaxDelay > 0) refill like any
//     other level. With MaxDelay 0 (e.g. after delays were turned off) a
//     negative bucket simply rejects until it refills to cost. A MaxDelay
//     that is NaN or negative delays nothing; cost > Burst is never
//     reserved (it could not be admitted without a delay either).
func (tb TokenBucket) Take(s state.Bucket, exists bool, now float64, cost float64) (state.Bucket, Decision) {
	var d Decision
	next := tb.TakeInto(&d, s, exists, now, cost)
	return next, d
}

// TakeInto is Take with the decision written to *d (every field of it) and
// the bucket's configuration read through a pointer. The results are
// Take's; what differs is what a call copies: in wasm every struct copy of
// more than 16 bytes, a TokenBucket argument or a Decision result, is a
// memory.copy, which Envoy's fast JIT runs as a call into the runtime. The
// filter's request path uses it.
func (tb *TokenBucket) TakeInto(d *Decision, s state.Bucket, exists bool, now float64, cost float64) state.Bucket {
	// Field by field: clearing *d whole would be a memory.fill.
	d.Allowed, d.Remaining, d.Wait, d.Delay, d.Reset = false, 0, 0, 0, 0
	rate, burst := tb.Rate, tb.Burst
	if !(rate > 0) || math.IsInf(rate, 0) {
		rate = math.SmallestNonzeroFloat64 // defensive: never divide by zero
	}
	if !(burst >= 0) || math.IsInf(burst, 0) {
		burst = 0
	}
	if !(cost > 0) { // NaN, 0, negative
		cost = 0
	}
	if !isFinite(now) { // a broken clock: time stands still
		now = 0
		if exists && isFinite(s.LastRefill) {
			now = s.LastRefill
		}
	}
	if now < 0 {
		now = 0 // before 1970: keep LastRefill encodable (state requires >= 0)
	}

	var tokens, last float64
	if !exists || !isFinite(s.Tokens) || !isFinite(s.LastRefill) {
		tokens, last = burst, now
	} else {
		tokens, last = s.Tokens, s.LastRefill
		if elapsed := now - last; elapsed > 0 {
			tokens += elapsed * rate
			last = now
		}
		// else: backwards (or same) clock: mint nothing, keep last.
	}
	if tokens > burst {
		tokens = burst
	}

	if tokens >= cost-rate*DueSlack {
		tokens -= cost
		d.Allowed = true
	} else {
		d.Wait = max(finite((cost-tokens)/rate), minWait)
		if d.Wait <= tb.MaxDelay && cost <= burst {
			// A reservation: take the tokens now (the bucket goes
			// negative) and wait for the refill to pay them back.
			tokens -= cost
			d.Allowed, d.Delay, d.Wait = true, d.Wait, 0
		}
	}
	if tokens > 0 {
		d.Remaining = tokens
	}
	d.Reset = finite((burst - tokens) / rate)
	return state.Bucket{Tokens: tokens, LastRefill: last}
}

// Level returns the tokens a stored bucket holds at time now: its tokens
// refilled for max(0, now - LastRefill) seconds and capped at Burst, with
// every edge case of Take (a corrupt bucket or a broken clock reads as a
// new, full bucket or as no elapsed time). It is negative for a bucket in
// debt (reservations, MaxDelay), so such a bucket ranks below an empty one.
// The bucket is full, and carries no information a new bucket would not,
// exactly when Level >= Burst.
//
// It is Take(s, true, now, 0)'s tokens (FuzzLevel checks that), computed
// without Take's decision: bounded storage ranks every bucket of a group
// with it when a new identity claims a way, on the request path.
func (tb TokenBucket) Level(s state.Bucket, now float64) float64 {
	burst := tb.Burst
	if !(burst >= 0) || math.IsInf(burst, 0) {
		burst = 0
	}
	if !isFinite(s.Tokens) || !isFinite(s.LastRefill) {
		return burst // corrupt: a new, full bucket
	}
	tokens := s.Tokens
	if isFinite(now) { // a broken clock mints nothing
		if elapsed := max(now, 0) - s.LastRefill; elapsed > 0 {
			rate := tb.Rate
			if !(rate > 0) || math.IsInf(rate, 0) {
				rate = math.SmallestNonzeroFloat64
			}
			tokens += elapsed * rate
		}
	}
	return min(tokens, burst)
}

// Full reports whether the stored bucket has refilled to its burst at now.
// A new bucket starts full, so a full bucket can be forgotten (its storage
// reused) without changing any future decision.
func (tb TokenBucket) Full(s state.Bucket, now float64) bool {
	_, d := tb.Take(s, true, now, 0)
	return d.Reset == 0
}

// DueSlack is how early, in seconds, a request may come for its tokens and
// still be admitted. Times are unix seconds in a float64 (about a quarter
// of a microsecond apart today) and a stored bucket keeps micro-units: a
// request that arrives exactly when its tokens are due can find them a
// rounding short of cost. Without the slack a client sending at
// exactly the rate would now and then be rejected and told to come back in
// a second. An admitted request may leave the bucket up to DueSlack × Rate
// tokens in debt, which the next request must refill first: the debt never
// grows past that, so the slack is gained once, not once per request. (The
// filter reads its clock in whole microseconds, as it stores LastRefill, so
// that no request loses refill time to the rounding.)
const DueSlack = 1e-6

// Seconds is the unix time ns as the limiters take it: seconds truncated
// to the microsecond, the resolution a stored bucket keeps. A clock read
// finer than that would lose up to half a microsecond of refill to the
// rounding of every stored bucket, so that a client sending at exactly the
// rate would drift into rejections (DueSlack covers one rounding, not a
// drift). The filter reads its clock through it, and so must anything that
// wants the filter's decisions to the last bit (the simulator's callers).
func Seconds(ns int64) float64 { return float64(ns/1000) / 1e6 }

// minWait is the smallest Wait of a rejection, so that a rejected request
// always has a positive Wait (and RetryAfter >= 1) even when the shortfall
// divided by a huge rate underflows.
const minWait = 1e-9

// maxSeconds bounds every duration Take and RetryAfter report (~68 years),
// so conversions to int never overflow.
const maxSeconds = math.MaxInt32

func isFinite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

func finite(sec float64) float64 {
	if !(sec > 0) {
		return 0
	}
	if sec > maxSeconds {
		return maxSeconds
	}
	return sec
}

// RetryAfter converts a wait in seconds into a Retry-After value in whole
// seconds: ceil(wait) plus a deterministic per-identity jitter in
// [0, ceil(wait)/2] (integer division), derived from the FNV-1a hash of
// identity. The same identity always gets the same offset, different
// identities are spread over the range, so clients rejected together do not
// retry together (the Fairvisor token bucket design).
//
// The result is never earlier than the true wait: it is >= ceil(wait), and
// >= 1 whenever wait > 0. It is 0 when wait <= 0 or NaN, and capped at
// math.MaxInt32 (about 68 years) for huge or infinite waits.
func RetryAfter(wait float64, identity string) int {
	if !(wait > 0) {
		return 0
	}
	if wait > maxSeconds {
		wait = maxSeconds
	}
	base := int64(math.Ceil(wait))
	if base < 1 {
		base = 1
	}
	span := base / 2 // jitter in [0, span], i.e. at most 50%
	var j int64
	if span > 0 {
		j = int64(state.FNV1a64(identity) % uint64(span+1))
	}
	r := base + j
	if r > maxSeconds {
		r = maxSeconds
	}
	return int(r)
}

// MaxCost is the largest cost ParseCost accepts.
const MaxCost = 1e9

// ParseCost parses a per-request cost taken from a header or query value.
// It accepts a finite decimal number (strconv.ParseFloat syntax, surrounding
// spaces and tabs trimmed) that is > 0 and <= MaxCost. It returns false for
// an empty value, garbage, NaN, Inf, zero, negatives and absurdly large
// numbers; the caller then uses the rule's default cost.
func ParseCost(v string) (float64, bool) {
	v, ok := costText(v)
	if !ok {
		return 0, false
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !(f > 0) || f > MaxCost {
		return 0, false
	}
	return f, true
}

// costText trims spaces and tabs around a cost value and reports whether
// what is left is a plain decimal number's spelling: at most 64 bytes of
// digits, '.', signs and exponents. It refuses spellings strconv accepts
// but a cost should not carry: "inf", "nan", "0x10", "1_000".
func costText(v string) (string, bool) {
	v = trimSpace(v)
	if v == "" || len(v) > 64 {
		return "", false
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if !(c >= '0' && c <= '9' || c == '.' || c == '-' || c == '+' || c == 'e' || c == 'E') {
			return "", false
		}
	}
	return v, true
}

func trimSpace(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}
