package bench

import (
	"os"
	"strconv"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-rl/sluice/plugin/wasmhost"
)

// fleetLimits is limits' "open" rule as a global rule (fleet mode), with
// leases large and long enough that the timed loop always finds tokens in
// the pool: the request path then costs what a local rule costs, which is
// what BenchmarkFleet compares.
var fleetLimits = strings.Replace(limits, `{"rules": [
  {"name": "open",`, `{"fleet": {"cluster": "rls", "timeout_ms": 1000, "sync_interval_ms": 60000,
   "lease_max": 1000000000, "lease_ttl_ms": 3600000},
  "rules": [
  {"name": "open", "scope": "global",`, 1)

// grantAll answers every ShouldRateLimit with OK for each descriptor, at
// once.
var grantAll = wasmhost.HTTPCallHandlerFunc(func(c *wasmhost.HTTPCall) {
	req := &rlsv3.RateLimitRequest{}
	if len(c.Body) < 5 || proto.Unmarshal(c.Body[5:], req) != nil {
		_ = c.Fail()
		return
	}
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	for range req.Descriptors {
		resp.Statuses = append(resp.Statuses, &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK})
	}
	b, _ := proto.Marshal(resp)
	body := append([]byte{0, byte(len(b) >> 24), byte(len(b) >> 16), byte(len(b) >> 8), byte(len(b))}, b...)
	_ = c.RespondWithTrailers([]wasmhost.Header{{":status", "200"}}, body, []wasmhost.Header{{"grpc-status", "0"}})
})

// BenchmarkFleet: a global rule whose pool has tokens against the same
// rule local, each as a ratio to the empty floor, in one run. With
// SLUICE_BENCH_FLOOR_WASM (another build of the filter, say the one
// before a change) it also runs "global-over-floor-wasm": the global rule
// in this build against that one, interleaved (x-floor: this over that).
func BenchmarkFleet(b *testing.B) {
	cases := []struct {
		name string
		c    Case
	}{
		{"local", Case{Config: limits, Request: same(Headers("x-api-key", "k1")), Rejected: &no}},
		{"global-pool-has-tokens", Case{Config: fleetLimits, Request: same(Headers("x-api-key", "k1")), Rejected: &no,
			HTTPCalls: grantAll,
			After: func(b *testing.B, h *wasmhost.Host) {
				fetches, _ := h.Metric("sluice.rule.open.global_fetches")
				b.ReportMetric(float64(fetches), "fetches")
			}}},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			tc.c.Wasm, tc.c.Floor = pluginWasm(b), floorWasm(b)
			Run(b, tc.c)
		})
	}
	// The same two against each other, interleaved chunk by chunk: here
	// x-floor is the global rule's time over the local rule's.
	b.Run("global-over-local", func(b *testing.B) {
		Run(b, Case{Wasm: pluginWasm(b), Config: fleetLimits, Floor: pluginWasm(b), FloorConfig: limits,
			Request: same(Headers("x-api-key", "k1")), Rejected: &no, HTTPCalls: grantAll})
	})
	// A rule charged from the response: global, its pool paying each
	// answer's cost, against the same rule local.
	b.Run("global-charged-over-local-charged", func(b *testing.B) {
		Run(b, Case{Wasm: pluginWasm(b), Config: charged(fleetLimits), Floor: pluginWasm(b), FloorConfig: charged(limits),
			Request: same(costReported("k1", "3")), Rejected: &no, HTTPCalls: grantAll,
			After: func(b *testing.B, h *wasmhost.Host) {
				owed, _ := h.Metric("sluice.rule.open.global_charged")
				b.ReportMetric(float64(owed), "charged-to-service")
			}})
	})
	// The request's key among 10,000 overrides of the global rule (its
	// own limits decide it) against the same global rule without any.
	b.Run("global-overridden-over-global", func(b *testing.B) {
		Run(b, Case{Wasm: pluginWasm(b), Config: fleetOverridden(), Floor: pluginWasm(b), FloorConfig: fleetLimits,
			Request: same(Headers("x-api-key", "k1")), Rejected: &no, HTTPCalls: grantAll})
	})
	// The global rule blocking the clients it refuses (block_seconds)
	// against the same rule without: an admitted request pays from its
	// pool either way; only a request-path ask carries the block.
	b.Run("global-blocking-over-global", func(b *testing.B) {
		Run(b, Case{Wasm: pluginWasm(b), Config: blocking(fleetLimits), Floor: pluginWasm(b), FloorConfig: fleetLimits,
			Request: same(Headers("x-api-key", "k1")), Rejected: &no, HTTPCalls: grantAll})
	})
	if path := os.Getenv("SLUICE_BENCH_FLOOR_WASM"); path != "" {
		b.Run("global-over-floor-wasm", func(b *testing.B) {
			other, err := os.ReadFile(path)
			if err != nil {
				b.Fatalf("SLUICE_BENCH_FLOOR_WASM: %v", err)
			}
			Run(b, Case{Wasm: pluginWasm(b), Config: fleetLimits, Floor: other, FloorConfig: fleetLimits,
				Request: same(Headers("x-api-key", "k1")), Rejected: &no, HTTPCalls: grantAll})
		})
	}
}

// fleetOverridden is fleetLimits whose global rule has 10,000 overrides,
// one of them the benchmark's key k1.
func fleetOverridden() string {
	var ov strings.Builder
	for i := range 9999 {
		ov.WriteString(`{"key": "customer-` + strconv.Itoa(i) + `", "algorithm_config": {"burst": 2e9}},`)
	}
	ov.WriteString(`{"key": "k1", "algorithm_config": {"rps": 2e6, "burst": 2e9}}`)
	const open = `"algorithm_config": {"rps": 1e6, "burst": 1e9}}`
	return strings.Replace(fleetLimits, open, `"algorithm_config": {"rps": 1e6, "burst": 1e9}, "overrides": [`+ov.String()+`]}`, 1)
}

// blocking makes the "open" rule of config block a refused client for
// ten minutes.
func blocking(config string) string {
	const open = `"algorithm_config": {"rps": 1e6, "burst": 1e9}}`
	return strings.Replace(config, open, `"algorithm_config": {"rps": 1e6, "burst": 1e9, "block_seconds": 600}}`, 1)
}

// charged makes the "open" rule of config charge what the response
// reports in x-cost.
func charged(config string) string {
	const open = `"algorithm_config": {"rps": 1e6, "burst": 1e9}}`
	return strings.Replace(config, open, `"algorithm_config": {"rps": 1e6, "burst": 1e9, "cost_source": "response_header:x-cost"}}`, 1)
}

// costReported is a request of key k whose answer reports cost in x-cost.
func costReported(k, cost string) *wasmhost.Request {
	r := Headers("x-api-key", k)
	r.ResponseHeaders = []wasmhost.Header{{":status", "200"}, {"x-cost", cost}}
	return r
}
