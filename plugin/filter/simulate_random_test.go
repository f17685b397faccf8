package filter_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/simulate"
)

// TestSimulatorDecidesLikeTheCompiledFilterUnderRandomPolicies is the
// comparison of TestSimulatorDecidesLikeTheCompiledFilter over random
// configurations: policies of limit, exempt and deny rules in either mode,
// with every local algorithm, match operators on every source, one or two
// limit keys, costs from headers and query parameters, overrides, and the
// configuration's response-field, status and X-Forwarded-For settings. Each
// configuration gets random requests from a small population; the compiled
// filter and the simulator must agree on every one.
// SLUICE_AGREE_SEED=N runs other configurations.
func TestSimulatorDecidesLikeTheCompiledFilterUnderRandomPolicies(t *testing.T) {
	seed := uint64(0)
	if v := os.Getenv("SLUICE_AGREE_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("SLUICE_AGREE_SEED=%q: want a non-negative integer", v)
		}
		seed = n
	}
	rng := rand.New(rand.NewPCG(11, seed))
	var total outcomeCounts
	for c := range 24 {
		doc := randomConfig(rng)
		cfg, err := policy.Parse([]byte(doc))
		if err != nil {
			t.Fatalf("configuration %d is invalid (a bug of the generator): %v\n%s", c, err, doc)
		}
		f := start(t, doc, 1)
		total.add(compareRequests(t, f, cfg, rng, 150, fmt.Sprintf("configuration %d:\n%s\n", c, doc)))
	}
	if total.rejected < 100 || total.allowed < 100 || total.denied < 10 || total.shadowMarked < 5 || total.withFields < 50 {
		t.Errorf("the configurations exercised too little: %+v", total)
	}
}

type outcomeCounts struct{ allowed, rejected, denied, shadowMarked, withFields int }

func (c *outcomeCounts) add(o outcomeCounts) {
	c.allowed, c.rejected, c.denied = c.allowed+o.allowed, c.rejected+o.rejected, c.denied+o.denied
	c.shadowMarked, c.withFields = c.shadowMarked+o.shadowMarked, c.withFields+o.withFields
}

// compareRequests sends n random requests through the filter and the
// simulator, the simulator carrying its own state, and fails at the first
// difference in status, body, response fields or shadow marking.
func compareRequests(t *testing.T, f *fixture, cfg *policy.Config, rng *rand.Rand, n int, context string) outcomeCounts {
	t.Helper()
	type key struct{ rule, identity string }
	states := map[key]simulate.State{}
	lookup := func(r *policy.Rule, id string) (simulate.State, bool) {
		s, ok := states[key{r.Name, id}]
		return s, ok
	}
	shadowHeader := cfg.ShadowHeader
	marking := false // a shadow rule marks: the filter owns the shadow header
	for _, p := range cfg.Policies {
		for _, r := range p.Rules {
			marking = marking || r.Mode == policy.ModeShadow && !r.Unmarked
		}
	}
	var out outcomeCounts
	for i := range n {
		f.clock.Advance(time.Duration(rng.IntN(1500)) * time.Millisecond)
		req := randomPolicyRequest(rng, shadowHeader)
		now := float64(f.clock.Now().UnixNano()) / 1e9
		sim := simulate.Run(cfg, req, simulate.Options{Now: now, Lookup: lookup})
		got := f.doOn(0, toWasmRequest(req))
		where := fmt.Sprintf("%srequest %d (%s %s %s, %v)", context, i, req.Method, req.Path, req.ClientAddress, req.Headers)
		want := sim.Upstream
		if forged, ok := req.Headers[shadowHeader]; ok && !marking {
			// Nothing in the configuration vouches for the header: the
			// filter leaves a client's value as it is.
			want = [][2]string{{shadowHeader, forged}}
		}
		sameAnswer(t, where, got, sim, shadowHeader, want)
		switch {
		case got.Rejected && got.Local.Status != cfg.RejectStatus:
			out.rejected++
			out.denied++
		case got.Rejected:
			out.rejected++
		default:
			out.allowed++
			if len(pick(got.ResponseHeaders, rateLimitFields)) > 0 {
				out.withFields++
			}
			if up := pick(got.UpstreamHeaders, []string{shadowHeader}); len(up) > 0 && up[0][1] != "forged" {
				out.shadowMarked++
			}
		}
		for _, s := range sim.Stores() {
			states[key{s.Rule, s.Identity}] = s.State
		}
	}
	return out
}

// randomPolicyRequest draws a request from a small population of keys,
// plans, addresses and paths, so that rules match, identities repeat and
// limits run out; now and then with a forged shadow header, a bad cost or
// a token that is not one.
func randomPolicyRequest(rng *rand.Rand, shadowHeader string) simulate.Request {
	oneOf := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	r := simulate.Request{Method: oneOf("GET", "GET", "POST", "DELETE"), Host: oneOf("api.example.com", "www.example.org"),
		Headers: map[string]string{}, ClientAddress: oneOf("10.0.0.1:5555", "10.0.0.2:1234", "192.0.2.7:80", "[2001:db8::1]:443")}
	query := []string{}
	if rng.IntN(2) == 0 {
		query = append(query, "account="+oneOf("a1", "a2"))
	}
	if rng.IntN(4) == 0 {
		query = append(query, "cost="+oneOf("1", "2", "5", "0", "-1", "x"))
	}
	r.Path = oneOf("/", "/api/items", "/api/items/7", "/healthz", "/reports/q1", "/search")
	if len(query) > 0 {
		r.Path += "?" + strings.Join(query, "&")
	}
	if rng.IntN(3) != 0 {
		r.Headers["x-api-key"] = oneOf("key-0", "key-1", "key-2")
	}
	if rng.IntN(2) == 0 {
		r.Headers["x-plan"] = oneOf("free", "premium", "gold", "")
	}
	if rng.IntN(3) == 0 {
		r.Headers["x-forwarded-for"] = oneOf("198.51.100.1", "198.51.100.2, 10.0.0.9", "203.0.113.5, 198.51.100.1, 10.0.0.9", "not-an-address")
	}
	if rng.IntN(4) == 0 {
		r.Headers["x-cost"] = oneOf("1", "3", "0", "2.5", "-2", "lots", "100000")
	}
	switch rng.IntN(6) {
	case 0:
		r.Headers["authorization"] = unsignedJWT(fmt.Sprintf(`{"sub":"user-%d","tier":"%s"}`, rng.IntN(2), oneOf("gold", "free")))
	case 1:
		r.Headers["authorization"] = oneOf("Bearer not.a.jwt", "Basic dXNlcjpwdw==", "Bearer "+unsignedJWT(`{"sub":7}`)[7:])
	}
	if rng.IntN(5) == 0 {
		r.Headers["user-agent"] = oneOf("crawlbot", "curl/8.0")
	}
	if rng.IntN(8) == 0 {
		r.Headers[shadowHeader] = "forged"
	}
	return r
}

// randomConfig returns a valid configuration document: one to three
// policies of one to four rules each.
func randomConfig(rng *rand.Rand) string {
	g := configGen{rng: rng}
	doc := map[string]any{}
	if rng.IntN(4) == 0 {
		doc["reject_status"] = []int{429, 503, 420}[rng.IntN(3)]
	}
	if rng.IntN(3) == 0 {
		doc["legacy_headers"] = true
	}
	if rng.IntN(6) == 0 {
		doc["response_headers"] = false
	}
	if rng.IntN(4) == 0 {
		doc["shadow_header"] = "x-limit-trial"
	}
	if rng.IntN(2) == 0 {
		doc["xff_trusted_hops"] = 1 + rng.IntN(2)
	}
	if rng.IntN(10) == 0 {
		doc["mode"] = "shadow"
	}
	var policies []any
	for p := range 1 + rng.IntN(3) {
		var rules []any
		for range 1 + rng.IntN(4) {
			rules = append(rules, g.rule())
		}
		policies = append(policies, map[string]any{"name": fmt.Sprintf("p%d", p), "rules": rules})
	}
	doc["policies"] = policies
	b, err := json.MarshalIndent(doc, "", " ")
	if err != nil {
		panic(err)
	}
	return string(b)
}

type configGen struct {
	rng   *rand.Rand
	rules int
}

func (g *configGen) oneOf(xs ...string) string { return xs[g.rng.IntN(len(xs))] }

func (g *configGen) rule() map[string]any {
	g.rules++
	r := map[string]any{"name": fmt.Sprintf("r%d", g.rules)}
	if match := g.match(); len(match) > 0 {
		r["match"] = match
	}
	if g.rng.IntN(3) == 0 {
		r["mode"] = g.oneOf("shadow", "shadow", "enforce")
		if r["mode"] == "shadow" && g.rng.IntN(3) == 0 {
			r["shadow_mark"] = false
		}
	}
	switch g.rng.IntN(8) {
	case 0:
		r["action"] = "exempt"
		return r
	case 1:
		r["action"] = "deny"
		if g.rng.IntN(2) == 0 {
			r["deny_status"] = []int{403, 451}[g.rng.IntN(2)]
		}
		return r
	}
	keys := []string{g.key()}
	if g.rng.IntN(4) == 0 {
		if k := g.key(); k != keys[0] {
			keys = append(keys, k)
		}
	}
	r["limit_keys"] = keys
	if g.rng.IntN(5) == 0 {
		r["max_keys"] = 0 // exact per-key storage
	}
	algorithm, config := g.algorithm()
	r["algorithm"], r["algorithm_config"] = algorithm, config
	if len(keys) == 1 && keys[0] == "header:x-api-key" && g.rng.IntN(2) == 0 {
		_, override := g.algorithmOf(algorithm)
		delete(override, "cost_source")
		delete(override, "default_cost")
		delete(override, "window_seconds")
		delete(override, "period_seconds")
		delete(override, "period")
		delete(override, "time_zone")
		delete(override, "max_per_period")
		r["overrides"] = []any{map[string]any{"key": g.oneOf("key-1", "key-2"), "algorithm_config": override}}
	}
	return r
}

func (g *configGen) key() string {
	return g.oneOf("header:x-api-key", "header:x-api-key", "ip:address", "query:account", "jwt:sub", "header:x-plan", "host", "jwt:tier")
}

// match returns zero to two conditions.
func (g *configGen) match() map[string]any {
	m := map[string]any{}
	for range g.rng.IntN(3) {
		switch g.rng.IntN(9) {
		case 0:
			m["path_prefix"] = g.oneOf("/api/", "/reports", "/")
		case 1:
			m["method"] = g.condition("GET", "POST", "DELETE")
		case 2:
			m["header:x-plan"] = g.condition("free", "premium", "gold")
		case 3:
			m["ip:address"] = map[string]any{"cidr": []string{g.oneOf("10.0.0.0/8", "192.0.2.0/24", "2001:db8::/32", "198.51.100.1/32")}}
		case 4:
			m["query:account"] = g.condition("a1", "a2")
		case 5:
			m["host"] = map[string]any{"suffix": g.oneOf(".example.com", ".org")}
		case 6:
			m["path"] = map[string]any{"regex": g.oneOf("^/api/items/[0-9]+$", "^/(healthz|search)$", "reports")}
		case 7:
			m["header:user-agent"] = map[string]any{g.oneOf("suffix", "prefix"): g.oneOf("bot", "curl")}
		case 8:
			m["jwt:tier"] = g.condition("gold", "free")
		}
	}
	return m
}

// condition is an exact value or one of the other operators on values.
func (g *configGen) condition(values ...string) any {
	v := values[g.rng.IntN(len(values))]
	switch g.rng.IntN(6) {
	case 0:
		in := []string{v}
		if w := values[g.rng.IntN(len(values))]; w != v {
			in = append(in, w)
		}
		return map[string]any{"in": in}
	case 1:
		return map[string]any{"not": v}
	case 2:
		return map[string]any{"present": g.rng.IntN(2) == 0}
	case 3:
		return map[string]any{"prefix": v}
	}
	return v
}

func (g *configGen) algorithm() (string, map[string]any) {
	return g.algorithmOf(g.oneOf("token_bucket", "token_bucket", "fixed_window", "sliding_window", "rolling_window", "quota"))
}

func (g *configGen) algorithmOf(algorithm string) (string, map[string]any) {
	c := map[string]any{}
	small := func() float64 { return []float64{2, 3, 5}[g.rng.IntN(3)] } // at least the highest default_cost
	switch algorithm {
	case "token_bucket":
		c["tokens_per_second"] = []float64{0.2, 0.5, 1, 2}[g.rng.IntN(4)] // at most the burst
		c["burst"] = small()
	case "fixed_window", "sliding_window":
		c["limit"] = small()
		c["window_seconds"] = []int{1, 5, 30}[g.rng.IntN(3)]
	case "rolling_window":
		c["limit"] = small() + 2
		c["window_seconds"] = 20
		c["period_seconds"] = []int{5, 10}[g.rng.IntN(2)]
		if g.rng.IntN(2) == 0 {
			c["max_per_period"] = 2
		}
	case "quota":
		c["limit"] = small() + 3
		c["period"] = g.oneOf("hour", "day")
		c["time_zone"] = g.oneOf("UTC", "Europe/Berlin", "America/New_York")
	}
	switch g.rng.IntN(5) {
	case 0:
		c["cost_source"] = "header:x-cost"
		c["default_cost"] = []float64{1, 2}[g.rng.IntN(2)]
	case 1:
		c["cost_source"] = "query:cost"
	}
	return algorithm, c
}
