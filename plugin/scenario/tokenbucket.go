package scenario

// Token bucket scenarios: a burst admitted then refused; every RateLimit
// field of an allowed response (draft-10 RateLimit and RateLimit-Policy, the
// legacy RateLimit-Limit/-Remaining/-Reset) for the most restrictive rule;
// every field and the JSON body of a 429; Retry-After never earlier than the
// true wait, with a per-client deterministic jitter of at most 50%.

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/shared/limiter"
)

func init() {
	register(
		Case{Name: "TokenBucketAdmitsBurstThenRejects", Run: tokenBucketAdmitsBurstThenRejects},
		Case{Name: "TokenBucketAllowedResponseFields", Run: tokenBucketAllowedResponseFields},
		Case{Name: "TokenBucketRejectionFields", Run: tokenBucketRejectionFields},
		Case{Name: "XRateLimitFieldsForClientsOfOtherLimiters", Run: xRateLimitFields},
		Case{Name: "TokenBucketRetryAfterNeverEarlyWithPerClientJitter", Run: tokenBucketRetryAfterNeverEarly},
		Case{Name: "TokenBucketAdmitsAClientSendingAtExactlyTheRate", Run: tokenBucketExactRate},
	)
}

// tokenBucketExactRate: a client that sends each request exactly when its
// token is due is never rejected, whatever the clock's nanoseconds (a
// bucket of burst 1 once refused every other request of a client at 1 per
// second, its refill lost to the rounding of the stored time), and a
// request a millisecond early is.
func tokenBucketExactRate(t *testing.T, start Starter) {
	for _, c := range []struct {
		rate  string
		burst int
		every time.Duration
		t0    time.Time
	}{
		{"1", 1, time.Second, time.Date(2026, 3, 2, 12, 0, 0, 123456789, time.UTC)},
		{"0.3", 1, time.Second * 10 / 3, time.Date(2026, 3, 2, 12, 0, 0, 987654321, time.UTC)},
		{"1000", 1000, time.Millisecond, time.Date(2026, 3, 2, 12, 0, 11, 987654321, time.UTC)},
	} {
		h := mustStart(t, start, Options{Start: c.t0, Config: []byte(fmt.Sprintf(`{"rules": [{"name": "r", "limit_keys": ["header:x-api-key"],
			"algorithm": "token_bucket", "algorithm_config": {"tokens_per_second": %s, "burst": %d}}]}`, c.rate, c.burst))})
		r := req("x-api-key", "k")
		if got := admitted(t, h, c.burst-1, r); got != c.burst-1 { // the burst but one: the loop takes the last
			t.Fatalf("rate %s: %d of the burst admitted", c.rate, got)
		}
		for i := range 300 {
			if i > 0 {
				h.Advance(c.every)
			}
			if res := do(t, h, r); res.Rejected {
				t.Fatalf("rate %s: request %d, sent when its token was due, was rejected (Retry-After %s)",
					c.rate, i+1, header(res.ResponseHeaders, "retry-after"))
			}
		}
		h.Advance(c.every - time.Millisecond)
		if res := do(t, h, r); !res.Rejected {
			t.Errorf("rate %s: a request a millisecond early was admitted", c.rate)
		}
	}
}

// tokenBucketAdmitsBurstThenRejects: burst 3 at 1 token/s admits three
// requests at one instant, rejects the fourth with 429 and the RateLimit
// fields, and admits again once a token has refilled.
func tokenBucketAdmitsBurstThenRejects(t *testing.T, start Starter) {
	h := startConfig(t, start, `{"rules": [{"name": "r", "limit_keys": ["header:x-api-key"],
		"algorithm": "token_bucket", "algorithm_config": {"tokens_per_second": 1, "burst": 3}}]}`)
	r := req("x-api-key", "k1")
	for i := 0; i < 3; i++ {
		if res := do(t, h, r); res.Rejected || res.Status != 200 {
			t.Fatalf("request %d: rejected %v status %d, want allowed 200", i+1, res.Rejected, res.Status)
		}
	}
	res := do(t, h, r)
	if !res.Rejected || res.Status != 429 {
		t.Fatalf("4th request: rejected %v status %d, want 429", res.Rejected, res.Status)
	}
	for _, name := range []string{"retry-after", "ratelimit", "ratelimit-policy"} {
		if header(res.ResponseHeaders, name) == "" {
			t.Errorf("429 lacks %s: %v", name, res.ResponseHeaders)
		}
	}
	h.Advance(1e9)
	if res := do(t, h, r); res.Rejected {
		t.Fatalf("after a second's refill: rejected, want allowed")
	}
}

// tokenBucketAllowedResponseFields: an allowed response carries the fields
// of the enforce rule with the fewest tokens left, each exactly once: Limit
// and q the burst, w the seconds to refill from empty, Remaining and r the
// whole tokens left, Reset and t the seconds until full (rounded up); no
// Retry-After, no reason. An upstream's own field of the same name is
// replaced, not duplicated.
func tokenBucketAllowedResponseFields(t *testing.T, start Starter) {
	h := startConfig(t, start, `{"legacy_headers": true, "policies": [
	  {"name": "p1", "rules": [{"name": "api", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
	    "algorithm_config": {"rps": 10, "burst": 20}}]},
	  {"name": "p2", "rules": [{"name": "ip", "limit_keys": ["ip:address"], "algorithm": "token_bucket",
	    "algorithm_config": {"rps": 1, "burst": 30}}]}]}`)
	allowed := func(what string, r Request, kv ...string) {
		t.Helper()
		res := do(t, h, r)
		if res.Rejected || res.Status != 200 {
			t.Fatalf("%s: rejected %v status %d", what, res.Rejected, res.Status)
		}
		wantHeaders(t, what, res.ResponseHeaders, append(kv, "retry-after", "-", "x-ratelimit-reason", "-")...)
	}
	// api has 19 left (ip 29): full again in 0.1 s, rounded up to 1.
	allowed("first request", req("x-api-key", "k"),
		"ratelimit-limit", "20", "ratelimit-remaining", "19", "ratelimit-reset", "1",
		"ratelimit", `"api";r=19;t=1`, "ratelimit-policy", `"api";q=20;w=2`)
	for i := 0; i < 13; i++ {
		do(t, h, req("x-api-key", "k"))
	}
	// 15th: 5 left, 15 missing at 10/s is 1.5 s, rounded up to 2.
	allowed("15th request", req("x-api-key", "k"),
		"ratelimit-limit", "20", "ratelimit-remaining", "5", "ratelimit-reset", "2",
		"ratelimit", `"api";r=5;t=2`, "ratelimit-policy", `"api";q=20;w=2`)
	// Another key: now ip (30-16 = 14 left) is more restrictive than api (19).
	allowed("other key", req("x-api-key", "other"),
		"ratelimit-limit", "30", "ratelimit-remaining", "14", "ratelimit-reset", "16",
		"ratelimit", `"ip";r=14;t=16`, "ratelimit-policy", `"ip";q=30;w=30`)
	// The upstream sent its own ratelimit-limit: the filter's replaces it.
	r := req("x-api-key", "k3", "@ip", "10.5.5.5:1")
	r.ResponseHeaders = []Header{{":status", "200"}, {"ratelimit-limit", "999"}}
	allowed("upstream field", r, "ratelimit-limit", "20", "ratelimit-remaining", "19")
}

// tokenBucketRejectionFields: the 429 of a drained bucket (0.1 token/s,
// burst 2: the true wait is 10 s) carries Retry-After (10 plus the client's
// jitter), the legacy and draft-10 fields, the reason and a JSON body; it
// never reaches upstream and consumes nothing.
func tokenBucketRejectionFields(t *testing.T, start Starter) {
	h := startConfig(t, start, `{"legacy_headers": true, "reject_status": 503, "rules": [{"name": "slow", "limit_keys": ["header:x-api-key"],
	  "algorithm": "token_bucket", "algorithm_config": {"rps": 0.1, "burst": 2}}]}`)
	r := req("x-api-key", "client-7")
	if got := admitted(t, h, 2, r); got != 2 {
		t.Fatalf("%d of 2 admitted", got)
	}
	res := do(t, h, r)
	if !res.Rejected || res.Status != 503 {
		t.Fatalf("rejected %v status %d, want the configured 503", res.Rejected, res.Status)
	}
	if res.UpstreamHeaders != nil {
		t.Errorf("a rejected request reached upstream: %v", res.UpstreamHeaders)
	}
	retry := limiter.RetryAfter(10, "client-7") // the documented jitter, seeded by the identity
	wantHeaders(t, "429", res.ResponseHeaders,
		"retry-after", fmt.Sprint(retry),
		"ratelimit-limit", "2", "ratelimit-remaining", "0", "ratelimit-reset", "10",
		"ratelimit", `"slow";r=0;t=10`, "ratelimit-policy", `"slow";q=2;w=20`,
		"x-ratelimit-reason", "token_bucket_exceeded", "content-type", "application/json")
	if ra := atoi(t, "retry-after", header(res.ResponseHeaders, "retry-after")); ra < 10 || ra > 15 {
		t.Errorf("retry-after %d outside [10, 15] (wait 10 s plus at most 50%%)", ra)
	}
	var body struct {
		Error      string `json:"error"`
		Rule       string `json:"rule"`
		RetryAfter int    `json:"retry_after"`
	}
	if err := json.Unmarshal(res.LocalBody, &body); err != nil {
		t.Fatalf("body %q: %v", res.LocalBody, err)
	}
	if body.Error != "rate_limited" || body.Rule != "slow" || body.RetryAfter != retry {
		t.Errorf("body %+v, want rate_limited, slow, %d", body, retry)
	}
	wantMetrics(t, h, map[string]uint64{"sluice.rule.slow.allowed": 2, "sluice.rule.slow.rejected": 1})
	// The rejection took nothing: 10 s later exactly one token is there.
	h.Advance(10 * time.Second)
	if got := admitted(t, h, 2, r); got != 1 {
		t.Errorf("10 s after the 429: %d admitted, want 1", got)
	}
}

// xRateLimitFields: with "legacy_headers": "x-ratelimit" the older fields
// are named X-RateLimit-Limit, -Remaining and -Reset, as Envoy's
// local_ratelimit, envoyproxy/ratelimit and Higress name them, and carry
// the numbers RateLimit-Limit, -Remaining and -Reset would: on allowed
// responses (an upstream's own field replaced) and on rejections; the
// unprefixed names are not sent.
func xRateLimitFields(t *testing.T, start Starter) {
	h := startConfig(t, start, `{"legacy_headers": "x-ratelimit", "rules": [{"name": "slow", "limit_keys": ["header:x-api-key"],
	  "algorithm": "token_bucket", "algorithm_config": {"rps": 0.1, "burst": 2}}]}`)
	unprefixed := []string{"ratelimit-limit", "-", "ratelimit-remaining", "-", "ratelimit-reset", "-"}
	r := req("x-api-key", "client-7")
	r.ResponseHeaders = []Header{{":status", "200"}, {"x-ratelimit-remaining", "999"}}
	res := do(t, h, r)
	if res.Rejected {
		t.Fatal("first request rejected")
	}
	// 1 token left of 2; 10 s until full.
	wantHeaders(t, "allowed", res.ResponseHeaders, append(unprefixed,
		"x-ratelimit-limit", "2", "x-ratelimit-remaining", "1", "x-ratelimit-reset", "10",
		"ratelimit", `"slow";r=1;t=10`)...)
	if n := headerCount(res.ResponseHeaders, "x-ratelimit-remaining"); n != 1 {
		t.Errorf("x-ratelimit-remaining sent %d times, want the upstream's replaced", n)
	}
	do(t, h, req("x-api-key", "client-7"))
	res = do(t, h, req("x-api-key", "client-7"))
	if !res.Rejected {
		t.Fatal("third request admitted")
	}
	wantHeaders(t, "rejected", res.ResponseHeaders, append(unprefixed,
		"x-ratelimit-limit", "2", "x-ratelimit-remaining", "0", "x-ratelimit-reset", "10",
		"ratelimit", `"slow";r=0;t=10`, "x-ratelimit-reason", "token_bucket_exceeded")...)
}

// tokenBucketRetryAfterNeverEarly: for buckets whose true wait is whole
// (10 s) and fractional (3.33 s), many clients are drained and rejected:
// Retry-After is at least RateLimit-Reset, Reset at least the true wait,
// and Retry-After at most 50% above the rounded wait; a client gets the
// same Retry-After every time for the same wait, clients get different ones
// (the jitter spreads them), a retry just before the true wait is refused
// and one at Reset seconds is admitted.
func tokenBucketRetryAfterNeverEarly(t *testing.T, start Starter) {
	// One rule per case, chosen by x-rule (the first matching rule applies).
	h := startConfig(t, start, `{"legacy_headers": true, "rules": [
	  {"name": "r0", "match": {"header:x-rule": "0"}, "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
	   "algorithm_config": {"rps": 0.1, "burst": 2}},
	  {"name": "r1", "match": {"header:x-rule": "1"}, "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
	   "algorithm_config": {"rps": 0.3, "burst": 1}},
	  {"name": "r2", "match": {"header:x-rule": "2"}, "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
	   "algorithm_config": {"rps": 0.01, "burst": 5}}]}`)
	for i, c := range []struct {
		burst int
		wait  time.Duration // the true wait after draining
		reset int           // the wait rounded up
	}{
		{2, 10 * time.Second, 10},
		{1, 3333333334 * time.Nanosecond, 4},
		{5, 100 * time.Second, 100},
	} {
		rule := fmt.Sprint(i)
		client := func(n int) Request { return req("x-rule", rule, "x-api-key", fmt.Sprintf("client-%02d", n)) }
		const clients = 20
		retry := map[int]int{}
		distinct := map[int]bool{}
		for n := 0; n < clients; n++ {
			if got := admitted(t, h, c.burst, client(n)); got != c.burst {
				t.Fatalf("r%s: client %d: %d of the burst admitted", rule, n, got)
			}
			for k := 0; k < 2; k++ {
				res := do(t, h, client(n))
				if !res.Rejected || res.Status != 429 {
					t.Fatalf("r%s: client %d: drained bucket not rejected", rule, n)
				}
				ra := atoi(t, "retry-after", header(res.ResponseHeaders, "retry-after"))
				reset := atoi(t, "ratelimit-reset", header(res.ResponseHeaders, "ratelimit-reset"))
				switch {
				case reset != c.reset:
					t.Errorf("r%s: client %d: ratelimit-reset %d, want %d (the true wait %v rounded up)", rule, n, reset, c.reset, c.wait)
				case ra < reset:
					t.Errorf("r%s: client %d: retry-after %d earlier than ratelimit-reset %d", rule, n, ra, reset)
				case ra > c.reset+c.reset/2:
					t.Errorf("r%s: client %d: retry-after %d beyond the wait %d plus 50%%", rule, n, ra, c.reset)
				case k == 1 && ra != retry[n]:
					t.Errorf("r%s: client %d: retry-after %d then %d for the same wait: the jitter is not per client", rule, n, retry[n], ra)
				}
				retry[n] = ra
			}
			distinct[retry[n]] = true
		}
		if c.reset >= 4 && len(distinct) < 2 {
			t.Errorf("r%s: every client was told %v: no jitter", rule, distinct)
		}
		// Just before the true wait: still refused (and that takes nothing).
		h.Advance(c.wait - 50*time.Millisecond)
		for n := 0; n < clients; n++ {
			if res := do(t, h, client(n)); !res.Rejected {
				t.Fatalf("r%s: client %d admitted 50 ms before its true wait", rule, n)
			}
		}
		// At Reset seconds (never later than Retry-After): admitted once.
		h.Advance(time.Duration(c.reset)*time.Second - c.wait + 50*time.Millisecond)
		for n := 0; n < clients; n++ {
			if got := admitted(t, h, 2, client(n)); got != 1 {
				t.Errorf("r%s: client %d: %d admitted ratelimit-reset seconds after its 429, want 1", rule, n, got)
			}
		}
	}
}
