package bench

import (
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/plugin/wasmhost"
)

// quotaRule is a monthly quota per API key, large enough never to reject
// the benchmark's requests, with the given "overrides" member (or none).
func quotaRule(overrides string) string {
	return `{"rules": [{"name": "open", "limit_keys": ["header:x-api-key"], "algorithm": "quota",
	  "algorithm_config": {"limit": 1e12, "period": "month", "time_zone": "Europe/Berlin"}` + overrides + `}]}`
}

// BenchmarkQuotaOverrides measures a monthly quota whose 10,000 overrides
// (a customer table) hold the request's key, against the same quota
// without overrides, in one interleaved run (x-floor is the ratio).
func BenchmarkQuotaOverrides(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`, "overrides": [`)
	for i := range 10000 {
		sb.WriteString(`{"key": "customer-` + strconv.Itoa(i) + `", "algorithm_config": {"limit": ` + strconv.Itoa(1e11+i%7) + `}},`)
	}
	sb.WriteString(`{"key": "k1", "algorithm_config": {"limit": 5e11}}]`)
	k := same(Headers("x-api-key", "k1"))
	b.Run("hit-of-10000-vs-none", func(b *testing.B) {
		Run(b, Case{Wasm: pluginWasm(b), Floor: pluginWasm(b), FloorConfig: quotaRule(""), Config: quotaRule(sb.String()), Request: k, Rejected: &no,
			After: func(b *testing.B, h *wasmhost.Host) {
				if n, _ := h.Metric("sluice.rule.open.overridden"); n == 0 {
					b.Fatal("no request was decided by the key's override")
				}
			}})
	})
}
