package filter_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/sluice-rl/sluice/plugin/bench"
	"github.com/sluice-rl/sluice/plugin/wasmhost"
)

// lockedBuffer collects the guest's stderr (the host may echo from any
// goroutine that drives a VM).
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Count(l.b.Bytes(), []byte(s))
}

// TestRequestPathLeavesTheCollectorIdle: the common request paths allocate
// nothing in the guest, so the Go collector, whose mark phases slow the
// requests they overlap (every seventh request by ~25 µs, measured), does not
// run. What the host returns (header values, the client address, bucket
// values) lands in the plugin's malloc scratch and is copied into reused
// buffers (hostcalls_direct.go). The guest runs with a 1 MiB memory limit,
// which it is always over, so any allocation starts a collection; with
// gcstoptheworld=1 each one completes at once (none can straddle the
// warm-up and the measured requests) and gctrace=1 prints one line for it.
// With the scratch disabled, the paths below run about two collections per
// request.
func TestRequestPathLeavesTheCollectorIdle(t *testing.T) {
	const headerRule = `{"rules": [
	  {"name": "per-key", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
	   "algorithm_config": {"rps": 1e6, "burst": 1e9}}]}`
	const ipRule = `{"rules": [
	  {"name": "per-ip", "limit_keys": ["ip:address"], "algorithm": "token_bucket",
	   "algorithm_config": {"rps": 1e6, "burst": 1e9}}]}`
	const exactRule = `{"rules": [
	  {"name": "exact", "max_keys": 0, "limit_keys": ["header:x-api-key", "method"], "algorithm": "token_bucket",
	   "algorithm_config": {"rps": 1e6, "burst": 1e9}}]}`
	const windowRule = `{"legacy_headers": false, "rules": [
	  {"name": "win", "limit_keys": ["header:x-api-key"], "algorithm": "sliding_window",
	   "algorithm_config": {"limit": 1e9, "window_seconds": 60}}]}`
	// Fifty identities in turn: every request reads its own bucket.
	keys := make([]*wasmhost.Request, 50)
	ips := make([]*wasmhost.Request, 50)
	for i := range keys {
		keys[i] = rq("x-api-key", "client-"+strconv.Itoa(i))
		ips[i] = rq("@ip", "10.1.0."+strconv.Itoa(i)+":443")
	}
	jwts := make([]*wasmhost.Request, 50)
	for i := range jwts {
		jwts[i] = rq("authorization", "Bearer eyJhbGciOiJub25lIn0."+base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"u`+strconv.Itoa(i)+`","plan":"pro"}`))+".")
	}
	// A new client address every request, into 64 slots: claims of idle
	// slots (a high rate refills them) or overflow decisions (a rate that
	// never refills: every way stays active).
	fresh := make([]*wasmhost.Request, 10500)
	for i := range fresh {
		fresh[i] = rq("@ip", "10."+strconv.Itoa(i>>16)+"."+strconv.Itoa(i>>8&255)+"."+strconv.Itoa(i&255)+":443")
	}
	// Responses reporting their cost in a header or a trailer (charged in
	// the response phase), or not at all (default_cost).
	charged := make([]*wasmhost.Request, 50)
	for i := range charged {
		r := *keys[i]
		switch i % 3 {
		case 0:
			r.ResponseHeaders = []wasmhost.Header{{":status", "200"}, {"x-tokens-used", strconv.Itoa(i)}}
		case 1:
			r.ResponseTrailers = []wasmhost.Header{{"x-tokens-used", strconv.Itoa(i)}}
		}
		charged[i] = &r
	}
	const quotaRule = `{"rules": [
	  {"name": "monthly", "limit_keys": ["header:x-api-key"], "algorithm": "quota",
	   "algorithm_config": {"limit": 1e12, "period": "month", "time_zone": "Europe/Berlin"}}]}`
	const chargedRules = `{"policies": [
	  {"name": "a", "rules": [{"name": "tokens", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
	   "algorithm_config": {"rps": 1e9, "burst": 1e12, "cost_source": "response_header:x-tokens-used"}}]},
	  {"name": "b", "rules": [{"name": "daily", "limit_keys": ["header:x-api-key"], "algorithm": "quota",
	   "algorithm_config": {"limit": 1e12, "period": "day", "cost_source": "response_trailer:x-tokens-used"}}]}]}`
	slots := func(rate string) string {
		return `{"rules": [{"name": "per-ip", "max_keys": 64, "limit_keys": ["ip:address"], "algorithm": "token_bucket",
		  "algorithm_config": {"rps": ` + rate + `, "burst": 1e9}}]}`
	}
	// Regex, CIDR, in and negated conditions on every request; exempt
	// and deny rules; a rule with overrides, hit and missed (100 of them:
	// the lookup is one hash table whatever their number, and configuring
	// 10,000 under this test's memory limit collects on every allocation).
	const conditionsRule = `{"rules": [
	  {"name": "health", "action": "exempt", "match": {"path": {"in": ["/healthz", "/readyz"]}}},
	  {"name": "blocked", "action": "deny", "match": {"header:user-agent": {"regex": "(?i)badbot"}}},
	  {"name": "per-key", "limit_keys": ["header:x-api-key"],
	   "match": {"path": {"regex": "^/[a-z]*$"}, "ip:address": {"cidr": ["10.0.0.0/8", "2001:db8::/32"]}, "header:x-debug": {"not": {"present": true}}},
	   "algorithm": "token_bucket", "algorithm_config": {"rps": 1e6, "burst": 1e9}}]}`
	var ovs strings.Builder
	for i := range 100 {
		ovs.WriteString(`,{"key": "client-` + strconv.Itoa(i*2) + `", "algorithm_config": {"burst": ` + strconv.Itoa(1e8+i%5) + `}}`)
	}
	overridesRule := `{"rules": [{"name": "per-key", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
	  "algorithm_config": {"rps": 1e6, "burst": 1e9}, "overrides": [` + ovs.String()[1:] + `]}]}`
	health := make([]*wasmhost.Request, 50)
	denied := make([]*wasmhost.Request, 50)
	for i := range health {
		health[i] = rq(":path", "/healthz", "x-api-key", "client-"+strconv.Itoa(i))
		denied[i] = rq("user-agent", "BadBot/"+strconv.Itoa(i))
	}
	// A browser's request carrying the trial's header with another value
	// (a trial of plan tiers): the configuration reads three headers, two
	// of them present, so requests are read whole.
	planned := make([]*wasmhost.Request, 50)
	for i := range planned {
		planned[i] = &wasmhost.Request{Headers: append(bench.BrowserHeaders("client-"+strconv.Itoa(i), 0), wasmhost.Header{"x-plan", "free"})}
	}
	cases := []struct {
		name     string
		config   string
		reqs     []*wasmhost.Request
		rejected bool
	}{
		{"regex, cidr, in and not conditions", conditionsRule, keys, false},
		{"exempt", conditionsRule, health, false},
		{"deny", conditionsRule, denied, true},
		{"overrides, half of the keys listed", overridesRule, keys, false},
		{"header key", headerRule, keys, false},
		{"client address", ipRule, ips, false},
		{"exact storage", exactRule, keys, false},
		{"sliding window", windowRule, keys, false},
		{"calendar quota", quotaRule, keys, false},
		{"costs charged from the response", chargedRules, charged, false},
		{"costs charged by the response's status", `{"rules": [{"name": "failures", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
		  "algorithm_config": {"rps": 1e9, "burst": 1e12, "cost_source": "response_status:200,5xx"}}]}`, keys, false},
		{"requests in flight (a place taken, then given back)", `{"rules": [{"name": "inflight", "limit_keys": ["header:x-api-key"], "algorithm": "concurrency",
		  "algorithm_config": {"limit": 100}}]}`, keys, false},
		{"rejected", `{"rules": [{"name": "deny", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket", "algorithm_config": {"rps": 1e-9, "burst": 0.5}}]}`, keys, true},
		{"a rule's own fields (limit_headers)", strings.Replace(headerRule, `"name": "per-key",`, `"name": "per-key", "limit_headers": {"limit": "x-limit-minute", "remaining": "x-remaining-minute"},`, 1), keys, false},
		{"rejected, with headers of your own", `{"reject_headers": {"x-local-rate-limit": "true", "x-team": "payments"}, "rules": [{"name": "deny", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket", "algorithm_config": {"rps": 1e-9, "burst": 0.5}}]}`, keys, true},
		{"jwt", `{"rules": [{"name": "plan", "limit_keys": ["jwt:sub"], "match": {"jwt:plan": "pro"}, "algorithm": "token_bucket", "algorithm_config": {"rps": 1e9, "burst": 1e9}}]}`, jwts, false},
		{"new identities, idle slots reused", slots("1e9"), fresh, false},
		{"new identities, overflowing", slots("1e-3"), fresh, false},
		{"telemetry on", strings.Replace(headerRule, "{", `{"telemetry": {"cluster": "sluice_admin", "token": "t"}, `, 1), keys, false},
		{"shadow", `{"mode": "shadow", "rules": [{"name": "deny", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket", "algorithm_config": {"rps": 1e-9, "burst": 0.5}}]}`, keys, false},
		{"shadow trial, unmarked", `{"policies": [{"name": "current", "rules": [
		  {"name": "per-key", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket", "algorithm_config": {"rps": 1e6, "burst": 1e9}}]},
		 {"name": "trial", "rules": [
		  {"name": "trial-gold", "mode": "shadow", "shadow_mark": false, "match": {"header:x-plan": "gold"}, "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket", "algorithm_config": {"rps": 1, "burst": 1}},
		  {"name": "trial-deny", "mode": "shadow", "shadow_mark": false, "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket", "algorithm_config": {"rps": 1e-9, "burst": 0.5}}]}]}`, keys, false},
		{"shadow trial with an exempt rule", `{"policies": [{"name": "current", "rules": [
		  {"name": "per-key", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket", "algorithm_config": {"rps": 1e6, "burst": 1e9}}]},
		 {"name": "trial", "rules": [
		  {"name": "trial-deny", "mode": "shadow", "shadow_mark": false, "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket", "algorithm_config": {"rps": 1e-9, "burst": 0.5}}]},
		 {"name": "trial-gate", "rules": [{"name": "trial-exempt", "mode": "shadow", "action": "exempt"}]},
		 {"name": "trial-after", "rules": [
		  {"name": "trial-deny-after", "mode": "shadow", "shadow_mark": false, "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket", "algorithm_config": {"rps": 1e-9, "burst": 0.5}}]}]}`, keys, false},
		{"shadow trial, its header present with another value", bench.TrialConfig(1, "header:x-plan"), planned, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			stderr := &lockedBuffer{}
			h, err := wasmhost.New(context.Background(), wasmhost.Config{
				Wasm: pluginWasm(t), PluginConfig: []byte(c.config), VMs: 1,
				Clock: wasmhost.NewManualClock(t0),
				Env: map[string]string{"GOGC": "off", "GOMEMLIMIT": "1MiB",
					"GODEBUG": "gctrace=1,gcstoptheworld=1"},
				LogWriter: stderr,
			})
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close(context.Background())
			send := func(n int) {
				for i := 0; i < n; i++ {
					res, err := h.VM(0).HTTP(context.Background(), c.reqs[i%len(c.reqs)])
					if err != nil || res.Rejected != c.rejected {
						t.Fatalf("request %d: err %v, rejected %v", i, err, res.Rejected)
					}
				}
			}
			send(500) // first use: buckets created, buffers grown
			before := stderr.count("MB goal")
			send(3000)
			if ran := stderr.count("MB goal") - before; ran != 0 {
				t.Errorf("the guest's collector ran %d times in 3,000 requests: the request path allocates", ran)
			}
			for name, want := range map[string]uint64{
				"regex, cidr, in and not conditions": 3500, "exempt": 3500, "deny": 3500, "overrides, half of the keys listed": 1750,
				"shadow trial with an exempt rule": 3500,
			} {
				metric := map[string]string{"exempt": "sluice.rule.health.exempted", "deny": "sluice.rule.blocked.denied",
					"overrides, half of the keys listed": "sluice.rule.per-key.overridden",
					"shadow trial with an exempt rule":   "sluice.rule.trial-exempt.exempted"}[name]
				if metric == "" {
					metric = "sluice.rule.per-key.allowed"
				}
				if n, _ := h.Metric(metric); name == c.name && n != want {
					t.Errorf("%s = %d, want %d: the case does not exercise what it names", metric, n, want)
				}
			}
			if n, _ := h.Metric("sluice.rule.per-ip.overflowed"); strings.Contains(c.name, "overflowing") && n < 3000 {
				t.Errorf("overflowed %d times, want every request of the 3,000 to overflow", n)
			}
		})
	}
}
