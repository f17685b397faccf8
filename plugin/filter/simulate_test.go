package filter_test

import (
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/plugin/wasmhost"
	"github.com/sluice-rl/sluice/shared/limiter"
	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/simulate"
)

// simulatorPolicy has exempt and deny rules (one in shadow mode) matched
// by regex, CIDR, "in" and suffix conditions, tiers keyed on an API key
// (one key with an override), a per-address fallback, a JWT-keyed rule
// with a cost header, a daily calendar quota, a shadow window, a shadow
// window that does not mark ("shadow_mark": false), a shadow window with an
// exact condition on a header earlier policies read already, an enforced
// sliding window, and a shadow exempt rule between the shadow rules (it
// exempts key-1's requests from the shadow rules before and after it, not
// from the enforced ones), so
// the simulator and the filter are compared on every path of a decision:
// no rule, first match, key missing, exempt, deny, shadow deny, override,
// allowed with fields, enforce rejection, shadow rejection with and without
// marking, shadow exemption.
const simulatorPolicy = `{
  "xff_trusted_hops": 1,
  "policies": [
    {"name": "gate", "rules": [
      {"name": "health", "action": "exempt", "match": {"path": {"regex": "^/healthz?$"}}},
      {"name": "office", "action": "exempt", "match": {"ip:address": {"cidr": ["10.0.0.3/32"]}, "method": {"not": "POST"}}},
      {"name": "blocked", "action": "deny", "deny_status": 451, "match": {"header:x-api-key": {"in": ["key-2"]}, "method": "DELETE"}},
      {"name": "bots", "action": "deny", "mode": "shadow", "match": {"header:user-agent": {"suffix": "bot"}}}
    ]},
    {"name": "tiers", "rules": [
      {"name": "premium", "match": {"header:x-plan": {"in": ["premium", "gold"]}}, "limit_keys": ["header:x-api-key"],
       "algorithm": "token_bucket", "algorithm_config": {"tokens_per_second": 2, "burst": 4}},
      {"name": "free", "limit_keys": ["header:x-api-key"],
       "algorithm": "token_bucket", "algorithm_config": {"tokens_per_second": 0.5, "burst": 2},
       "overrides": [{"key": "key-1", "algorithm_config": {"tokens_per_second": 1, "burst": 3}}]},
      {"name": "anonymous", "limit_keys": ["ip:address"],
       "algorithm": "token_bucket", "algorithm_config": {"tokens_per_second": 1, "burst": 3}}
    ]},
    {"name": "reports", "rules": [
      {"name": "report-users", "match": {"path_prefix": "/reports"}, "limit_keys": ["jwt:sub"],
       "algorithm": "token_bucket", "algorithm_config": {"tokens_per_second": 1, "burst": 5, "cost_source": "header:x-cost"}}
    ]},
    {"name": "daily", "rules": [
      {"name": "reports-quota", "match": {"path_prefix": "/reports"}, "limit_keys": ["jwt:sub"],
       "algorithm": "quota", "algorithm_config": {"limit": 8, "period": "day", "time_zone": "Europe/Berlin"},
       "overrides": [{"key": "user-1", "algorithm_config": {"limit": 13}}]}
    ]},
    {"name": "search", "rules": [
      {"name": "search-shadow", "mode": "shadow", "match": {"path_prefix": "/search"}, "limit_keys": ["ip:address"],
       "algorithm": "fixed_window", "algorithm_config": {"limit": 1, "window_seconds": 30}},
      {"name": "export", "match": {"method": "POST"}, "limit_keys": ["query:account"],
       "algorithm": "sliding_window", "algorithm_config": {"limit": 3, "window_seconds": 20}}
    ]},
    {"name": "trial-gate", "rules": [
      {"name": "key-1-trial-exempt", "mode": "shadow", "action": "exempt", "match": {"header:x-api-key": "key-1"}}
    ]},
    {"name": "key-watch", "rules": [
      {"name": "key-0-watch", "mode": "shadow", "match": {"header:x-api-key": "key-0"}, "limit_keys": ["header:x-api-key"],
       "algorithm": "fixed_window", "algorithm_config": {"limit": 1, "window_seconds": 30}}
    ]},
    {"name": "search-next", "rules": [
      {"name": "search-quiet", "mode": "shadow", "shadow_mark": false, "match": {"path_prefix": "/search"}, "limit_keys": ["ip:address"],
       "algorithm": "fixed_window", "algorithm_config": {"limit": 1, "window_seconds": 60}}
    ]}
  ]
}`

func unsignedJWT(claims string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return "Bearer " + enc([]byte(`{"alg":"none"}`)) + "." + enc([]byte(claims)) + ".sig"
}

// randomRequest draws one request from a small population, so identities
// repeat and buckets run dry.
func randomRequest(rng *rand.Rand) simulate.Request {
	r := simulate.Request{Method: "GET", Path: "/", Host: "api.example.com", Headers: map[string]string{}, ClientAddress: "10.0.0.1:5555"}
	r.ClientAddress = fmt.Sprintf("10.0.0.%d:%d", 1+rng.IntN(3), 1000+rng.IntN(9))
	if rng.IntN(2) == 0 {
		r.Headers["x-forwarded-for"] = fmt.Sprintf("192.0.2.%d", 1+rng.IntN(3))
	}
	switch rng.IntN(4) {
	case 0:
		r.Headers["x-api-key"] = fmt.Sprintf("key-%d", rng.IntN(3))
		r.Headers["x-plan"] = "premium"
	case 1:
		r.Headers["x-api-key"] = fmt.Sprintf("key-%d", rng.IntN(3))
	}
	if rng.IntN(6) == 0 {
		r.Headers["user-agent"] = "crawlbot"
	}
	if rng.IntN(8) == 0 { // forged: the filter replaces or removes it
		r.Headers["x-sluice-shadow"] = "forged"
	}
	switch rng.IntN(7) {
	case 5:
		r.Path = "/healthz"
	case 6:
		r.Method = "DELETE"
		r.Path = "/items/1"
	case 0:
		r.Path = "/reports/daily"
		r.Headers["authorization"] = unsignedJWT(fmt.Sprintf(`{"sub":"user-%d"}`, rng.IntN(2)))
		if rng.IntN(2) == 0 {
			r.Headers["x-cost"] = fmt.Sprint(1 + rng.IntN(3))
		}
	case 1:
		r.Path = "/search?q=x"
	case 2:
		r.Method = "POST"
		r.Path = fmt.Sprintf("/export?account=acct-%d", rng.IntN(2))
	}
	return r
}

func toWasmRequest(r simulate.Request) *wasmhost.Request {
	w := &wasmhost.Request{Properties: wasmhost.Properties(r.Properties())}
	w.Headers = append(w.Headers, wasmhost.Header{":method", r.Method}, wasmhost.Header{":path", r.Path}, wasmhost.Header{":authority", r.Host})
	names := make([]string, 0, len(r.Headers))
	for n := range r.Headers {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		w.Headers = append(w.Headers, wasmhost.Header{n, r.Headers[n]})
	}
	return w
}

// rateLimitFields are the response fields the filter sets on an allowed
// response.
var rateLimitFields = []string{"ratelimit", "ratelimit-policy", "ratelimit-limit", "ratelimit-remaining", "ratelimit-reset"}

func pick(hs []wasmhost.Header, names []string) [][2]string {
	var out [][2]string
	for _, n := range names {
		if v, ok := header(hs, n); ok {
			out = append(out, [2]string{n, v})
		}
	}
	return out
}

func sortedFields(fs [][2]string) [][2]string {
	out := slices.Clone(fs)
	slices.SortFunc(out, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
	return out
}

// TestSimulatorDecidesLikeTheCompiledFilter sends the same sequence of
// requests through the compiled filter and through the simulator, the
// simulator carrying its own state from request to request, and requires
// the same status, rule, response fields, body and shadow marking each time.
func TestSimulatorDecidesLikeTheCompiledFilter(t *testing.T) {
	f := start(t, simulatorPolicy, 1)
	cfg, err := policy.Parse([]byte(simulatorPolicy))
	if err != nil {
		t.Fatal(err)
	}
	type key struct{ rule, identity string }
	states := map[key]simulate.State{}
	lookup := func(r *policy.Rule, id string) (simulate.State, bool) {
		s, ok := states[key{r.Name, id}]
		return s, ok
	}
	rng := rand.New(rand.NewPCG(1, 2))
	rejected, shadowed, allowed, denied, quota, quietRefused, keyWatched := 0, 0, 0, 0, 0, 0, 0
	quotaOverridden := 0 // requests user-1's own quota decided
	// Requests the shadow exempt rule applied to: rejected by an enforced
	// rule, and with a marking shadow rule exempted.
	trialExemptRejected, trialExemptedShadow := 0, 0
	for i := 0; i < 400; i++ {
		f.clock.Advance(time.Duration(rng.IntN(700)) * time.Millisecond)
		req := randomRequest(rng)
		now := limiter.Seconds(f.clock.Now().UnixNano())
		sim := simulate.Run(cfg, req, simulate.Options{Now: now, Lookup: lookup})
		got := f.doOn(0, toWasmRequest(req))
		where := fmt.Sprintf("request %d (%s %s %v)", i, req.Method, req.Path, req.Headers)

		sameAnswer(t, where, got, sim, "x-sluice-shadow", sim.Upstream)
		if got.Rejected {
			rejected++
			if got.Local.Status == 451 {
				denied++
			}
			if sim.Rule == "reports-quota" {
				quota++
			}
		} else {
			allowed++
			if len(pick(got.UpstreamHeaders, []string{"x-sluice-shadow"})) > 0 {
				shadowed++
			}
		}
		if quiet := sim.RuleNamed("search-quiet"); quiet != nil && quiet.Applies && !quiet.Decision.Allowed {
			quietRefused++
		}
		if watch := sim.RuleNamed("key-0-watch"); watch != nil && watch.Applies {
			keyWatched++
		}
		if ex := sim.RuleNamed("key-1-trial-exempt"); ex != nil && ex.Applies {
			if got.Rejected {
				trialExemptRejected++
			}
			for _, name := range []string{"bots", "search-shadow", "search-quiet"} {
				if rr := sim.RuleNamed(name); rr != nil && strings.HasPrefix(rr.Why, "exempted:") {
					trialExemptedShadow++
					break
				}
			}
		}
		for _, s := range sim.Stores() {
			states[key{s.Rule, s.Identity}] = s.State
		}
		for _, pr := range sim.Policies {
			for _, rr := range pr.Rules {
				if rr.Name == "reports-quota" && rr.Applies && rr.Overridden {
					quotaOverridden++
				}
			}
		}
	}
	if rejected < 20 || allowed < 20 || shadowed < 5 || denied < 3 || quota < 3 || quotaOverridden < 10 || quietRefused < 5 || keyWatched < 20 ||
		trialExemptRejected < 3 || trialExemptedShadow < 5 {
		t.Fatalf("the sequence exercised too little: %d rejected (%d denied, %d by the quota), %d allowed, %d shadow-marked, %d decided by a quota override, %d refused by the unmarked shadow rule, %d applying the exact key condition, %d rejected and %d exempted from a shadow rule under the shadow exempt rule",
			rejected, denied, quota, allowed, shadowed, quotaOverridden, quietRefused, keyWatched, trialExemptRejected, trialExemptedShadow)
	}
}

// sortedByNames orders fields as names lists them (the order pick reads
// the filter's response in).
func sortedByNames(fs [][2]string, names []string) [][2]string {
	var out [][2]string
	for _, n := range names {
		for _, f := range fs {
			if f[0] == n {
				out = append(out, f)
			}
		}
	}
	return out
}

// sameAnswer fails the test unless the filter answered as the simulator
// says: a rejection with its status, body and header fields, or an
// allowed response with its RateLimit fields and, on the request sent
// upstream, the shadow header wantUp.
func sameAnswer(t *testing.T, where string, got *wasmhost.Result, sim simulate.Result, shadowHeader string, wantUp [][2]string) {
	t.Helper()
	if got.Rejected != (sim.Status != 0) {
		t.Fatalf("%s: filter rejected=%v, simulator status %d (rule %q)", where, got.Rejected, sim.Status, sim.Rule)
	}
	if got.Rejected {
		if got.Local.Status != sim.Status || string(got.Local.Body) != sim.Body || got.Local.Details != sim.Details {
			t.Fatalf("%s: filter %d %s (%s), simulator %d %s (%s)", where, got.Local.Status, got.Local.Body,
				got.Local.Details, sim.Status, sim.Body, sim.Details)
		}
		grpc := int(got.Local.GRPCStatus) // none: Envoy maps the HTTP status
		if got.Local.GRPCStatus < 0 {
			grpc = policy.GRPCStatusOfHTTP(got.Local.Status)
		}
		if grpc != sim.GRPCStatus {
			t.Fatalf("%s: a gRPC call's status: filter %d, simulator %d", where, grpc, sim.GRPCStatus)
		}
		var local [][2]string
		for _, h := range got.Local.Headers {
			local = append(local, [2]string{h[0], h[1]})
		}
		if !slices.Equal(local, sim.Headers) {
			t.Fatalf("%s: rejection headers\nfilter    %v\nsimulator %v", where, local, sim.Headers)
		}
		return
	}
	if fields := pick(got.ResponseHeaders, rateLimitFields); !slices.Equal(fields, sortedByNames(sim.Headers, rateLimitFields)) {
		t.Fatalf("%s: response fields\nfilter    %v\nsimulator %v", where, fields, sim.Headers)
	}
	if up := pick(got.UpstreamHeaders, []string{shadowHeader}); !slices.Equal(sortedFields(up), sortedFields(wantUp)) {
		t.Fatalf("%s: upstream %s: filter %v, want %v", where, shadowHeader, up, wantUp)
	}
}
