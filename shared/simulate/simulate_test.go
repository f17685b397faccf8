package simulate

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/state"
)

// The comparison with the compiled filter, request by request, is
// plugin/filter's TestSimulatorDecidesLikeTheCompiledFilter. These pin
// the explanations, which the filter does not give.

const tiers = `{"xff_trusted_hops": 1, "policies":[
 {"name":"tiers","rules":[
  {"name":"premium","match":{"header:x-plan":"premium","path_prefix":"/api"},"limit_keys":["header:x-api-key"],"algorithm":"token_bucket","algorithm_config":{"tokens_per_second":10,"burst":20}},
  {"name":"keyed","limit_keys":["header:x-api-key"],"algorithm":"token_bucket","algorithm_config":{"tokens_per_second":1,"burst":5,"cost_source":"query:n"}},
  {"name":"anonymous","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"tokens_per_second":1,"burst":3}}]},
 {"name":"watch","rules":[
  {"name":"watch-all","mode":"shadow","limit_keys":["ip:address"],"algorithm":"fixed_window","algorithm_config":{"limit":1,"window_seconds":60}}]}]}`

func mustParse(t *testing.T, doc string) *policy.Config {
	t.Helper()
	cfg, err := policy.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestFirstMatchingRuleAppliesAndTheOthersSayWhy(t *testing.T) {
	cfg := mustParse(t, tiers)
	res := Run(cfg, Request{Method: "GET", Path: "/web?n=3", Host: "a", ClientAddress: "10.0.0.1:99",
		Headers: map[string]string{"x-plan": "premium", "x-api-key": "k-1"}}, Options{Now: 1000})
	p := res.Policies[0]
	if p.Applied != 1 {
		t.Fatalf("applied %d, want the keyed tier: %+v", p.Applied, p.Rules)
	}
	if why := p.Rules[0].Why; !strings.Contains(why, "path") || !strings.Contains(why, `"/web"`) {
		t.Errorf("premium's reason %q should name the path that failed", why)
	}
	if why := p.Rules[2].Why; !strings.Contains(why, `"keyed"`) {
		t.Errorf("anonymous's reason %q should name the rule that applied", why)
	}
	if r := p.Rules[1]; r.Cost != 3 || r.Level != 5 || r.Decision.Remaining != 2 || r.Known {
		t.Errorf("keyed: cost %v level %v remaining %v known %v", r.Cost, r.Level, r.Decision.Remaining, r.Known)
	}
	if res.Status != 0 || res.Rule != "keyed" {
		t.Errorf("status %d rule %q", res.Status, res.Rule)
	}
}

func TestMissingKeyFallsThroughToTheNextRule(t *testing.T) {
	cfg := mustParse(t, tiers)
	res := Run(cfg, Request{Method: "GET", Path: "/", Headers: map[string]string{"x-forwarded-for": "203.0.113.9, 10.0.0.2"}, ClientAddress: "10.0.0.1"}, Options{Now: 1})
	p := res.Policies[0]
	if p.Applied != 2 || !strings.Contains(p.Rules[1].Why, "header:x-api-key is missing") {
		t.Fatalf("applied %d, keyed's reason %q", p.Applied, p.Rules[1].Why)
	}
	if id := p.Rules[2].Identity; id != "ip:address=10.0.0.2" {
		t.Errorf("identity %q, want the first trusted X-Forwarded-For hop", id)
	}
}

func TestKnownStateDecidesAndARejectionStoresNothing(t *testing.T) {
	cfg := mustParse(t, tiers)
	empty := func(r *policy.Rule, id string) (State, bool) {
		if r.Name == "anonymous" && id == "ip:address=10.0.0.1" {
			return State{Bucket: state.Bucket{Tokens: 0.25, LastRefill: 100}}, true
		}
		return State{}, false
	}
	res := Run(cfg, Request{Method: "GET", Path: "/", ClientAddress: "10.0.0.1"}, Options{Now: 100.5, Lookup: empty})
	a := res.Policies[0].Rules[2]
	if !a.Known || a.Level != 0.75 || a.Decision.Allowed {
		t.Fatalf("anonymous: known %v level %v allowed %v", a.Known, a.Level, a.Decision.Allowed)
	}
	if res.Status != 429 || res.Rule != "anonymous" || !strings.Contains(res.Body, `"rule":"anonymous"`) {
		t.Errorf("status %d rule %q body %s", res.Status, res.Rule, res.Body)
	}
	if res.GRPCStatus != policy.DefaultRejectGRPCStatus {
		t.Errorf("a gRPC call's status %d, want resource_exhausted", res.GRPCStatus)
	}
	if s := res.Stores(); s != nil {
		t.Errorf("a rejected request stores %v", s)
	}
}

// watchAllUsed is a Lookup in which tiers' shadow rule watch-all has
// spent its window.
func watchAllUsed(r *policy.Rule, id string) (State, bool) {
	if r.Name == "watch-all" {
		w := state.Window{Start: 960, N: 1}
		w.Counts[0] = 1
		return State{Window: w}, true
	}
	return State{}, false
}

func TestShadowRefusalMarksTheUpstreamRequest(t *testing.T) {
	cfg := mustParse(t, tiers)
	used := watchAllUsed
	res := Run(cfg, Request{Method: "GET", Path: "/", ClientAddress: "10.0.0.1"}, Options{Now: 1000, Lookup: used})
	if res.Status != 0 || len(res.Upstream) != 1 || res.Upstream[0] != [2]string{"x-sluice-shadow", "watch-all"} {
		t.Fatalf("status %d upstream %v", res.Status, res.Upstream)
	}
	stores := res.Stores()
	if len(stores) != 1 || stores[0].Rule != "anonymous" {
		t.Errorf("stores %v, want only the admitting enforce rule", stores)
	}
}

func TestShadowRuleWithoutMarkRefusesButLeavesTheUpstreamRequest(t *testing.T) {
	cfg := mustParse(t, strings.Replace(tiers, `"name":"watch-all","mode":"shadow"`, `"name":"watch-all","mode":"shadow","shadow_mark":false`, 1))
	if r := cfg.RuleByName("watch-all"); r == nil || !r.Unmarked {
		t.Fatal("the test policy's watch-all rule is not unmarked")
	}
	res := Run(cfg, Request{Method: "GET", Path: "/", ClientAddress: "10.0.0.1"}, Options{Now: 1000, Lookup: watchAllUsed})
	if res.Status != 0 || len(res.Upstream) != 0 {
		t.Fatalf("status %d upstream %v, want allowed with the upstream request untouched", res.Status, res.Upstream)
	}
	var watch *RuleResult
	for i := range res.Policies {
		for j := range res.Policies[i].Rules {
			if rr := &res.Policies[i].Rules[j]; rr.Name == "watch-all" {
				watch = rr
			}
		}
	}
	if watch == nil || !watch.Applies || watch.Decision.Allowed {
		t.Fatalf("watch-all %+v, want applying and refusing", watch)
	}
}

func FuzzRun(f *testing.F) {
	f.Add("/api?n=2", "premium", "k", "Bearer a.eyJzdWIiOiJ4In0.c", "10.0.0.1:1", "spiffe://cluster.local/ns/batch/sa/etl", "checkout")
	f.Add("", "", "", "", "", "", "")
	f.Add("/x?n=1e309", "premium", strings.Repeat("|#\\", 200), "bearer ...", "[::1]:80", "|", "\\|")
	cfg, err := policy.Parse([]byte(strings.Replace(tiers, `]}]}`, `]},
 {"name":"mesh","rules":[
  {"name":"batch","match":{"peer:principal":{"prefix":"spiffe://cluster.local/ns/batch/"}},"limit_keys":["peer:principal","route"],"algorithm":"fixed_window","algorithm_config":{"limit":2,"window_seconds":60}}]}]}`, 1)))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, path, plan, key, authz, addr, peer, route string) {
		res := Run(cfg, Request{Method: "GET", Path: path, ClientAddress: addr, PeerPrincipal: peer, Route: route,
			Headers: map[string]string{"x-plan": plan, "x-api-key": key, "authorization": authz}}, Options{Now: 5})
		if len(res.Policies) != 3 {
			t.Fatalf("%d policies", len(res.Policies))
		}
		if (res.Status != 0) != (res.Body != "") {
			t.Fatalf("status %d with body %q", res.Status, res.Body)
		}
	})
}

const gated = `{"policies":[
 {"name":"gate","rules":[
  {"name":"health","action":"exempt","match":{"path":{"in":["/healthz"]}}},
  {"name":"blocked","action":"deny","deny_status":451,"match":{"header:x-api-key":{"prefix":"bad-"}}}]},
 {"name":"plans","rules":[
  {"name":"keyed","limit_keys":["header:x-api-key"],"algorithm":"token_bucket","algorithm_config":{"tokens_per_second":1,"burst":2},
   "overrides":[{"key":"gold-1","algorithm_config":{"tokens_per_second":10,"burst":50}}]}]}]}`

func TestExemptDenyAndOverridesDecideAsTheFilterDoes(t *testing.T) {
	cfg := mustParse(t, gated)
	run := func(path, key string) Result {
		return Run(cfg, Request{Method: "GET", Path: path, Host: "a", ClientAddress: "10.0.0.1:1",
			Headers: map[string]string{"x-api-key": key}}, Options{Now: 1000})
	}
	ex := run("/healthz", "bad-1")
	if ex.Status != 0 || len(ex.Headers) != 0 || ex.Policies[0].Rules[0].Action != policy.ActionExempt {
		t.Errorf("exempt: status %d headers %v rules %+v", ex.Status, ex.Headers, ex.Policies[0].Rules)
	}
	if why := ex.Policies[1].Rules[0].Why; !strings.Contains(why, `exempt rule "health"`) {
		t.Errorf("a rule after an exemption says %q", why)
	}
	deny := run("/x", "bad-1")
	if deny.Status != 451 || deny.Rule != "blocked" || deny.Body != `{"error":"denied","rule":"blocked"}` {
		t.Errorf("deny: %d %q %s", deny.Status, deny.Rule, deny.Body)
	}
	if deny.GRPCStatus != 2 { // gRPC maps an unlisted 451 to UNKNOWN
		t.Errorf("deny: a gRPC call's status %d, want unknown (2)", deny.GRPCStatus)
	}
	gold, plain := run("/x", "gold-1"), run("/x", "silver-1")
	g, p := gold.Policies[1].Rules[0], plain.Policies[1].Rules[0]
	if !g.Overridden || g.Level != 50 || p.Overridden || p.Level != 2 {
		t.Errorf("override: gold %v level %v, plain %v level %v", g.Overridden, g.Level, p.Overridden, p.Level)
	}
	if !strings.Contains(fieldOf(gold.Headers, "ratelimit-policy"), "q=50") {
		t.Errorf("the override's limits should name the RateLimit policy: %v", gold.Headers)
	}
}

// TestShadowExemptAndDenyRulesLeaveEnforcementAlone: a shadow exempt rule
// exempts from the shadow rules of every policy and says so, never from an
// enforced rule; a shadow deny rule does not hide a later enforced one.
func TestShadowExemptAndDenyRulesLeaveEnforcementAlone(t *testing.T) {
	cfg := mustParse(t, `{"policies":[
 {"name":"watch","rules":[{"name":"watch-ip","mode":"shadow","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"tokens_per_second":1,"burst":1}}]},
 {"name":"bots","rules":[{"name":"bots","mode":"shadow","action":"deny","match":{"header:user-agent":"bot"}}]},
 {"name":"gate","rules":[{"name":"health","mode":"shadow","action":"exempt","match":{"path":"/healthz"}}]},
 {"name":"block","rules":[{"name":"blocked","action":"deny","deny_status":403,"match":{"header:x-api-key":"bad"}}]},
 {"name":"tiers","rules":[{"name":"per-key","limit_keys":["header:x-api-key"],"algorithm":"token_bucket","algorithm_config":{"tokens_per_second":1,"burst":1}}]},
 {"name":"trial","rules":[{"name":"trial-ip","mode":"shadow","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"tokens_per_second":1,"burst":1}}]}]}`)
	run := func(path, key string) Result {
		return Run(cfg, Request{Method: "GET", Path: path, Host: "a", ClientAddress: "10.0.0.1:1",
			Headers: map[string]string{"x-api-key": key, "user-agent": "bot"}}, Options{Now: 1000})
	}
	health := run("/healthz", "k")
	if health.Status != 0 || health.Rule != "per-key" || !health.RuleNamed("health").Applies || !health.RuleNamed("per-key").Applies {
		t.Errorf("the enforced rule should decide a shadow-exempted request: %d %q", health.Status, health.Rule)
	}
	for _, name := range []string{"watch-ip", "bots", "trial-ip"} {
		if rr := health.RuleNamed(name); rr.Applies || !strings.HasPrefix(rr.Why, `exempted: shadow exempt rule "health"`) {
			t.Errorf("%s, before or after the shadow exempt rule: applies %v, why %q", name, rr.Applies, rr.Why)
		}
	}
	if len(health.Upstream) != 0 {
		t.Errorf("a shadow-exempted request is marked: %v", health.Upstream)
	}
	if other := run("/x", "k"); other.Upstream == nil || other.RuleNamed("watch-ip").Why != "" {
		t.Errorf("off the exemption, the shadow deny rule should mark: %v, watch-ip %q", other.Upstream, other.RuleNamed("watch-ip").Why)
	}
	if deny := run("/x", "bad"); deny.Status != 403 || deny.Rule != "blocked" {
		t.Errorf("an enforced deny rule after a shadow one: %d %q, want 403 by blocked", deny.Status, deny.Rule)
	}
	if deny := run("/healthz", "bad"); deny.Status != 403 {
		t.Errorf("an enforced deny rule under a shadow exemption: %d, want 403", deny.Status)
	}
}

func fieldOf(hs [][2]string, name string) string {
	for _, h := range hs {
		if h[0] == name {
			return h[1]
		}
	}
	return ""
}

func TestQuotaOverrideGivesItsIdentityItsOwnLimitInTheRulesPeriod(t *testing.T) {
	cfg := mustParse(t, `{"rules":[{"name":"monthly","limit_keys":["header:x-api-key"],"algorithm":"quota",
  "algorithm_config":{"limit":3,"period":"month","time_zone":"Europe/Berlin"},
  "overrides":[{"key":"big","algorithm_config":{"limit":500}}]}]}`)
	now := float64(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC).Unix())
	run := func(key string) RuleResult {
		res := Run(cfg, Request{Method: "GET", Path: "/", Host: "a", ClientAddress: "10.0.0.1:1",
			Headers: map[string]string{"x-api-key": key}}, Options{Now: now})
		return res.Policies[0].Rules[0]
	}
	big, small := run("big"), run("small")
	if !big.Overridden || big.Level != 500 || small.Overridden || small.Level != 3 {
		t.Errorf("big: overridden %v level %v; small: overridden %v level %v", big.Overridden, big.Level, small.Overridden, small.Level)
	}
	// Both reset at the rule's period end: 1 April 00:00 in Berlin.
	reset := float64(time.Date(2026, 4, 1, 0, 0, 0, 0, mustZone(t, "Europe/Berlin")).Unix()) - now
	if big.Decision.Reset != reset || small.Decision.Reset != reset {
		t.Errorf("resets %v and %v, want %v", big.Decision.Reset, small.Decision.Reset, reset)
	}
}

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// An exempt rule in a later policy exempts the request from the rules of
// earlier policies too: they decide nothing, say so, and store nothing,
// as the filter leaves their buckets alone.
func TestAnExemptRuleInALaterPolicyExemptsFromTheEarlierOnes(t *testing.T) {
	cfg := mustParse(t, `{"policies":[
	 {"name":"limits","rules":[{"name":"per-ip","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"tokens_per_second":1,"burst":3}}]},
	 {"name":"gate","rules":[{"name":"monitoring","action":"exempt","match":{"path_prefix":"/healthz"}}]}]}`)
	res := Run(cfg, Request{Method: "GET", Path: "/healthz", ClientAddress: "10.0.0.1"}, Options{Now: 1000})
	if res.Status != 0 || len(res.Headers) != 0 {
		t.Fatalf("status %d, headers %v: want through, without RateLimit fields", res.Status, res.Headers)
	}
	r := res.RuleNamed("per-ip")
	if r.Applies || !strings.Contains(r.Why, `exempt rule "monitoring" applies`) || res.Policies[0].Applied != -1 {
		t.Errorf("per-ip: applies %v, why %q, its policy's applied rule %d", r.Applies, r.Why, res.Policies[0].Applied)
	}
	if s := res.Stores(); len(s) != 0 {
		t.Errorf("an exempted request stores %v", s)
	}
}

// The state the simulator passes on is the one the filter reads back:
// rounded to micro-units as shared data keeps it.
func TestNextStateIsRoundedAsSharedDataKeepsIt(t *testing.T) {
	cfg := mustParse(t, tiers)
	const now = 1000.123456789
	res := Run(cfg, Request{Method: "GET", Path: "/", ClientAddress: "10.0.0.1"}, Options{Now: now})
	next := res.Policies[0].Rules[2].Next.Bucket
	if next.LastRefill != 1000.123457 || next.Tokens != 2 {
		t.Errorf("next bucket %+v, want last_refill 1000.123457 (rounded to the µs) and 2 tokens", next)
	}
	w := res.Policies[1].Rules[0].Next.Window
	if w.Start != 960 || w.Counts[0] != 1 {
		t.Errorf("next window %+v", w)
	}
}

// TestResponseChargedRulesShowWhatTheResponseWouldBeCharged: a rule
// charged from the response takes nothing now; its Cost is what a response
// would be charged (a response_status rule's fixed_cost, a reported-cost
// rule's default_cost, never a request header of the same name), and a
// response_status rule refuses while the bucket holds less than that cost.
func TestResponseChargedRulesShowWhatTheResponseWouldBeCharged(t *testing.T) {
	cfg := mustParse(t, `{"policies":[
 {"name":"logins","rules":[{"name":"failures","limit_keys":["header:x-api-key"],"algorithm":"token_bucket",
   "algorithm_config":{"tokens_per_second":0.01,"burst":3,"cost_source":"response_status:401","fixed_cost":2}}]},
 {"name":"llm","rules":[{"name":"tokens","limit_keys":["header:x-api-key"],"algorithm":"token_bucket",
   "algorithm_config":{"tokens_per_second":1,"burst":100,"cost_source":"response_header:x-cost","default_cost":7}}]}]}`)
	level := 1.5
	lookup := func(r *policy.Rule, id string) (State, bool) {
		return State{Bucket: state.Bucket{Tokens: level, LastRefill: 1000}}, true
	}
	req := Request{Method: "POST", Path: "/login", ClientAddress: "10.0.0.1",
		Headers: map[string]string{"x-api-key": "k", "x-cost": "5"}}
	res := Run(cfg, req, Options{Now: 1000, Lookup: lookup})
	f, tk := res.Policies[0].Rules[0], res.Policies[1].Rules[0]
	if !f.ChargedLater || f.Cost != 2 || f.Decision.Allowed {
		t.Fatalf("failures holding 1.5 of a cost of 2: charged later %v cost %v allowed %v; want refused", f.ChargedLater, f.Cost, f.Decision.Allowed)
	}
	if !tk.ChargedLater || tk.Cost != 7 || !tk.Decision.Allowed {
		t.Fatalf("tokens: charged later %v cost %v allowed %v; want default_cost 7, admitted", tk.ChargedLater, tk.Cost, tk.Decision.Allowed)
	}
	if res.Status != 429 || res.Rule != "failures" {
		t.Fatalf("status %d rule %q", res.Status, res.Rule)
	}
	level = 2
	res = Run(cfg, req, Options{Now: 1000, Lookup: lookup})
	if f := res.Policies[0].Rules[0]; !f.Decision.Allowed || res.Status != 0 {
		t.Fatalf("failures holding its cost: allowed %v, status %d (0: sent upstream)", f.Decision.Allowed, res.Status)
	}
	for _, s := range res.Stores() {
		if s.State.Bucket.Tokens != 2 {
			t.Fatalf("%s: the request took from the bucket: %+v", s.Rule, s.State.Bucket)
		}
	}
}

// TestConcurrencyRuleSendsPlacesNotTimes: a concurrency rule decides from
// the places telemetry says are taken; its fields have the
// concurrent-requests unit and no t, a refusal's Retry-After is 1, and
// the simulated request, which ends at once, stores nothing new.
func TestConcurrencyRuleSendsPlacesNotTimes(t *testing.T) {
	cfg := mustParse(t, `{"rules":[{"name":"inflight","limit_keys":["header:x-api-key"],"algorithm":"concurrency",
   "algorithm_config":{"limit":3,"max_request_seconds":60}}]}`)
	taken := 1.0
	lookup := func(r *policy.Rule, id string) (State, bool) {
		return State{Window: state.Window{Start: 960, N: 2, Counts: [state.MaxCounts]float64{taken}}}, true
	}
	req := Request{Method: "GET", Path: "/", ClientAddress: "10.0.0.1", Headers: map[string]string{"x-api-key": "k"}}
	res := Run(cfg, req, Options{Now: 1000, Lookup: lookup})
	if res.Status != 0 {
		t.Fatalf("one of three taken: status %d", res.Status)
	}
	want := map[string]string{"ratelimit": `"inflight";r=1`, "ratelimit-policy": `"inflight";q=3;qu="concurrent-requests"`}
	for _, h := range res.Headers {
		if w, ok := want[h[0]]; ok && h[1] != w {
			t.Errorf("%s: %q, want %q", h[0], h[1], w)
		}
		delete(want, h[0])
	}
	if len(want) != 0 {
		t.Errorf("missing %v in %v", want, res.Headers)
	}
	if s := res.Stores(); len(s) != 1 || s[0].State.Window.Counts[0] != taken {
		t.Fatalf("stores %+v: a simulated request keeps no place", s)
	}
	taken = 3
	res = Run(cfg, req, Options{Now: 1000, Lookup: lookup})
	if res.Status != 429 {
		t.Fatalf("all three taken: status %d", res.Status)
	}
	for _, h := range res.Headers {
		if h[0] == "retry-after" && h[1] != "1" || h[0] == "ratelimit" && h[1] != `"inflight";r=0` || h[0] == "x-ratelimit-reason" && h[1] != "concurrency_exceeded" {
			t.Errorf("refusal: %s: %q", h[0], h[1])
		}
	}
}

// A global rule's override is the identity's limit across the fleet: the
// simulator, which decides a global rule as a bucket of its limit, uses
// the override's as the filter does.
func TestGlobalRuleOverrideGivesItsIdentityItsOwnLimit(t *testing.T) {
	cfg := mustParse(t, `{"fleet":{"cluster":"sluice_rls"},"rules":[{"name":"g","scope":"global","limit_keys":["header:x-api-key"],
  "algorithm":"token_bucket","algorithm_config":{"tokens_per_second":10,"burst":10},
  "overrides":[{"key":"acme","algorithm_config":{"tokens_per_second":50,"burst":100}}]}]}`)
	run := func(key string) RuleResult {
		res := Run(cfg, Request{Method: "GET", Path: "/", Host: "a", ClientAddress: "10.0.0.1:1",
			Headers: map[string]string{"x-api-key": key}}, Options{Now: 1e9})
		return res.Policies[0].Rules[0]
	}
	acme, beta := run("acme"), run("beta")
	if !acme.Global || !acme.Overridden || acme.Level != 100 || beta.Overridden || beta.Level != 10 {
		t.Errorf("acme: global %v overridden %v level %v; beta: overridden %v level %v",
			acme.Global, acme.Overridden, acme.Level, beta.Overridden, beta.Level)
	}
}

// An unlimited rule ends its policy (its later rules are not tried) and
// leaves the other policies alone.
func TestUnlimitedRuleEndsItsPolicyOnly(t *testing.T) {
	cfg := mustParse(t, `{"policies":[
 {"name":"keys","rules":[
  {"name":"internal","action":"unlimited","match":{"header:x-api-key":{"in":["batch"]}}},
  {"name":"per-key","limit_keys":["header:x-api-key"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":1}}]},
 {"name":"addresses","rules":[
  {"name":"per-ip","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":5}}]}]}`)
	res := Run(cfg, Request{Method: "GET", Path: "/", Host: "a", ClientAddress: "10.0.0.1:1",
		Headers: map[string]string{"x-api-key": "batch"}}, Options{Now: 1e9})
	keys, addr := res.Policies[0].Rules, res.Policies[1].Rules
	if !keys[0].Applies || !strings.Contains(keys[0].Why, "limits this request no further") || keys[1].Applies ||
		!strings.Contains(keys[1].Why, "before it applies") {
		t.Errorf("the keys policy: %+v", keys)
	}
	if !addr[0].Applies || res.Status != 0 || res.Rule != "per-ip" {
		t.Errorf("the address policy: %+v, status %d, rule %q", addr[0], res.Status, res.Rule)
	}
}

// TestStoresKeepTheSampleResponsesCharge: a rule charged from the response
// stores the charge for the request's sample response, so a sequence of
// simulated requests spends what the answers report; without a sample it
// stores the bucket as it was.
func TestStoresKeepTheSampleResponsesCharge(t *testing.T) {
	cfg := mustParse(t, `{"rules":[{"name":"llm","limit_keys":["header:x-api-key"],"algorithm":"token_bucket",
   "algorithm_config":{"tokens_per_second":1,"burst":100,"cost_source":"response_json:usage.total_tokens","default_cost":5}}]}`)
	req := Request{Method: "POST", Path: "/", ClientAddress: "10.0.0.1", Headers: map[string]string{"x-api-key": "k"},
		Response: &Response{Status: 200, Headers: map[string]string{"content-type": "application/json"}, Body: []byte(`{"usage":{"total_tokens":30}}`)}}
	res := Run(cfg, req, Options{Now: 1000})
	s := res.Stores()
	if len(s) != 1 || s[0].State.Bucket.Tokens != 70 || s[0].State.Bucket.LastRefill != 1000 {
		t.Fatalf("stores %+v, want 70 tokens left at 1000", s)
	}
	req.Response = nil
	res = Run(cfg, req, Options{Now: 1000})
	if s := res.Stores(); len(s) != 1 || s[0].State.Bucket != (state.Bucket{}) {
		t.Fatalf("without a sample: stores %+v, want the state unchanged (new)", s)
	}
}

// A rule outside its time does not apply and says when it does; the next
// rule of its policy is tried, as the filter tries it.
func TestRuleOutsideItsTimeSaysWhenItApplies(t *testing.T) {
	cfg := mustParse(t, `{"rules":[
  {"name":"maintenance","action":"deny","deny_status":503,"from":"2026-12-24T02:00:00Z","until":"2026-12-24T03:00:00Z"},
  {"name":"sale","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":2},"until":"2026-12-27T00:00:00Z"},
  {"name":"api","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":5,"burst":10}}]}`)
	at := func(s string) float64 {
		tm, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return float64(tm.Unix())
	}
	req := Request{Method: "GET", Path: "/", ClientAddress: "10.0.0.1:1"}
	for _, c := range []struct {
		at, rule string
		status   int
		whys     []string
	}{
		{"2026-12-24T01:59:59Z", "sale", 0, []string{"not in its time: it applies from 2026-12-24T02:00:00Z until 2026-12-24T03:00:00Z (the next rule is tried)"}},
		{"2026-12-24T02:00:00Z", "maintenance", 503, nil},
		{"2026-12-27T00:00:00Z", "api", 0, []string{"not in its time: it applies from 2026-12-24T02:00:00Z until", "not in its time: it ended at 2026-12-27T00:00:00Z (the next rule is tried)"}},
	} {
		res := Run(cfg, req, Options{Now: at(c.at)})
		p := res.Policies[0]
		if applied := p.Rules[p.Applied].Name; applied != c.rule || res.Status != c.status {
			t.Errorf("at %s: %s applied, status %d; want %s, %d", c.at, applied, res.Status, c.rule, c.status)
		}
		for i, want := range c.whys {
			if !strings.HasPrefix(p.Rules[i].Why, want) {
				t.Errorf("at %s: %s says %q, want %q", c.at, p.Rules[i].Name, p.Rules[i].Why, want)
			}
		}
	}
}

// A rule outside its weekly schedule says it and when its next window
// starts.
func TestRuleOutsideItsScheduleSaysWhenTheNextWindowStarts(t *testing.T) {
	cfg := mustParse(t, `{"rules":[
  {"name":"office","schedule":{"days":["mon","tue","wed","thu","fri"],"from":"09:00","until":"18:00","time_zone":"Europe/Berlin"},
   "limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":2}},
  {"name":"api","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":5,"burst":10}}]}`)
	saturday := float64(time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC).Unix())
	res := Run(cfg, Request{Method: "GET", Path: "/", ClientAddress: "10.0.0.1:1"}, Options{Now: saturday})
	p := res.Policies[0]
	want := "not in its schedule (mon-fri 09:00-18:00 Europe/Berlin): the next window starts at 2026-12-07T08:00:00Z (the next rule is tried)"
	if p.Applied != 1 || p.Rules[0].Why != want {
		t.Errorf("applied %d; office says %q, want %q", p.Applied, p.Rules[0].Why, want)
	}
	monday := float64(time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC).Unix())
	if res := Run(cfg, Request{Method: "GET", Path: "/", ClientAddress: "10.0.0.1:1"}, Options{Now: monday}); res.Policies[0].Applied != 0 {
		t.Errorf("Monday 09:00 in Berlin: applied %d", res.Policies[0].Applied)
	}
}
