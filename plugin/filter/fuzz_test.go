package filter_test

import (
	"context"
	"encoding/base64"
	"errors"
	"math/rand"
	"strings"
	"sync"
	"testing"

	"github.com/sluice-rl/sluice/plugin/wasmhost"
)

// A configuration that reads every kind of source, so arbitrary headers
// reach every parser: keys, matches (every operator), costs, XFF, JWT,
// query, overrides, actions, a rule enforced on half of its identities.
const fuzzConfig = `{"xff_trusted_hops": 2, "mode": "enforce", "policies": [
  {"name": "a", "rules": [
    {"name": "jwt", "limit_keys": ["jwt:sub", "header:x-api-key"], "match": {"jwt:plan": "gold"}, "algorithm": "token_bucket",
     "algorithm_config": {"rps": 5, "burst": 10, "cost_source": "header:x-cost"}},
    {"name": "mix", "limit_keys": ["header:x-api-key", "query:tenant", "path", "method", "host"], "match": {"path_prefix": "/"},
     "algorithm": "token_bucket", "algorithm_config": {"rps": 5, "burst": 10, "cost_source": "query:cost", "default_cost": 2}}
  ]},
  {"name": "b", "rules": [
    {"name": "ip", "mode": "shadow", "limit_keys": ["ip:address"], "algorithm": "token_bucket",
     "algorithm_config": {"rps": 1, "burst": 3}}
  ]},
  {"name": "metadata", "rules": [
    {"name": "meta", "limit_keys": ["metadata:ns:user", "metadata:ns:[a.b].n.0"], "match": {"metadata:ns:tier": {"not": {"in": ["2", "true"]}}},
     "algorithm": "token_bucket", "algorithm_config": {"rps": 5, "burst": 10, "cost_source": "metadata:ns:cost"}}
  ]},
  {"name": "windows", "rules": [
    {"name": "rolling", "limit_keys": ["header:x-api-key"], "match": {"method": "POST"}, "algorithm": "rolling_window",
     "algorithm_config": {"limit": 20, "window_seconds": 600, "period_seconds": 60, "max_per_period": 5, "cost_source": "header:x-cost"}},
    {"name": "sliding", "limit_keys": ["query:tenant", "path"], "algorithm": "sliding_window",
     "algorithm_config": {"limit": 10, "window_seconds": 60, "cost_source": "query:cost", "default_cost": 2}}
  ]},
  {"name": "connections", "rules": [
    {"name": "conn", "limit_keys": ["connection", "header:x-api-key"], "algorithm": "token_bucket",
     "algorithm_config": {"rps": 1, "burst": 2, "block_seconds": 30}}
  ]},
  {"name": "fixed", "rules": [
    {"name": "fixed", "max_keys": 3, "limit_keys": ["jwt:sub"], "algorithm": "fixed_window", "algorithm_config": {"limit": 4, "window_seconds": 10}}
  ]},
  {"name": "matchers", "rules": [
    {"name": "exempt", "action": "exempt", "match": {"header:x-api-key": {"regex": "(?i)^exempt-[0-9]+$"}}},
    {"name": "deny", "action": "deny", "deny_status": 403, "match": {"header:x-api-key": {"in": ["deny-1", "deny-2"]}}},
    {"name": "ops", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket", "algorithm_config": {"rps": 5, "burst": 10},
     "match": {"path": {"regex": "^/users/[0-9]+$"}, "method": {"not": {"in": ["GET", "HEAD"]}}, "ip:address": {"cidr": ["10.0.0.0/8", "2001:db8::/32"]}}},
    {"name": "hosts", "limit_keys": ["host"], "match": {"host": {"suffix": ".example.com"}, "header:x-cost": {"present": true}},
     "algorithm": "quota", "algorithm_config": {"limit": 100, "period": "day", "time_zone": "Europe/Berlin"},
     "overrides": [{"key": "api.example.com", "algorithm_config": {"limit": 5}}]},
    {"name": "plans", "enforce_percent": 50, "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket", "algorithm_config": {"rps": 1, "burst": 2},
     "overrides": [{"key": "k1", "algorithm_config": {"rps": 10, "burst": 20}}]}
  ]}
]}`

var (
	fuzzOnce sync.Once
	fuzzHost *wasmhost.Host
	fuzzErr  error
)

// sharedFuzzHost is one host per test process: a fuzz input must be cheap.
func sharedFuzzHost(t testing.TB) *wasmhost.Host {
	wasm := pluginWasm(t)
	fuzzOnce.Do(func() {
		fuzzHost, fuzzErr = wasmhost.New(context.Background(), wasmhost.Config{
			Wasm:         wasm,
			PluginConfig: []byte(fuzzConfig),
			VMs:          1,
			Clock:        wasmhost.NewManualClock(t0),
		})
	})
	if fuzzErr != nil {
		t.Fatalf("wasmhost.New: %v", fuzzErr)
	}
	return fuzzHost
}

// sendArbitrary sends one request and fails on any error (a trap above
// all; the host does not validate headers) or a recovered panic.
func sendArbitrary(t testing.TB, h *wasmhost.Host, r *wasmhost.Request) *wasmhost.Result {
	t.Helper()
	before, _ := h.Metric("sluice.panics_recovered")
	res, err := h.VM(0).HTTP(context.Background(), r)
	var trap *wasmhost.TrapError
	if errors.As(err, &trap) {
		t.Fatalf("guest trapped in %s: %v\nrequest: %.500q", trap.Callback, err, r.Headers)
	}
	if err != nil {
		t.Fatalf("HTTP: %v", err)
	}
	if res.Rejected && res.Status != 429 && res.Status != 403 { // 403: the deny rule
		t.Fatalf("rejected with status %d", res.Status)
	}
	if after, _ := h.Metric("sluice.panics_recovered"); after != before {
		t.Fatalf("the filter panicked (recovered) on request %.500q; logs: %v", r.Headers, h.LogsAtLeast(wasmhost.LogLevelWarn))
	}
	return res
}

func FuzzRequestHeaders(f *testing.F) {
	f.Add("x-api-key", "k", "/x?tenant=a&cost=3", "Bearer a.eyJzdWIiOiJ1IiwicGxhbiI6ImdvbGQifQ.s", "1.1.1.1, 2.2.2.2", "5")
	f.Add("x-api-key", strings.Repeat("\xff", 5000), "/%zz?%", "Bearer ..", ",,,,", "NaN")
	f.Add("", "", "", "bearer x.!.y", "[::1]:80, [", "-1e308")
	f.Add("x-cost", "1e999", "?cost=%00%ff&tenant=|\\#", "Bearer "+strings.Repeat("A", 20000), "x", "0x10")
	// Build and start outside the fuzz function: the first input must not
	// pay for compiling the module (the fuzzer kills inputs over 10 s).
	h := sharedFuzzHost(f)
	f.Fuzz(func(t *testing.T, name, value, path, authz, xff, cost string) {
		r := &wasmhost.Request{
			Headers: []wasmhost.Header{
				{":path", path}, {":method", value}, {":authority", value},
				{strings.ToLower(name), value}, {"x-api-key", value},
				{"authorization", authz}, {"x-forwarded-for", xff}, {"x-cost", cost},
			},
			Properties: wasmhost.Properties{"source.address": []byte(value), "connection.id": []byte(name),
				"metadata.filter_metadata.ns.user": []byte(value), "metadata.filter_metadata.ns.a.b.n.0": []byte(name),
				"metadata.filter_metadata.ns.tier": []byte(cost), "metadata.filter_metadata.ns.cost": []byte(cost)},
		}
		sendArbitrary(t, h, r)
	})
}

// TestRandomizedHeadersNoTrap is the bounded randomized counterpart of
// FuzzRequestHeaders, run in every test run: binary, huge and numerous
// headers, random JWTs and paths.
func TestRandomizedHeadersNoTrap(t *testing.T) {
	h := sharedFuzzHost(t)
	rng := rand.New(rand.NewSource(1))
	n := 1500
	if testing.Short() {
		n = 200
	}
	randBytes := func(max int) string {
		b := make([]byte, rng.Intn(max+1))
		for i := range b {
			b[i] = byte(rng.Intn(256))
		}
		return string(b)
	}
	pick := func(xs ...string) string { return xs[rng.Intn(len(xs))] }
	denied := 0
	for i := 0; i < n; i++ {
		var hs []wasmhost.Header
		hs = append(hs, wasmhost.Header{":path", pick("/", "/api/x?tenant=t&cost="+pick("1", "0", "-5", "NaN", "1e400", "%31"), "/"+randBytes(50), "?"+randBytes(30), strings.Repeat("/a", 3000))})
		hs = append(hs, wasmhost.Header{":method", pick("GET", "POST", randBytes(10))})
		hs = append(hs, wasmhost.Header{":authority", pick("api.example.com", "API.EXAMPLE.COM:443", randBytes(20))})
		switch rng.Intn(5) {
		case 0:
			hs = append(hs, wasmhost.Header{"x-api-key", randBytes(20)})
		case 1:
			hs = append(hs, wasmhost.Header{"x-api-key", strings.Repeat(pick("k", "|", "\\", "#", "\xff"), 1+rng.Intn(12000))})
		case 2:
			hs = append(hs, wasmhost.Header{"x-api-key", pick("k1", "k2", "k3")})
		case 3:
			hs = append(hs, wasmhost.Header{"x-api-key", pick("exempt-1", "EXEMPT-22", "deny-1", "deny-2")})
		}
		if rng.Intn(2) == 0 {
			payload := pick(`{"sub":"u","plan":"gold"}`, `{"sub":1e999,"plan":"gold"}`, `{"plan":"gold","sub":{"a":[1,2]}}`, `null`, `{`, randBytes(40))
			seg := base64.RawURLEncoding.EncodeToString([]byte(payload))
			hs = append(hs, wasmhost.Header{"authorization", pick("Bearer h."+seg+".s", "Bearer "+randBytes(60), "bearer "+seg, "Bearer h."+seg+"=.s")})
		}
		if rng.Intn(2) == 0 {
			hs = append(hs, wasmhost.Header{"x-forwarded-for", pick("1.1.1.1, 2.2.2.2", randBytes(40), strings.Repeat(",", rng.Intn(100)), "[::1]:1, [2001:db8::1]")})
		}
		if rng.Intn(3) == 0 {
			hs = append(hs, wasmhost.Header{"x-cost", pick("1", "0.0000001", "-1", "NaN", "Inf", "1e9", "1e10", randBytes(10))})
		}
		for j := rng.Intn(4) * rng.Intn(40); j > 0; j-- {
			hs = append(hs, wasmhost.Header{"x-extra-" + pick("a", "b", "c"), randBytes(100)})
		}
		props := wasmhost.Properties{"source.address": []byte(pick("10.0.0.1:1", "[::1]:2", "", randBytes(30)))}
		if rng.Intn(2) == 0 { // dynamic metadata: text, Envoy's binary numbers and bools, junk
			for _, k := range []string{"user", "a.b.n.0", "tier", "cost"} {
				props["metadata.filter_metadata.ns."+k] = []byte(pick("u1", "2", "\x01", "\x00\x00\x00\x00\x00\x00\x00\x40", "\xff\xff\xff\xff\xff\xff\xff\xff", randBytes(9), randBytes(300)))
			}
		}
		if rng.Intn(10) == 0 {
			delete(props, "source.address")
		}
		if rng.Intn(2) == 0 { // a connection's number: Envoy's 8 bytes, or any other length
			props["connection.id"] = []byte(pick("\x07\x00\x00\x00\x00\x00\x00\x00", "\xff\xff\xff\xff\xff\xff\xff\xff", "", "\x01", randBytes(12)))
		}
		if res := sendArbitrary(t, h, &wasmhost.Request{Headers: hs, Properties: props}); res.Status == 403 {
			denied++
		}
	}
	if denied == 0 { // the configuration's actions were reached
		t.Error("no request was denied; the deny rule never matched")
	}
}
