// Package policytest makes random valid configurations and requests for
// the tests that compare two ways of deciding the same traffic: the
// compiled filter and the simulator, or a policy with and without a shadow
// trial. The population is small (three API keys, two accounts, four
// client addresses, a few paths), so rules match, identities repeat and
// limits run out.
package policytest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/shared/simulate"
)

// Seed is SLUICE_AGREE_SEED (0 when unset): a comparison seeds its random
// configurations and requests with it, so that other runs can be tried.
func Seed(tb testing.TB) uint64 {
	v := os.Getenv("SLUICE_AGREE_SEED")
	if v == "" {
		return 0
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		tb.Fatalf("SLUICE_AGREE_SEED=%q: want a non-negative integer", v)
	}
	return n
}

// Request draws a request from a small population of keys,
// plans, addresses and paths, so that rules match, identities repeat and
// limits run out; now and then with a forged shadow header, a bad cost or
// a token that is not one.
func Request(rng *rand.Rand, shadowHeader string) simulate.Request {
	oneOf := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	r := simulate.Request{Method: oneOf("GET", "GET", "POST", "DELETE"), Host: oneOf("api.example.com", "www.example.org"),
		Headers: map[string]string{}, ClientAddress: oneOf("10.0.0.1:5555", "10.0.0.2:1234", "192.0.2.7:80", "[2001:db8::1]:443", "[2001:db8::2]:443")}
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
		r.Headers["authorization"] = oneOf("Bearer not.a.jwt", "Basic dXNlcjpwdw==", unsignedJWT(`{"sub":7}`))
	}
	if rng.IntN(5) == 0 {
		r.Headers["user-agent"] = oneOf("crawlbot", "curl/8.0")
	}
	if rng.IntN(8) == 0 {
		r.Headers[shadowHeader] = "forged"
	}
	if rng.IntN(3) > 0 { // a client with a certificate, as under mutual TLS
		r.PeerPrincipal = oneOf("spiffe://cluster.local/ns/shop/sa/web", "spiffe://cluster.local/ns/batch/sa/etl")
	}
	if rng.IntN(4) > 0 { // the name of the Envoy route it matched
		r.Route = oneOf("checkout", "catalog")
	}
	if rng.IntN(4) > 0 { // the upstream cluster its route sends it to
		r.Cluster = oneOf("outbound|8080||payments.prod.svc.cluster.local", "outbound|80||web.prod.svc.cluster.local", "upstream")
	}
	if rng.IntN(4) > 0 { // the downstream connection it came on
		r.Connection = oneOf("0", "7", "18446744073709551615")
	}
	if rng.IntN(6) == 0 { // gRPC calls get their rejections trailers-only
		r.Headers["content-type"] = oneOf("application/grpc", "application/grpc+proto", "application/grpc-web")
	}
	if rng.IntN(3) > 0 { // Envoy dynamic metadata: verified claims, a body field
		r.Metadata = map[string]map[string]any{}
		if rng.IntN(3) > 0 {
			r.Metadata["envoy.filters.http.jwt_authn"] = map[string]any{"jwt_payload": map[string]any{
				"sub": oneOf("alice", "bob", ""), "tier": []any{2.0, true, "gold", nil}[rng.IntN(4)]}}
		}
		if rng.IntN(2) == 0 {
			r.Metadata["envoy.filters.http.json_to_metadata"] = map[string]any{"model": oneOf("gpt-4o", "o1", "llama3"),
				"n": []any{1.0, 3.0, 2.5, 0.0, "2", "x", nil}[rng.IntN(7)]}
		}
		if rng.IntN(3) == 0 { // claims kept under the issuer, groups a list
			jwt := r.Metadata["envoy.filters.http.jwt_authn"]
			if jwt == nil {
				jwt = map[string]any{}
				r.Metadata["envoy.filters.http.jwt_authn"] = jwt
			}
			jwt["https://idp.example.com"] = map[string]any{"groups": []any{[]any{"dev"}, []any{"ops", "dev"}, []any{}}[rng.IntN(3)]}
		}
	}
	if rng.IntN(3) > 0 { // a browser's cookies: a session, an experiment group
		r.Headers["cookie"] = oneOf("sid=s-1; ab=blue", `ab="green"; sid=s-2`, "theme=dark", "sid=; ab=blue", "sid=s-1;sid=s-2")
	}
	return r
}

// Config returns a valid configuration document: one to three
// policies of one to four rules each.
func Config(rng *rand.Rand) string {
	g := configGen{rng: rng}
	doc := map[string]any{}
	if rng.IntN(4) == 0 {
		doc["reject_status"] = []int{429, 503, 420}[rng.IntN(3)]
	}
	if rng.IntN(4) == 0 {
		doc["reject_grpc_status"] = []string{"unavailable", "resource_exhausted", "permission_denied"}[rng.IntN(3)]
	}
	if rng.IntN(3) == 0 {
		doc["legacy_headers"] = []any{true, "x-ratelimit"}[rng.IntN(2)]
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
		g.shadowMode = true
	}
	g.reply(doc)
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
	rng        *rand.Rand
	rules      int
	shadowMode bool // the configuration's mode is shadow
}

func (g *configGen) oneOf(xs ...string) string { return xs[g.rng.IntN(len(xs))] }

func (g *configGen) rule() map[string]any {
	g.rules++
	r := map[string]any{"name": fmt.Sprintf("r%d", g.rules)}
	if match := g.match(); len(match) > 0 {
		r["match"] = match
	}
	g.bounds(r)
	if g.rng.IntN(3) == 0 {
		r["mode"] = g.oneOf("shadow", "shadow", "enforce")
		if r["mode"] == "shadow" && g.rng.IntN(3) == 0 {
			r["shadow_mark"] = false
		}
	}
	switch g.rng.IntN(8) {
	case 0:
		r["action"] = g.oneOf("exempt", "exempt", "unlimited")
		return r
	case 1:
		r["action"] = "deny"
		if g.rng.IntN(2) == 0 {
			r["deny_status"] = []int{403, 451}[g.rng.IntN(2)]
		}
		g.reply(r)
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
	if g.rng.IntN(6) == 0 {
		r["telemetry_identity"] = "clear"
	}
	algorithm, config := g.algorithm()
	if len(keys) == 1 && keys[0] == "all" {
		delete(config, "block_seconds") // one identity: a block would shut the rule's every request
	}
	r["algorithm"], r["algorithm_config"] = algorithm, config
	enforced := r["mode"] == "enforce" || r["mode"] == nil && !g.shadowMode
	if enforced && !(len(keys) == 1 && keys[0] == "all") && g.rng.IntN(5) == 0 {
		r["enforce_percent"] = []float64{0, 25, 50, 50, 75, 99.9}[g.rng.IntN(6)]
		if g.rng.IntN(3) == 0 {
			r["shadow_mark"] = false
		}
	}
	if len(keys) == 1 && keys[0] == "header:x-api-key" && g.rng.IntN(2) == 0 {
		_, override := g.algorithmOf(algorithm)
		delete(override, "cost_source")
		delete(override, "fixed_cost")
		delete(override, "default_cost")
		delete(override, "window_seconds")
		delete(override, "period_seconds")
		delete(override, "period")
		delete(override, "time_zone")
		delete(override, "max_per_period")
		delete(override, "max_request_seconds")
		if g.rng.IntN(2) == 0 { // the identity's own block, or the rule's
			delete(override, "block_seconds")
		}
		r["overrides"] = []any{map[string]any{"key": g.oneOf("key-1", "key-2"), "algorithm_config": override}}
	}
	if g.rng.IntN(6) == 0 {
		r["reject_status"] = []int{420, 503, 429}[g.rng.IntN(3)]
	}
	if name, ok := r["name"].(string); ok && g.rng.IntN(5) == 0 { // names of its own: unique, as the rule's
		r["limit_headers"] = []map[string]string{
			{"limit": "x-limit-" + name, "remaining": "x-remaining-" + name},
			{"remaining": "X-Left-" + name, "reset": "x-reset-" + name},
		}[g.rng.IntN(2)]
	}
	g.reply(r)
	return r
}

// bounds gives one rule in eight a time: ended, started or current at
// any clock from 2000 to 2200, so that whoever runs the configuration
// needs no particular clock to see the same rules apply; and one in
// twelve a weekly schedule, which depends on the clock the comparison
// gives both sides.
func (g *configGen) bounds(r map[string]any) {
	const y2000, y2200 = "2000-01-01T00:00:00Z", "2200-01-01T00:00:00Z"
	switch g.rng.IntN(24) {
	case 0:
		r["until"] = y2000
	case 1:
		r["from"] = y2000
	case 2:
		r["from"], r["until"] = y2000, y2200
	case 3, 4:
		r["schedule"] = g.schedule()
	}
}

// schedule is a random valid weekly schedule.
func (g *configGen) schedule() map[string]any {
	var days []string
	for _, d := range []string{"mon", "tue", "wed", "thu", "fri", "sat", "sun"} {
		if g.rng.IntN(2) == 0 {
			days = append(days, d)
		}
	}
	if len(days) == 0 {
		days = []string{"thu"} // 2026-01-01, the comparisons' usual start, is a Thursday
	}
	from := g.rng.IntN(24 * 60)
	until := (from + 1 + g.rng.IntN(24*60-1)) % (24 * 60) // never from itself; before it crosses midnight
	hhmm := func(m int) string { return fmt.Sprintf("%02d:%02d", m/60, m%60) }
	return map[string]any{"days": days, "from": hhmm(from), "until": hhmm(until),
		"time_zone": g.oneOf("UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata")}
}

// reply gives one object in five (the configuration, a limit or a deny
// rule) a custom rejection body, now and then with its content type.
func (g *configGen) reply(into map[string]any) {
	if g.rng.IntN(6) == 0 {
		into["reject_headers"] = []map[string]string{{}, {"x-local-rate-limit": "true"},
			{"X-Team": "payments", "x-trace-hint": "rate limited; see https://status.example.com"}}[g.rng.IntN(3)]
	}
	if g.rng.IntN(5) != 0 {
		return
	}
	into["reject_body"] = g.oneOf(`{"message":"API rate limit exceeded"}`, "Too many requests", "", "<h1>Slow down</h1>")
	if g.rng.IntN(2) == 0 {
		into["reject_content_type"] = g.oneOf("text/html; charset=utf-8", "application/problem+json")
	}
}

func (g *configGen) key() string {
	return g.oneOf("header:x-api-key", "header:x-api-key", "ip:address", "query:account", "jwt:sub", "header:x-plan", "host", "jwt:tier", "peer:principal", "route", "cluster", "connection",
		"metadata:envoy.filters.http.jwt_authn:jwt_payload.sub", "metadata:envoy.filters.http.jwt_authn:jwt_payload.tier",
		"metadata:envoy.filters.http.jwt_authn:[https://idp.example.com].groups.0", "cookie:sid", "all", "ip:network", "ip:network:16:128")
}

// match returns zero to two conditions.
func (g *configGen) match() map[string]any {
	m := map[string]any{}
	for range g.rng.IntN(3) {
		switch g.rng.IntN(14) {
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
		case 9:
			m["peer:principal"] = g.condition("spiffe://cluster.local/ns/shop/sa/web", "spiffe://cluster.local/ns/")
		case 10:
			m["route"] = g.condition("checkout", "catalog")
		case 11:
			m["metadata:envoy.filters.http.json_to_metadata:model"] = g.condition("gpt-4o", "o1")
		case 12:
			m["cookie:ab"] = g.condition("blue", "green")
		case 13:
			m["cluster"] = map[string]any{"suffix": g.oneOf("|payments.prod.svc.cluster.local", "|web.prod.svc.cluster.local")}
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
	return g.algorithmOf(g.oneOf("token_bucket", "token_bucket", "fixed_window", "sliding_window", "rolling_window", "quota", "concurrency"))
}

func (g *configGen) algorithmOf(algorithm string) (string, map[string]any) {
	c := map[string]any{}
	small := func() float64 { return []float64{2, 3, 5}[g.rng.IntN(3)] } // at least the highest default_cost
	switch algorithm {
	case "token_bucket":
		c["tokens_per_second"] = []float64{0.2, 0.5, 1, 2}[g.rng.IntN(4)] // at most the burst
		c["burst"] = small()
		if g.rng.IntN(4) == 0 { // refused identities blocked for a while
			c["block_seconds"] = []int{2, 5}[g.rng.IntN(2)]
		}
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
	case "concurrency": // no costs: a request holds one place
		c["limit"] = small()
		if g.rng.IntN(2) == 0 {
			c["max_request_seconds"] = 30
		}
		return algorithm, c
	}
	switch g.rng.IntN(6) {
	case 0:
		c["cost_source"] = "header:x-cost"
		c["default_cost"] = []float64{1, 2}[g.rng.IntN(2)]
	case 1:
		c["cost_source"] = "query:cost"
	case 2:
		c["fixed_cost"] = 2 // every request costs 2
	case 3:
		c["cost_source"] = "metadata:envoy.filters.http.json_to_metadata:n"
	}
	return algorithm, c
}

// unsignedJWT is an authorization value with a token of the claims, not
// signed (the filter reads claims, it does not verify them).
func unsignedJWT(claims string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return "Bearer " + enc([]byte(`{"alg":"none"}`)) + "." + enc([]byte(claims)) + ".sig"
}
