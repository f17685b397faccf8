package bench

import (
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/plugin/wasmhost"
)

// unlimitedLimits is a per-key policy that leaves 100 keys (k0 to k99)
// alone and a per-address policy, written with an unlimited rule before
// the per-key rule (unlimited true) or with the keys left out of the
// per-key rule's match (false).
func unlimitedLimits(unlimited bool) string {
	keys := make([]string, 100)
	for i := range keys {
		keys[i] = strconv.Quote("k" + strconv.Itoa(i))
	}
	list := `{"in": [` + strings.Join(keys, ", ") + `]}`
	perKey := `{"name": "per-key", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket", "algorithm_config": {"rps": 1e6, "burst": 1e9}}`
	rules := `{"name": "batch", "action": "unlimited", "match": {"header:x-api-key": ` + list + `}}, ` + perKey
	if !unlimited {
		rules = strings.Replace(perKey, `"limit_keys"`, `"match": {"header:x-api-key": {"not": `+list+`}}, "limit_keys"`, 1)
	}
	return `{"policies": [{"name": "keys", "rules": [` + rules + `]},
	  {"name": "addresses", "rules": [{"name": "open", "limit_keys": ["ip:address"], "algorithm": "token_bucket", "algorithm_config": {"rps": 1e6, "burst": 1e9}}]}]}`
}

// BenchmarkUnlimited: a key an unlimited rule leaves alone, and a key the
// per-key rule behind it limits, each against the empty plugin and
// against the same policy written with a {"not": {"in": [...]}} match
// instead ("-vs-" cases: x-floor is the ratio of the two configurations).
func BenchmarkUnlimited(b *testing.B) {
	withRule, withMatch := unlimitedLimits(true), unlimitedLimits(false)
	for _, c := range []struct{ name, key, config, floorConfig string }{
		{"unlimited-key", "k42", withRule, ""},
		{"unlimited-key-vs-not-in", "k42", withRule, withMatch},
		{"limited-key", "other", withRule, ""},
		{"limited-key-vs-not-in", "other", withRule, withMatch},
	} {
		b.Run(c.name, func(b *testing.B) {
			floor := floorWasm(b)
			if c.floorConfig != "" {
				floor = pluginWasm(b)
			}
			Run(b, Case{Wasm: pluginWasm(b), Floor: floor, FloorConfig: c.floorConfig, Config: c.config,
				Request: same(Headers("x-api-key", c.key)), Rejected: &no,
				After: func(b *testing.B, h *wasmhost.Host) {
					if n, _ := h.Metric("sluice.rule.open.allowed"); n == 0 {
						b.Fatal("the per-address rule did not apply to the benchmark's requests")
					}
				}})
		})
	}
}
