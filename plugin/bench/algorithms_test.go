package bench

import (
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/plugin/wasmhost"
)

// algorithmConfigs has, per algorithm, the shape of limits: an "open" rule
// that never runs out (x-api-key) and a "closed" one that never admits
// (x-deny), in that order, so every algorithm's cases skip the same rules.
// The closed windows take their cost from x-cost: 1 against a limit of
// 0.5. The rolling window uses 60 one-second periods, so its state holds up
// to 60 counts: the largest value its codec handles.
var algorithmConfigs = map[string]string{
	"token_bucket":   limits,
	"fixed_window":   windowLimits("fixed_window", `"limit": 1e12, "window_seconds": 60`),
	"sliding_window": windowLimits("sliding_window", `"limit": 1e12, "window_seconds": 60`),
	"rolling_window": windowLimits("rolling_window", `"limit": 1e12, "window_seconds": 60, "period_seconds": 1`),
	// A calendar quota in a zone with daylight saving: its bounds are
	// cached, so a request compares two numbers.
	"quota": windowLimits("quota", `"limit": 1e12, "period": "month", "time_zone": "Europe/Berlin"`),
}

func windowLimits(alg, open string) string {
	closed := strings.Replace(open, `"limit": 1e12`, `"limit": 0.5`, 1) + `, "cost_source": "header:x-cost", "default_cost": 0.5`
	return `{"rules": [
  {"name": "open", "limit_keys": ["header:x-api-key"], "algorithm": "` + alg + `", "algorithm_config": {` + open + `}},
  {"name": "closed", "limit_keys": ["header:x-deny"], "algorithm": "` + alg + `", "algorithm_config": {` + closed + `}}]}`
}

// algorithmCases are the allowed and the rejected request of
// algorithmConfigs' rules.
var algorithmCases = []struct {
	name     string
	req      *wasmhost.Request
	rejected *bool
}{
	{"allowed", Headers("x-api-key", "k1"), &no},
	{"rejected", Headers("x-deny", "k1", "x-cost", "1"), &yes},
}

// BenchmarkAlgorithms compares every algorithm's allowed and rejected paths
// against the empty floor in one run (one VM, one client), token_bucket
// included for reference.
func BenchmarkAlgorithms(b *testing.B) {
	for _, alg := range []string{"token_bucket", "fixed_window", "sliding_window", "rolling_window", "quota"} {
		for _, c := range algorithmCases {
			b.Run(alg+"/"+c.name, func(b *testing.B) {
				Run(b, Case{Wasm: pluginWasm(b), Floor: floorWasm(b), Config: algorithmConfigs[alg],
					Request: same(c.req), Rejected: c.rejected})
			})
		}
	}
}

// BenchmarkQuotaOverFixedWindow runs a calendar quota (a month of
// Europe/Berlin) against a fixed window interleaved in one run: x-floor is
// the quota's time over the fixed window's (target <= 1.05), allowed and
// rejected.
func BenchmarkQuotaOverFixedWindow(b *testing.B) {
	for _, c := range algorithmCases {
		b.Run(c.name, func(b *testing.B) {
			Run(b, Case{Wasm: pluginWasm(b), Config: algorithmConfigs["quota"],
				Floor: pluginWasm(b), FloorConfig: algorithmConfigs["fixed_window"],
				Request: same(c.req), Rejected: c.rejected})
		})
	}
}
