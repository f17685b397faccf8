package filter_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/plugin/wasmhost"
	telfmt "github.com/sluice-rl/sluice/shared/telemetry"
)

// telemetryConfig: "apikey" enforces 3 requests per API key (masked in
// telemetry), "user" shows its identity in clear, "perip" is a shadow rule.
const telemetryConfig = `{
  "telemetry": {"cluster": "sluice_admin", "token": "tel-s3cret", "interval_ms": 1000, "top_n": 10},
  "policies": [
    {"name": "keys", "rules": [{"name": "apikey", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
      "algorithm_config": {"tokens_per_second": 1, "burst": 3}}]},
    {"name": "users", "rules": [{"name": "user", "limit_keys": ["header:x-user", "ip:address"], "algorithm": "token_bucket",
      "algorithm_config": {"tokens_per_second": 1, "burst": 100}, "telemetry_identity": "clear"}]},
    {"name": "ips", "rules": [{"name": "perip", "limit_keys": ["ip:address"], "mode": "shadow", "algorithm": "token_bucket",
      "algorithm_config": {"tokens_per_second": 1, "burst": 4}}]}
  ]
}`

// report is the telemetry report body as the admin's strict decoder
// (shared/telemetry) reads it.
type report = telfmt.Report

func startTelemetry(t *testing.T, config string, vms int) *fixture {
	t.Helper()
	f, err := tryStartTelemetry(t, config, vms, nil)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// tryStartTelemetry starts the filter with env as the VMs' environment.
func tryStartTelemetry(t *testing.T, config string, vms int, env map[string]string) (*fixture, error) {
	t.Helper()
	clock := wasmhost.NewManualClock(t0)
	h, err := wasmhost.New(context.Background(), wasmhost.Config{
		Wasm:         pluginWasm(t),
		PluginConfig: []byte(config),
		VMs:          vms,
		Clock:        clock,
		NodeID:       "envoy-7",
		Clusters:     []string{"sluice_admin"},
		Env:          env,
	})
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = h.Close(context.Background()) })
	return &fixture{t: t, h: h, clock: clock}, nil
}

// tick advances the clock by d and runs due ticks; it returns the pending
// calls by VM, failing if a VM has more than one.
func (f *fixture) tick(d time.Duration) map[int]*wasmhost.HTTPCall {
	f.t.Helper()
	f.clock.Advance(d)
	if err := f.h.Tick(context.Background()); err != nil {
		f.t.Fatal(err)
	}
	byVM := map[int]*wasmhost.HTTPCall{}
	for _, c := range f.h.PendingCalls() {
		if byVM[c.VM] != nil {
			f.t.Fatalf("VM %d has more than one report in flight", c.VM)
		}
		byVM[c.VM] = c
	}
	return byVM
}

func decodeReport(t *testing.T, c *wasmhost.HTTPCall) report {
	t.Helper()
	return *sharedDecode(t, c.Body)
}

func answer(t *testing.T, c *wasmhost.HTTPCall, status string) {
	t.Helper()
	var err error
	if status == "" {
		err = c.Fail()
	} else {
		err = c.Respond([]wasmhost.Header{{":status", status}}, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}

func fnvHex(s string) string {
	h := fnv.New64a()
	h.Write([]byte(s))
	return fmt.Sprintf("%016x", h.Sum64())
}

func TestTelemetryReports(t *testing.T) {
	const vms = 3
	f := startTelemetry(t, telemetryConfig, vms)
	const key = "sk_live_abcdef123456"
	rejected := 0
	for i := 0; i < 3*vms; i++ {
		r := rq("x-api-key", key, "x-user", "alice")
		if f.doOn(i%vms, r).Rejected {
			rejected++
		}
	}
	if rejected != 6 {
		t.Fatalf("rejected %d of 9, want 6", rejected)
	}
	// No report before the interval.
	if calls := f.tick(999 * time.Millisecond); len(calls) != 0 {
		t.Fatalf("report before the interval: %v", calls)
	}
	calls := f.tick(time.Millisecond)
	if len(calls) != vms {
		t.Fatalf("%d reports, want one per VM (%d)", len(calls), vms)
	}
	sum := map[string][4]uint64{}
	rejects := map[string]uint64{}
	vmIDs := map[string]bool{}
	for vm, c := range calls {
		if c.Cluster != "sluice_admin" || c.Header(":method") != "POST" || c.Header(":path") != "/api/v1/telemetry" ||
			c.Header(":authority") != "sluice-admin" || c.Header("authorization") != "Bearer tel-s3cret" ||
			c.Header("content-type") != "application/json" || c.Timeout != 500*time.Millisecond {
			t.Fatalf("VM %d: call %+v headers %v", vm, c, c.Headers)
		}
		r := decodeReport(t, c)
		if r.V != 1 || r.Node != "envoy-7" || r.Seq != 1 || r.IntervalMS != 1000 || r.ReportsDropped != 0 ||
			r.VMStartMS != t0.UnixMilli() || r.SentAtMS != t0.Add(time.Second).UnixMilli() ||
			r.ConfigHash != fnvHex(telemetryConfig) || r.VM == "" || vmIDs[r.VM] {
			t.Fatalf("VM %d: report %+v", vm, r)
		}
		vmIDs[r.VM] = true
		if len(r.Rules) != 3 {
			t.Fatalf("rules %+v", r.Rules)
		}
		for _, x := range r.Rules {
			s := sum[x.Rule]
			s[0] += x.Allowed
			s[1] += x.Rejected
			s[2] += x.ShadowRejected
			s[3] += x.FailOpen
			sum[x.Rule] = s
		}
		for _, b := range r.Buckets {
			rejects[b.Rule+" "+b.Identity] += b.Rejects
			if b.LastRefill != float64(t0.Unix()) {
				t.Errorf("bucket %+v: last_refill", b)
			}
			switch b.Rule {
			case "apikey":
				if !strings.HasPrefix(b.Identity, "header:x-api-key=sk_l…#") || strings.Contains(b.Identity, key) ||
					b.Burst != 3 || b.Tokens != 0 {
					t.Errorf("bucket %+v", b)
				}
			case "user":
				if b.Identity != "header:x-user=alice|ip:address=10.0.0.1" || b.Burst != 100 {
					t.Errorf("bucket %+v", b)
				}
			case "perip":
				if b.Identity != "ip:address=10.0.0.1" || b.Burst != 4 {
					t.Errorf("bucket %+v", b)
				}
			}
		}
	}
	// The reports add up to the traffic, and to the proxy-wasm metrics.
	for _, rule := range []string{"apikey", "user", "perip"} {
		m := [4]uint64{
			f.metric("sluice.rule." + rule + ".allowed"), f.metric("sluice.rule." + rule + ".rejected"),
			f.metric("sluice.rule." + rule + ".shadow_rejected"), f.metric("sluice.rule." + rule + ".fail_open"),
		}
		if sum[rule] != m {
			t.Errorf("rule %s: reports sum to %v, metrics say %v", rule, sum[rule], m)
		}
	}
	if got := sum["apikey"]; got != [4]uint64{3, 6, 0, 0} {
		t.Errorf("apikey counts %v, want 3 allowed, 6 rejected", got)
	}
	if got := sum["user"]; got[0] != 3 {
		t.Errorf("user counts %v, want 3 allowed", got)
	}
	maskedKey := "header:x-api-key=sk_l…#" + fnvHex(key)[8:]
	if rejects["apikey "+maskedKey] != 6 {
		t.Errorf("bucket rejects %v, want 6 for %s", rejects, maskedKey)
	}

	// The admin answers 500 to VM 0, fails VM 1's call, and never answers
	// VM 2: its call times out (Envoy answers 504). All three are counted
	// as dropped in the next report; traffic is unaffected meanwhile.
	answer(t, calls[0], "500")
	answer(t, calls[1], "")
	if f.doOn(0, rq("x-api-key", "other-key-123456789", "x-user", "bob")).Rejected {
		t.Fatal("a new key was rejected")
	}
	calls = f.tick(time.Second) // VM 2's call times out first, then every VM reports
	if len(calls) != vms {
		t.Fatalf("%d reports, want %d", len(calls), vms)
	}
	for vm, c := range calls {
		r := decodeReport(t, c)
		if r.Seq != 2 || r.ReportsDropped != 1 {
			t.Errorf("VM %d: seq %d reports_dropped %d, want 2 and 1", vm, r.Seq, r.ReportsDropped)
		}
		wantBuckets := 0 // only buckets touched since the last report
		if vm == 0 {
			wantBuckets = 3
		}
		if len(r.Buckets) != wantBuckets {
			t.Errorf("VM %d: buckets %+v, want %d", vm, r.Buckets, wantBuckets)
		}
		answer(t, c, "204")
	}
	calls = f.tick(time.Second)
	for vm, c := range calls {
		if r := decodeReport(t, c); r.Seq != 3 || r.ReportsDropped != 1 {
			t.Errorf("VM %d: seq %d reports_dropped %d after a 204, want 3 and 1", vm, r.Seq, r.ReportsDropped)
		}
	}
	if n := f.metric("sluice.telemetry.dropped"); n != 3 {
		t.Errorf("sluice.telemetry.dropped = %d, want 3", n)
	}
	if n := f.metric("sluice.panics_recovered"); n != 0 {
		t.Errorf("panics recovered: %d", n)
	}
	for _, l := range f.h.Logs() {
		if strings.Contains(l.Message, "tel-s3cret") {
			t.Errorf("the token was logged: %q", l.Message)
		}
	}
}

// TestTelemetryTopN: a report carries at most top_n buckets, the most
// rejected first.
func TestTelemetryTopN(t *testing.T) {
	cfg := strings.Replace(telemetryConfig, `"top_n": 10`, `"top_n": 2`, 1)
	f := startTelemetry(t, cfg, 1)
	for i := 0; i < 20; i++ {
		f.do("x-api-key", fmt.Sprintf("key-number-%02d-xxxx", i))
	}
	for i := 0; i < 5; i++ {
		f.do("x-api-key", "hot-key-0000000001")
	}
	calls := f.tick(time.Second)
	r := decodeReport(t, calls[0])
	if len(r.Buckets) != 2 || r.Buckets[0].Rule != "perip" || r.Buckets[0].Rejects != 21 ||
		r.Buckets[1].Rule != "apikey" || r.Buckets[1].Rejects != 2 || !strings.HasPrefix(r.Buckets[1].Identity, "header:x-api-key=hot-…#") {
		t.Fatalf("buckets %+v", r.Buckets)
	}
	if len(calls[0].Body) > 4096 {
		t.Fatalf("report of %d bytes", len(calls[0].Body))
	}
}

// TestTelemetryOff: without "telemetry" nothing is ever dispatched.
func TestTelemetryOff(t *testing.T) {
	cfg := `{"rules": [{"name": "r", "limit_keys": ["ip:address"], "algorithm": "token_bucket",
		"algorithm_config": {"tokens_per_second": 1, "burst": 1}}]}`
	f := startTelemetry(t, cfg, 2)
	f.do()
	f.do()
	if calls := f.tick(time.Minute); len(calls) != 0 {
		t.Fatalf("calls without telemetry: %v", calls)
	}
}

// TestTelemetryUnknownCluster: a cluster Envoy does not know fails the
// dispatch; the report is counted as dropped and traffic flows.
func TestTelemetryUnknownCluster(t *testing.T) {
	cfg := strings.Replace(telemetryConfig, `"cluster": "sluice_admin"`, `"cluster": "nope"`, 1)
	f := startTelemetry(t, cfg, 1)
	f.tick(time.Second)
	f.tick(time.Second)
	if n := f.metric("sluice.telemetry.dropped"); n != 2 {
		t.Fatalf("dropped %d, want 2", n)
	}
	if f.do("x-api-key", "k-0000000001").Rejected {
		t.Fatal("rejected")
	}
}

// TestTelemetryWindowBuckets: a windowed rule's hot entry reports the quota
// left as tokens, the limit as burst, the current period's start as
// last_refill, and its algorithm.
func TestTelemetryWindowBuckets(t *testing.T) {
	f := startTelemetry(t, `{"telemetry": {"cluster": "sluice_admin", "token": "tel-s3cret"},
	  "rules": [{"name": "fw", "limit_keys": ["header:x-user"], "algorithm": "fixed_window",
	    "algorithm_config": {"limit": 5, "window_seconds": 60}, "telemetry_identity": "clear"}]}`, 1)
	f.clock.Set(aligned.Add(10 * time.Second))
	if got := f.admitted(7, "x-user", "u1"); got != 5 {
		t.Fatalf("admitted %d", got)
	}
	calls := f.tick(time.Second)
	if calls[0] == nil {
		t.Fatal("no report")
	}
	r := decodeReport(t, calls[0])
	if len(r.Buckets) != 1 {
		t.Fatalf("buckets %+v", r.Buckets)
	}
	b := r.Buckets[0]
	if b.Rule != "fw" || b.Identity != "header:x-user=u1" || b.Tokens != 0 || b.Burst != 5 || b.Rejects != 2 ||
		b.Algorithm != "fixed_window" || b.LastRefill != float64(aligned.Unix()) {
		t.Errorf("bucket %+v", b)
	}
}

// Overflow decisions reach the report: "overflowed" counts them
// cumulatively, "overflow_identities" is the largest estimate of identities
// sharing one overflow limit since the previous report (0 in a report with
// none).
func TestTelemetryOverflow(t *testing.T) {
	const cfg = `{"telemetry": {"cluster": "sluice_admin", "token": "t", "interval_ms": 1000},
	  "rules": [{"name": "small", "max_keys": 4, "limit_keys": ["header:x-id"], "algorithm": "token_bucket",
	    "algorithm_config": {"tokens_per_second": 0.001, "burst": 10}}]}`
	f := startTelemetry(t, cfg, 1)
	for i := 0; i < 4; i++ { // the one group's four ways
		f.do("x-id", fmt.Sprintf("way-%d", i))
	}
	for i := 0; i < 3; i++ { // three identities overflow, two requests each
		f.do("x-id", fmt.Sprintf("over-%d", i))
		f.do("x-id", fmt.Sprintf("over-%d", i))
	}
	rule := func(c *wasmhost.HTTPCall) (overflowed, identities uint64) {
		r := decodeReport(t, c)
		if len(r.Rules) != 1 {
			t.Fatalf("rules %+v", r.Rules)
		}
		return r.Rules[0].Overflowed, r.Rules[0].OverflowIdentities
	}
	calls := f.tick(time.Second)
	n, k := rule(calls[0])
	// Three identities set two or three bits of the sketch (two share a bit
	// one time in about 20).
	if n != 6 || k < 2 || k > 3 {
		t.Fatalf("first report: overflowed %d, overflow_identities %d; want 6, about 3", n, k)
	}
	answer(t, calls[0], "204")
	calls = f.tick(time.Second)
	if n, k := rule(calls[0]); n != 6 || k != 0 {
		t.Fatalf("second report: overflowed %d, overflow_identities %d; want 6 (cumulative), 0 (none since)", n, k)
	}
}
