package request

import (
	"math"
	"strconv"

	"github.com/sluice-rl/sluice/shared/limiter"
	"github.com/sluice-rl/sluice/shared/policy"
)

// Fields are a rule's response header values that do not depend on the
// request (docs/filter.md "Response headers"): the filter computes them
// once per configuration, the simulator per simulated request.
type Fields struct {
	Limit      string // RateLimit-Limit: the burst, or a window's limit (whole tokens)
	Policy     string // RateLimit-Policy: "<rule>";q=<limit>;w=<seconds> (concurrency: ;qu="concurrent-requests", no w)
	Reason     string // X-RateLimit-Reason: "<algorithm>_exceeded"
	RatePrefix string // the start of the RateLimit field: "<rule>";r=
	// ExactRetry: Retry-After is the wait itself, without jitter (a
	// quota's reset: a jitter of up to half a month would say nothing).
	ExactRetry bool
	// NoReset: the RateLimit field has no t (a concurrency rule's places
	// free when requests end, not at a time); RateLimit-Reset is 0 on an
	// allowed response.
	NoReset bool
}

// RuleFields returns the response header values of a parsed rule.
func RuleFields(r *policy.Rule) Fields {
	f := Fields{Reason: r.Algorithm + "_exceeded", RatePrefix: `"` + r.Name + `";r=`}
	if q := r.Quota; q != nil {
		// q is the limit, w the period's nominal length.
		f.Reason, f.ExactRetry = "quota_exceeded", true
		f.Limit = strconv.FormatInt(WholeTokens(q.Limit), 10)
		period := int64(quotaOf(q).PeriodSeconds())
		f.Policy = `"` + r.Name + `";q=` + f.Limit + ";w=" + strconv.FormatInt(period, 10)
		return f
	}
	if r.Window != nil {
		f.Limit = strconv.FormatInt(WholeTokens(r.Window.Limit), 10)
		f.Policy = `"` + r.Name + `";q=` + f.Limit + ";w=" + strconv.FormatInt(int64(r.Window.WindowSeconds), 10)
		if r.Algorithm == policy.AlgorithmConcurrency {
			// A limit of places, not of requests over time: no window, no
			// reset (NoReset), and a refusal comes back in a second.
			f.ExactRetry, f.NoReset = true, true
			f.Policy = `"` + r.Name + `";q=` + f.Limit + `;qu="concurrent-requests"`
		}
		return f
	}
	tb := r.TokenBucket
	if tb == nil { // Parse guarantees it for token_bucket
		tb = &policy.TokenBucket{TokensPerSecond: 1, Burst: 1}
	}
	f.Reason = policy.AlgorithmTokenBucket + "_exceeded"
	f.Limit = strconv.FormatInt(WholeTokens(tb.Burst), 10)
	window := int64(1)
	if tb.TokensPerSecond > 0 {
		window = CeilSeconds(tb.Burst / tb.TokensPerSecond)
	}
	f.Policy = `"` + r.Name + `";q=` + f.Limit + ";w=" + strconv.FormatInt(window, 10)
	return f
}

// RejectTimes returns, for a request rejected with decision wait (seconds
// until its cost is available), the RateLimit field's t (whole seconds,
// at least 1) and Retry-After (t plus the identity's jitter, never less
// than t).
func RejectTimes(wait float64, identity string) (retryAfter, t int64) {
	t = CeilSeconds(wait)
	if t < 1 {
		t = 1 // rejected: some wait is needed even if it rounds to 0
	}
	retryAfter = int64(limiter.RetryAfter(wait, identity))
	if retryAfter < t {
		retryAfter = t // never earlier than t (RetryAfter already guarantees it)
	}
	return retryAfter, t
}

// WholeTokens floors a token count for a header (never negative, bounded).
func WholeTokens(v float64) int64 {
	if !(v > 0) {
		return 0
	}
	if v > 1e15 {
		return 1e15
	}
	return int64(v)
}

// CeilSeconds rounds a duration in seconds up to whole seconds (never
// negative, bounded like limiter's durations).
func CeilSeconds(v float64) int64 {
	if !(v > 0) {
		return 0
	}
	if v > math.MaxInt32 {
		return math.MaxInt32
	}
	return int64(math.Ceil(v))
}

// RuleLimiter returns a parsed rule's algorithm: a token bucket (win nil)
// or a window.
func RuleLimiter(r *policy.Rule) (tb limiter.TokenBucket, win limiter.Window) {
	if r.Quota != nil {
		return tb, quotaOf(r.Quota)
	}
	if w := r.Window; w != nil {
		period := float64(w.WindowSeconds)
		switch r.Algorithm {
		case policy.AlgorithmFixedWindow:
			return tb, limiter.FixedWindow{Limit: w.Limit, Window: period}
		case policy.AlgorithmSlidingWindow:
			return tb, limiter.SlidingWindow{Limit: w.Limit, Window: period}
		case policy.AlgorithmConcurrency:
			return tb, limiter.Concurrency{Limit: w.Limit, Lease: period}
		}
		return tb, limiter.RollingWindow{Limit: w.Limit, Period: float64(w.PeriodSeconds), Periods: w.Periods(), MaxPerPeriod: w.MaxPerPeriod}
	}
	b := r.TokenBucket
	if b == nil { // Parse guarantees it for token_bucket
		b = &policy.TokenBucket{TokensPerSecond: 1, Burst: 1}
	}
	return limiter.TokenBucket{Rate: b.TokensPerSecond, Burst: b.Burst, MaxDelay: float64(b.MaxDelayMS) / 1000}, nil
}

// RuleCost returns where a rule's request cost comes from, its fixed cost
// and its default cost (used when the header or query value is absent or
// not a valid cost), both positive and finite (1 otherwise).
func RuleCost(r *policy.Rule) (src policy.CostSource, fixed, def float64) {
	src, fixed, def = r.CostConfig()
	return src, positiveOr(fixed, 1), positiveOr(def, 1)
}

func positiveOr(v, def float64) float64 {
	if v > 0 && !math.IsInf(v, 0) {
		return v
	}
	return def
}

// quotaPeriods maps the configuration's period names to the limiter's.
var quotaPeriods = map[string]limiter.Period{
	policy.PeriodHour: limiter.PeriodHour, policy.PeriodDay: limiter.PeriodDay,
	policy.PeriodWeek: limiter.PeriodWeek, policy.PeriodMonth: limiter.PeriodMonth, policy.PeriodYear: limiter.PeriodYear,
}

// QuotaPeriod is the limiter's period of a quota's "period" (one the
// parser accepted).
func QuotaPeriod(name string) limiter.Period { return quotaPeriods[name] }

// quotaOf is a quota rule's calendar quota, with a bounds cache of its own
// (limiter.NewQuota): one per compiled rule, used by one caller at a time.
func quotaOf(q *policy.Quota) limiter.Quota {
	return limiter.NewQuota(q.Limit, QuotaPeriod(q.Period), q.Location)
}

// ReplyDetails is the response code details of rule r's local reply,
// which Envoy writes where access logs read %RESPONSE_CODE_DETAILS%:
// sluice_rate_limited{<rule>} when a limit refuses the request,
// sluice_denied{<rule>} for a deny rule. It follows the form of Envoy's
// own details (local_rate_limited, upstream_reset_before_response_started{...}):
// a log line tells Sluice's rejections from an upstream's 429 and names
// the rule. Rule names have no white space, which Envoy would replace.
func ReplyDetails(r *policy.Rule) string {
	if r.Action == policy.ActionDeny {
		return "sluice_denied{" + r.Name + "}"
	}
	return "sluice_rate_limited{" + r.Name + "}"
}

// BackendDownDetails is the response code details of a global rule's
// refusal decided while the rate limit service does not answer, by its
// on_backend_down ("deny", or the local share spent): Envoy's own
// ratelimit filter tells a refusal for want of its service apart the same
// way (rate_limiter_error).
func BackendDownDetails(r *policy.Rule) string {
	return "sluice_backend_down{" + r.Name + "}"
}
