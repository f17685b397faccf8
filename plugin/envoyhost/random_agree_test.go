package envoyhost_test

import (
	"encoding/base64"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/plugin/envoyhost"
	"github.com/sluice-rl/sluice/plugin/scenario"
)

// agreeConfig reads every kind of source and has every match operator,
// overrides, bounded storage (max_keys), a quota, windows, shadow rules,
// costs reported by the
// response (header and trailer) and the exempt and deny actions, so that
// random requests take every path of a decision.
const agreeConfig = `{"xff_trusted_hops": 1, "policies": [
  {"name": "actions", "rules": [
    {"name": "exempt", "action": "exempt", "match": {"header:x-api-key": {"regex": "(?i)^exempt-[0-9]+$"}}},
    {"name": "deny", "action": "deny", "deny_status": 403, "match": {"header:x-api-key": {"in": ["deny-1", "deny-2"]}}},
    {"name": "office", "limit_keys": ["ip:address"], "match": {"ip:address": {"cidr": ["10.0.0.0/8", "2001:db8::/32"]}},
     "algorithm": "token_bucket", "algorithm_config": {"rps": 0.5, "burst": 2}}
  ]},
  {"name": "plans", "rules": [
    {"name": "jwt", "limit_keys": ["jwt:sub"], "match": {"jwt:plan": "gold"}, "algorithm": "token_bucket",
     "algorithm_config": {"rps": 1, "burst": 3, "cost_source": "header:x-cost"}},
    {"name": "keys", "max_keys": 4, "limit_keys": ["header:x-api-key"], "match": {"path": {"not": {"prefix": "/internal/"}}},
     "algorithm": "token_bucket", "algorithm_config": {"rps": 0.1, "burst": 2},
     "overrides": [{"key": "k1", "algorithm_config": {"rps": 5, "burst": 6}}]}
  ]},
  {"name": "quotas", "rules": [
    {"name": "hosts", "limit_keys": ["host"], "match": {"host": {"suffix": ".example.com"}},
     "algorithm": "quota", "algorithm_config": {"limit": 20, "period": "day", "time_zone": "Europe/Berlin"},
     "overrides": [{"key": "api.example.com", "algorithm_config": {"limit": 8}}]}
  ]},
  {"name": "costs", "rules": [
    {"name": "tokens", "limit_keys": ["header:x-api-key"], "match": {"method": "POST"}, "algorithm": "token_bucket",
     "algorithm_config": {"rps": 50, "burst": 400, "cost_source": "response_header:x-tokens-used", "default_cost": 30, "max_debt": 500}},
    {"name": "rows", "limit_keys": ["header:x-api-key"], "match": {"method": "PUT"}, "algorithm": "quota",
     "algorithm_config": {"limit": 1000, "period": "hour", "cost_source": "response_trailer:x-rows", "default_cost": 10, "max_debt": 200}},
    {"name": "failures", "limit_keys": ["header:x-api-key"], "match": {"method": "DELETE"}, "algorithm": "token_bucket",
     "algorithm_config": {"rps": 0.01, "burst": 3, "cost_source": "response_status:404,5xx"}},
    {"name": "grpcfail", "limit_keys": ["header:x-api-key"], "match": {"method": "PATCH"}, "algorithm": "quota",
     "algorithm_config": {"limit": 3, "period": "hour", "cost_source": "response_grpc_status:unauthenticated,internal"}}
  ]},
  {"name": "shadow", "rules": [
    {"name": "tenants", "mode": "shadow", "limit_keys": ["query:tenant", "method"], "match": {"header:x-plan": {"present": true}},
     "algorithm": "sliding_window", "algorithm_config": {"limit": 3, "window_seconds": 60, "cost_source": "query:cost", "default_cost": 1}}
  ]}
]}`

// randomAgreeRequest draws a request from a small population (so buckets
// run dry) with odd values among them: high bytes, long values, malformed
// JWTs, costs and forwarded addresses. No control bytes: Envoy's codecs
// refuse them before any filter runs.
func randomAgreeRequest(rng *rand.Rand) scenario.Request {
	pick := func(xs ...string) string { return xs[rng.Intn(len(xs))] }
	text := func(max int) string {
		b := make([]byte, rng.Intn(max+1))
		for i := range b {
			b[i] = byte(0x20 + rng.Intn(0xff-0x20))
			if b[i] == 0x7f {
				b[i] = 'x'
			}
		}
		return string(b)
	}
	hs := []scenario.Header{
		{":path", pick("/", "/a?tenant=t1&cost=2", "/internal/x", "/b?tenant="+text(8)+"&cost="+pick("1", "-1", "NaN", "1e400"), "/"+text(30))},
		{":method", pick("GET", "POST", "PUT", "DELETE", "PATCH")},
		{":authority", pick("api.example.com", "www.example.com", "other.test", text(12))},
	}
	if rng.Intn(5) > 0 {
		hs = append(hs, scenario.Header{"x-api-key", pick("k1", "k2", "k3", "exempt-7", "EXEMPT-12", "deny-1", "deny-2", text(20), strings.Repeat("k", 3000))})
	}
	if rng.Intn(2) == 0 {
		claims := pick(`{"sub":"u1","plan":"gold"}`, `{"sub":"u2","plan":"gold"}`, `{"sub":1,"plan":"gold"}`, `{"plan":"gold"}`, `{`, text(20))
		seg := base64.RawURLEncoding.EncodeToString([]byte(claims))
		hs = append(hs, scenario.Header{"authorization", pick("Bearer h."+seg+".s", "bearer "+seg, "Bearer "+text(30))})
	}
	if rng.Intn(3) == 0 {
		hs = append(hs, scenario.Header{"x-cost", pick("1", "2", "0", "-3", "NaN", "1e9", text(6))})
	}
	if rng.Intn(3) == 0 {
		hs = append(hs, scenario.Header{"x-plan", pick("free", "")})
	}
	if rng.Intn(4) == 0 {
		hs = append(hs, scenario.Header{"content-type", pick("application/grpc", "application/grpc+proto", "application/grpc-web", "application/json")})
	}
	if rng.Intn(2) == 0 {
		hs = append(hs, scenario.Header{"x-forwarded-for", pick("203.0.113.9", "10.1.2.3, 198.51.100.7", "[2001:db8::5]:443", text(16))})
	}
	for j := rng.Intn(3) * rng.Intn(30); j > 0; j-- {
		hs = append(hs, scenario.Header{"x-extra-" + pick("a", "b"), text(60)})
	}
	req := scenario.Request{Headers: hs, Properties: map[string][]byte{
		"source.address": []byte(pick("10.0.0.1:1000", "192.0.2.1:2000", "[2001:db8::9]:3000", "[::1]:4000")),
	}}
	cost := func() string { return pick("120", "0", "12.5", " 7 ", "-1", "abc", "1e12", text(5)) }
	req.ResponseHeaders = []scenario.Header{{":status", pick("200", "200", "500", "404")}}
	if rng.Intn(2) == 0 {
		req.ResponseHeaders = append(req.ResponseHeaders, scenario.Header{"x-tokens-used", cost()})
	}
	if rng.Intn(2) == 0 {
		req.ResponseTrailers = []scenario.Header{{"x-rows", cost()}}
	}
	if code := pick("0", "16", "13", "7", "1x", ""); rng.Intn(2) == 0 { // a gRPC status, trailers-only
		req.ResponseHeaders = append(req.ResponseHeaders, scenario.Header{"grpc-status", code})
	} else if rng.Intn(2) == 0 { // or in the trailers
		req.ResponseTrailers = append(req.ResponseTrailers, scenario.Header{"grpc-status", code})
	}
	return req
}

// startBoth starts Envoy's host library in mode and the wazero host.
func startBoth(t *testing.T, mode envoyhost.Mode, opts scenario.Options) [2]scenario.Host {
	var hosts [2]scenario.Host
	for i, start := range []scenario.Starter{envoyhost.Starter(mode), scenario.Wasmhost()} {
		h, err := start(t, opts)
		if err != nil {
			t.Fatal(err)
		}
		hosts[i] = h
	}
	return hosts
}

// TestRandomRequestsAgreeWithWasmhost sends the same random requests, with
// the clock moving between them, to the compiled filter in Envoy's wasm
// host and in the wazero host, each request to one of two worker VMs
// sharing the buckets, and requires the same answer each time: status,
// local body, the headers sent downstream and upstream.
func TestRandomRequestsAgreeWithWasmhost(t *testing.T) {
	n := 1500
	if testing.Short() {
		n = 200
	}
	for _, mode := range envoyhost.Modes {
		t.Run(string(mode), func(t *testing.T) {
			opts := scenario.Options{WasmPath: plugin(t), Config: []byte(agreeConfig), Start: t0, VMs: 2}
			hosts := startBoth(t, mode, opts)
			rng := rand.New(rand.NewSource(agreeSeed(t, 1)))
			statuses := map[int]int{}
			for i := range n {
				req, vm := randomAgreeRequest(rng), rng.Intn(2)
				var got [2]string
				for k, h := range hosts {
					res, err := h.HTTP(vm, req)
					if err != nil {
						t.Fatalf("request %d on %s: %v\nheaders: %.300q", i, h.Name(), err, req.Headers)
					}
					got[k] = answerText(res)
					if k == 0 {
						statuses[res.Status]++
					}
				}
				if got[0] != got[1] {
					t.Fatalf("request %d on VM %d: the hosts differ\nheaders: %.500q\n%s:\n%s\n%s:\n%s", i, vm, req.Headers, hosts[0].Name(), got[0], hosts[1].Name(), got[1])
				}
				if d := time.Duration(rng.Intn(1500)) * time.Millisecond; rng.Intn(4) == 0 {
					for _, h := range hosts {
						h.Advance(d)
					}
				}
			}
			t.Logf("statuses %v", statuses)
			// Every kind of decision was taken, as often on both hosts.
			for _, name := range []string{"sluice.rule.tokens.response_cost_charged", "sluice.rule.rows.response_cost_charged",
				"sluice.rule.tokens.response_cost_invalid", "sluice.rule.rows.response_cost_default",
				"sluice.rule.failures.response_cost_charged", "sluice.rule.failures.rejected",
				"sluice.rule.grpcfail.response_cost_charged", "sluice.rule.grpcfail.rejected",
				"sluice.rule.keys.overflowed", "sluice.rule.keys.overridden", "sluice.rule.hosts.overridden",
				"sluice.rule.exempt.exempted", "sluice.rule.deny.denied", "sluice.rule.tenants.shadow_rejected",
				"sluice.rule.jwt.allowed", "sluice.rule.office.rejected", "sluice.rule.office.allowed"} {
				e, _ := hosts[0].Metric(name)
				w, _ := hosts[1].Metric(name)
				if e != w || e == 0 {
					t.Errorf("%s: %d in %s, %d in %s; want the same, above 0", name, e, hosts[0].Name(), w, hosts[1].Name())
				}
			}
			for _, want := range []int{200, 403, 429} { // the requests took each kind of decision
				if statuses[want] == 0 {
					t.Errorf("no request answered %d (statuses %v): the random requests miss a path", want, statuses)
				}
			}
		})
	}
}
