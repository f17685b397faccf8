package scenario

// Request cost: from a header (cost_source "header:<name>"), from a query
// parameter ("query:<name>", percent-decoded, first occurrence), unusable
// values falling back to default_cost, a fixed_cost, fractional costs, and a
// cost above the burst refused without consuming anything. Tokens are read
// from the RateLimit-Remaining field (whole tokens, rounded down); the clock
// does not move, so nothing refills.

import (
	"testing"
)

func init() {
	register(Case{Name: "CostFromHeaderQueryAndDefault", Run: costFromHeaderQueryAndDefault})
}

func costFromHeaderQueryAndDefault(t *testing.T, start Starter) {
	h := startConfig(t, start, `{"legacy_headers": true, "rules": [
	  {"name": "weighted", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
	   "algorithm_config": {"tokens_per_second": 10, "burst": 20, "cost_source": "header:x-request-weight", "default_cost": 2}},
	  {"name": "q", "limit_keys": ["header:x-tenant"], "algorithm": "token_bucket",
	   "algorithm_config": {"tokens_per_second": 1, "burst": 10, "cost_source": "query:cost"}},
	  {"name": "fixed", "limit_keys": ["header:x-other"], "algorithm": "token_bucket",
	   "algorithm_config": {"tokens_per_second": 1, "burst": 10, "fixed_cost": 4}}]}`)
	left := func(what string, res Response, rule, q, remaining string) {
		t.Helper()
		if res.Rejected {
			t.Fatalf("%s: rejected, want allowed", what)
		}
		wantHeaders(t, what, res.ResponseHeaders, "ratelimit-remaining", remaining,
			"ratelimit-policy", `"`+rule+`";q=`+q+`;w=`+map[string]string{"weighted": "2", "q": "10", "fixed": "10"}[rule])
	}
	refused := func(what string, res Response) {
		t.Helper()
		if !res.Rejected || res.Status != 429 {
			t.Fatalf("%s: rejected %v status %d, want 429", what, res.Rejected, res.Status)
		}
	}

	// Header cost; absent or unusable values cost default_cost (2).
	for _, s := range []struct{ weight, remaining string }{
		{"5", "15"}, {"", "13"}, {"abc", "11"}, {"-3", "9"}, {"NaN", "7"}, {"inf", "5"},
		{"1e12", "3"}, {"0", "1"}, {" 0.5 ", "0"}, // 0.5 left
	} {
		kv := []string{"x-api-key", "k"}
		if s.weight != "" {
			kv = append(kv, "x-request-weight", s.weight)
		}
		left("weight "+s.weight, do(t, h, req(kv...)), "weighted", "20", s.remaining)
	}
	res := do(t, h, req("x-api-key", "k", "x-request-weight", "1"))
	refused("cost 1 with 0.5 tokens", res)
	wantHeaders(t, "cost 1 with 0.5 tokens", res.ResponseHeaders, "ratelimit-reset", "1") // 0.5 missing at 10/s
	left("cost 0.5 with 0.5 tokens", do(t, h, req("x-api-key", "k", "x-request-weight", "0.5")), "weighted", "20", "0")
	refused("an empty bucket", do(t, h, req("x-api-key", "k", "x-request-weight", "0.1")))

	// Query cost: percent-decoded, the first parameter of that name,
	// default_cost (1) when absent; a cost above the burst is refused and
	// consumes nothing.
	left("query %33", do(t, h, req("x-tenant", "t", ":path", "/x?cost=%33")), "q", "10", "7")
	left("no cost parameter", do(t, h, req("x-tenant", "t", ":path", "/x?other=1")), "q", "10", "6")
	left("cost twice", do(t, h, req("x-tenant", "t", ":path", "/x?cost=2&cost=5")), "q", "10", "4")
	refused("cost 11 > burst 10", do(t, h, req("x-tenant", "t", ":path", "/x?cost=11")))
	left("cost 4 after the refusal", do(t, h, req("x-tenant", "t", ":path", "/x?a=b&cost=4")), "q", "10", "0")
	refused("cost 1 on an empty bucket", do(t, h, req("x-tenant", "t", ":path", "/x")))

	// fixed_cost: the weight header means nothing to this rule.
	left("fixed 1", do(t, h, req("x-other", "o", "x-request-weight", "9")), "fixed", "10", "6")
	left("fixed 2", do(t, h, req("x-other", "o", "x-request-weight", "0.1")), "fixed", "10", "2")
	refused("fixed 3", do(t, h, req("x-other", "o")))

	wantMetrics(t, h, map[string]uint64{
		"sluice.rule.weighted.allowed": 10, "sluice.rule.weighted.rejected": 2,
		"sluice.rule.q.allowed": 4, "sluice.rule.q.rejected": 2,
		"sluice.rule.fixed.allowed": 2, "sluice.rule.fixed.rejected": 1,
	})
}
