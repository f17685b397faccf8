package bench

import (
	"os"
	"strconv"
	"testing"

	"github.com/sluice-rl/sluice/plugin/wasmhost"
	"github.com/sluice-rl/sluice/plugin/wasmhost/wasmtest"
)

// limits: "open" never runs out (huge burst, the clock is frozen by the
// host only if a test asks; with the real clock it refills anyway), "closed"
// never admits a request (burst below the cost of one).
const limits = `{"rules": [
  {"name": "open", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
   "algorithm_config": {"rps": 1e9, "burst": 1e12}},
  {"name": "closed", "limit_keys": ["header:x-deny"], "algorithm": "token_bucket",
   "algorithm_config": {"rps": 1e-9, "burst": 0.5}}]}`

var (
	yes, no = true, false
)

func floorWasm(b *testing.B) []byte  { return wasmtest.Build(b, "./plugin/wasmhost/testdata/empty") }
func pluginWasm(b *testing.B) []byte { return wasmtest.Build(b, "./plugin") }

// same returns the same request every time.
func same(r *wasmhost.Request) func(int, int) *wasmhost.Request {
	return func(int, int) *wasmhost.Request { return r }
}

// BenchmarkStreams is the issue-3 table: the plugin's allowed and rejected
// paths against the empty floor, on one VM and on two VMs (distinct keys,
// and one hot key with its CAS mismatch rate).
func BenchmarkStreams(b *testing.B) {
	b.Run("vms=1/floor", func(b *testing.B) {
		Run(b, Case{Floor: true, Wasm: floorWasm(b), Request: same(Headers("x-api-key", "k1"))})
	})
	b.Run("vms=1/allowed", func(b *testing.B) {
		Run(b, Case{Wasm: pluginWasm(b), Config: limits, Request: same(Headers("x-api-key", "k1")), Rejected: &no})
	})
	b.Run("vms=1/rejected", func(b *testing.B) {
		Run(b, Case{Wasm: pluginWasm(b), Config: limits, Request: same(Headers("x-deny", "k1")), Rejected: &yes})
	})

	perVM := []*wasmhost.Request{Headers("x-api-key", "vm0"), Headers("x-api-key", "vm1")}
	b.Run("vms=2/floor", func(b *testing.B) {
		Run(b, Case{Floor: true, Wasm: floorWasm(b), VMs: 2, Request: func(vm, _ int) *wasmhost.Request { return perVM[vm] }})
	})
	b.Run("vms=2/allowed-distinct-keys", func(b *testing.B) {
		Run(b, Case{Wasm: pluginWasm(b), Config: limits, VMs: 2, Rejected: &no,
			Request: func(vm, _ int) *wasmhost.Request { return perVM[vm] }})
	})
	b.Run("vms=2/allowed-hot-key", func(b *testing.B) {
		Run(b, Case{Wasm: pluginWasm(b), Config: limits, VMs: 2, Rejected: &no,
			Request: same(Headers("x-api-key", "hot")),
			After: func(b *testing.B, h *wasmhost.Host) {
				retries, _ := h.Metric("sluice.rule.open.cas_retries")
				allowed, _ := h.Metric("sluice.rule.open.allowed")
				if allowed > 0 {
					b.ReportMetric(float64(retries)/float64(allowed), "cas-retries/req")
				}
			}})
	})
}

// BenchmarkCustom measures any module and configuration against the floor:
//
//	SLUICE_BENCH_WASM=bin/ratelimit.wasm SLUICE_BENCH_CONFIG=policy.json \
//	SLUICE_BENCH_VMS=2 go test ./plugin/bench -run '^$' -bench Custom
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
	req := same(Headers("x-api-key", "k1"))
	b.Run("floor", func(b *testing.B) { Run(b, Case{Floor: true, Wasm: floorWasm(b), VMs: vms, Request: req}) })
	b.Run("module", func(b *testing.B) { Run(b, Case{Wasm: wasm, Config: string(config), VMs: vms, Request: req}) })
}
