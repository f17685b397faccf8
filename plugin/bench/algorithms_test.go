package bench

import (
	"testing"

	"github.com/sluice-rl/sluice/plugin/wasmhost"
)

// algorithmLimits has, per algorithm, an "open" rule that never runs out
// (x-<alg>) and a "closed" one that never admits (x-<alg>-deny). The
// rolling window uses 60 one-second periods, so its state holds up to 60
// counts: the largest value its codec handles.
const algorithmLimits = `{"rules": [
  {"name": "tb", "limit_keys": ["header:x-tb"], "algorithm": "token_bucket", "algorithm_config": {"rps": 1e6, "burst": 1e9}},
  {"name": "tb-deny", "limit_keys": ["header:x-tb-deny"], "algorithm": "token_bucket", "algorithm_config": {"rps": 1e-9, "burst": 0.5}},
  {"name": "fw", "limit_keys": ["header:x-fw"], "algorithm": "fixed_window", "algorithm_config": {"limit": 1e12, "window_seconds": 60}},
  {"name": "fw-deny", "limit_keys": ["header:x-fw-deny"], "algorithm": "fixed_window", "algorithm_config": {"limit": 0.5, "window_seconds": 60, "default_cost": 0.5, "cost_source": "header:x-cost"}},
  {"name": "sw", "limit_keys": ["header:x-sw"], "algorithm": "sliding_window", "algorithm_config": {"limit": 1e12, "window_seconds": 60}},
  {"name": "sw-deny", "limit_keys": ["header:x-sw-deny"], "algorithm": "sliding_window", "algorithm_config": {"limit": 0.5, "window_seconds": 60, "default_cost": 0.5, "cost_source": "header:x-cost"}},
  {"name": "rw", "limit_keys": ["header:x-rw"], "algorithm": "rolling_window", "algorithm_config": {"limit": 1e12, "window_seconds": 60, "period_seconds": 1}},
  {"name": "rw-deny", "limit_keys": ["header:x-rw-deny"], "algorithm": "rolling_window", "algorithm_config": {"limit": 0.5, "window_seconds": 60, "period_seconds": 1, "default_cost": 0.5, "cost_source": "header:x-cost"}}
]}`

// BenchmarkAlgorithms compares every algorithm's allowed and rejected paths
// against the empty floor in one run (one VM, one client). A "deny" rule
// takes its cost from x-cost: 1 (its limit is 0.5), so it never admits.
func BenchmarkAlgorithms(b *testing.B) {
	for _, alg := range []string{"tb", "fw", "sw", "rw"} {
		for _, c := range []struct {
			name     string
			req      *wasmhost.Request
			rejected *bool
		}{
			{"allowed", Headers("x-"+alg, "k1"), &no},
			{"rejected", Headers("x-"+alg+"-deny", "k1", "x-cost", "1"), &yes},
		} {
			b.Run(alg+"/"+c.name, func(b *testing.B) {
				Run(b, Case{Wasm: pluginWasm(b), Floor: floorWasm(b), Config: algorithmLimits,
					Request: same(c.req), Rejected: c.rejected})
			})
		}
	}
}
