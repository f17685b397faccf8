package bench

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/plugin/wasmhost"
	"github.com/sluice-rl/sluice/plugin/wasmhost/wasmtest"
)

// limits: "open" never runs out (burst 1e9 refilled at 1e6/s), "closed" never admits a
// request (burst below the cost of one).
const limits = `{"rules": [
  {"name": "open", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
   "algorithm_config": {"rps": 1e6, "burst": 1e9}},
  {"name": "closed", "limit_keys": ["header:x-deny"], "algorithm": "token_bucket",
   "algorithm_config": {"rps": 1e-9, "burst": 0.5}}]}`

// limitsWithTelemetry is limits with telemetry on: the request path then
// also feeds the per-VM counters and hot-bucket table (reports themselves
// go out on ticks, which these benchmarks do not run).
var limitsWithTelemetry = strings.Replace(limits, `{"rules": [`,
	`{"telemetry": {"cluster": "sluice_admin", "token": "bench-telemetry-token"}, "rules": [`, 1)

// limitsLegacyHeaders is limits also sending the older RateLimit-Limit,
// -Remaining and -Reset fields ("legacy_headers": true; the default sends
// only the draft-10 pair).
var limitsLegacyHeaders = strings.Replace(limits, `{"rules": [`, `{"legacy_headers": true, "rules": [`, 1)

var yes, no = true, false

// FloorWasm is the empty plugin: the reference of every ratio.
func floorWasm(b *testing.B) []byte  { return wasmtest.Build(b, "./plugin/wasmhost/testdata/empty") }
func pluginWasm(b *testing.B) []byte { return wasmtest.Build(b, "./plugin") }

// same returns the same request every time.
func same(r *wasmhost.Request) func(int, int) *wasmhost.Request {
	return func(int, int) *wasmhost.Request { return r }
}

// BenchmarkStreams is the core table: the plugin's allowed and rejected
// paths against the empty floor, on one VM and on two VMs (distinct keys,
// and one hot key with its CAS retry rate).
func BenchmarkStreams(b *testing.B) {
	perVM := []*wasmhost.Request{Headers("x-api-key", "vm0"), Headers("x-api-key", "vm1")}
	byVM := func(vm, _ int) *wasmhost.Request { return perVM[vm] }
	cases := []struct {
		name string
		c    Case
	}{
		{"vms=1/allowed", Case{Config: limits, Request: same(Headers("x-api-key", "k1")), Rejected: &no}},
		{"vms=1/rejected", Case{Config: limits, Request: same(Headers("x-deny", "k1")), Rejected: &yes}},
		{"vms=1/allowed-legacy-headers", Case{Config: limitsLegacyHeaders, Request: same(Headers("x-api-key", "k1")), Rejected: &no}},
		{"vms=1/allowed-telemetry", Case{Config: limitsWithTelemetry, Request: same(Headers("x-api-key", "k1")), Rejected: &no}},
		{"vms=1/rejected-telemetry", Case{Config: limitsWithTelemetry, Request: same(Headers("x-deny", "k1")), Rejected: &yes}},
		{"vms=1/no-rule-applies", Case{Config: limits, Request: same(Headers()), Rejected: &no}},
		{"vms=2/allowed-distinct-keys", Case{Config: limits, VMs: 2, Request: byVM, Rejected: &no}},
		{"vms=2/allowed-hot-key", Case{Config: limits, VMs: 2, Request: same(Headers("x-api-key", "hot")), Rejected: &no,
			After: func(b *testing.B, h *wasmhost.Host) {
				retries, _ := h.Metric("sluice.rule.open.cas_retries")
				allowed, _ := h.Metric("sluice.rule.open.allowed")
				if allowed > 0 {
					b.ReportMetric(float64(retries)/float64(allowed), "cas-retries/req")
				}
			}}},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			tc.c.Wasm, tc.c.Floor = pluginWasm(b), floorWasm(b)
			Run(b, tc.c)
		})
	}
}

// BenchmarkCustom measures any module and configuration against the floor:
//
//	SLUICE_BENCH_WASM=bin/ratelimit.wasm SLUICE_BENCH_CONFIG=policy.json \
//	SLUICE_BENCH_VMS=2 go test ./plugin/bench -run '^$' -bench Custom
//
// SLUICE_BENCH_FLOOR_WASM replaces the empty plugin with another module run
// with the same configuration (an earlier build, say): x-floor and the
// floor-* metrics then compare the two modules in one interleaved run.
//
// Requests carry x-api-key: k1 from 10.1.2.3. Skipped unless
// SLUICE_BENCH_WASM is set.
func BenchmarkCustom(b *testing.B) {
	path := os.Getenv("SLUICE_BENCH_WASM")
	if path == "" {
		b.Skip("set SLUICE_BENCH_WASM (and SLUICE_BENCH_CONFIG) to benchmark a module")
	}
	wasm, err := os.ReadFile(path)
	if err != nil {
		b.Fatalf("SLUICE_BENCH_WASM: %v", err)
	}
	var config []byte
	if p := os.Getenv("SLUICE_BENCH_CONFIG"); p != "" {
		if config, err = os.ReadFile(p); err != nil {
			b.Fatalf("SLUICE_BENCH_CONFIG: %v", err)
		}
	}
	vms := 1
	if v := os.Getenv("SLUICE_BENCH_VMS"); v != "" {
		if vms, err = strconv.Atoi(v); err != nil || vms < 1 {
			b.Fatalf("SLUICE_BENCH_VMS: %q is not a positive whole number", v)
		}
	}
	floor, floorConfig := floorWasm(b), ""
	if p := os.Getenv("SLUICE_BENCH_FLOOR_WASM"); p != "" {
		if floor, err = os.ReadFile(p); err != nil {
			b.Fatalf("SLUICE_BENCH_FLOOR_WASM: %v", err)
		}
		floorConfig = string(config)
	}
	Run(b, Case{Wasm: wasm, Floor: floor, FloorConfig: floorConfig, Config: string(config), VMs: vms,
		Request: same(Headers("x-api-key", "k1"))})
}
