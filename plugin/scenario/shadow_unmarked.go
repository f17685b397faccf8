package scenario

// Shadow rules with "shadow_mark": false (what the admin's trials push):
// they count and log their would-be rejections like any shadow rule, but
// never name themselves in the shadow header; while no shadow rule marks,
// the filter does not touch that header, so a client-sent one reaches
// upstream as sent (nothing in such a configuration vouches for it). Beside
// a marking shadow rule the header is the marking rule's business alone.

import (
	"slices"
	"testing"
)

func init() {
	register(Case{Name: "UnmarkedShadowRuleCountsAndLeavesTheUpstreamRequestAsSent", Run: shadowUnmarked})
	register(Case{Name: "UnmarkedShadowRuleNeverAppearsInAMarkingRulesShadowHeader", Run: shadowUnmarkedBesideMarking})
}

// unmarkedRule is a shadow rule of burst 1 keyed on x-api-key that does not
// mark.
const unmarkedRule = `{"name": "trial-keyed", "mode": "shadow", "shadow_mark": false, "limit_keys": ["header:x-api-key"],
	    "algorithm": "token_bucket", "algorithm_config": {"rps": 0.001, "burst": 1}}`

func shadowUnmarked(t *testing.T, start Starter) {
	h := startConfig(t, start, `{"policies": [
	  {"name": "enforced", "rules": [{"name": "per-ip", "limit_keys": ["ip:address"], "algorithm": "token_bucket",
	    "algorithm_config": {"rps": 0.001, "burst": 100}}]},
	  {"name": "trial", "rules": [`+unmarkedRule+`]}]}`)
	r := req("x-api-key", "k", "x-sluice-shadow", "client-value")
	for i := 0; i < 4; i++ {
		res := do(t, h, r)
		if res.Rejected {
			t.Fatalf("request %d rejected by a shadow rule", i)
		}
		// Upstream gets the request exactly as sent: the client's header
		// too, and nothing added.
		for _, hd := range r.Headers {
			if !slices.Contains(res.UpstreamHeaders, hd) {
				t.Errorf("request %d: upstream lacks %s: %q as sent; got %v", i, hd[0], hd[1], res.UpstreamHeaders)
			}
		}
		wantHeaders(t, "unmarked shadow", res.UpstreamHeaders, "x-sluice-shadow", "client-value")
		wantHeaders(t, "unmarked shadow", res.ResponseHeaders, "ratelimit-policy", `"per-ip";q=100;w=100000`)
	}
	// Without a client header, none appears.
	res := do(t, h, req("x-api-key", "k"))
	wantHeaders(t, "unmarked shadow, no client header", res.UpstreamHeaders, "x-sluice-shadow", "-")
	wantMetrics(t, h, map[string]uint64{
		"sluice.rule.trial-keyed.allowed": 1, "sluice.rule.trial-keyed.shadow_rejected": 4, "sluice.rule.trial-keyed.rejected": 0,
		"sluice.rule.per-ip.allowed": 5,
	})
	if logsContaining(h, "shadow rule trial-keyed would have rejected") == 0 {
		t.Errorf("shadow rejection not logged: %q", h.Logs())
	}
}

func shadowUnmarkedBesideMarking(t *testing.T, start Starter) {
	h := startConfig(t, start, `{"policies": [
	  {"name": "current", "rules": [{"name": "watch", "mode": "shadow", "limit_keys": ["header:x-api-key"],
	    "algorithm": "token_bucket", "algorithm_config": {"rps": 0.001, "burst": 2}}]},
	  {"name": "trial", "rules": [`+unmarkedRule+`]}]}`)
	r := req("x-api-key", "k", "x-sluice-shadow", "forged")
	// trial-keyed refuses from the second request, watch from the third;
	// only watch is named, and the forged header never gets through.
	for i, want := range []string{"-", "-", "watch", "watch"} {
		res := do(t, h, r)
		if res.Rejected {
			t.Fatalf("request %d rejected by a shadow rule", i)
		}
		wantHeaders(t, "beside a marking rule", res.UpstreamHeaders, "x-sluice-shadow", want)
	}
	wantMetrics(t, h, map[string]uint64{
		"sluice.rule.trial-keyed.shadow_rejected": 3, "sluice.rule.watch.shadow_rejected": 2,
	})
}
