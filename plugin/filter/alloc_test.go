package filter_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"strconv"
	"strings"
	"sync"
	"testing"

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
// buffers (hostcalls_wasip1.go). The guest runs with a 1 MiB memory limit,
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
	cases := []struct {
		name   string
		config string
		reqs   []*wasmhost.Request
	}{
		{"header key", headerRule, keys},
		{"client address", ipRule, ips},
		{"exact storage", exactRule, keys},
		{"sliding window", windowRule, keys},
		{"calendar quota", quotaRule, keys},
		{"costs charged from the response", chargedRules, charged},
		{"rejected", `{"rules": [{"name": "deny", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket", "algorithm_config": {"rps": 1e-9, "burst": 0.5}}]}`, keys},
		{"jwt", `{"rules": [{"name": "plan", "limit_keys": ["jwt:sub"], "match": {"jwt:plan": "pro"}, "algorithm": "token_bucket", "algorithm_config": {"rps": 1e9, "burst": 1e9}}]}`, jwts},
		{"new identities, idle slots reused", slots("1e9"), fresh},
		{"new identities, overflowing", slots("1e-3"), fresh},
		{"telemetry on", strings.Replace(headerRule, "{", `{"telemetry": {"cluster": "sluice_admin", "token": "t"}, `, 1), keys},
		{"shadow", `{"mode": "shadow", "rules": [{"name": "deny", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket", "algorithm_config": {"rps": 1e-9, "burst": 0.5}}]}`, keys},
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
					if err != nil || (res.Rejected != (c.name == "rejected")) {
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
			if n, _ := h.Metric("sluice.rule.per-ip.overflowed"); strings.Contains(c.name, "overflowing") && n < 3000 {
				t.Errorf("overflowed %d times, want every request of the 3,000 to overflow", n)
			}
		})
	}
}
