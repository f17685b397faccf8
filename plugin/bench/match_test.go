package bench

import (
	"github.com/sluice-rl/sluice/plugin/wasmhost"
	"strconv"
	"strings"
	"testing"
)

// matchLimits is one per-key rule that applies to the benchmark's requests
// (GET /api/items from 10.1.2.3) with the given match and extra fields.
func matchLimits(match, extra string) string {
	return `{"rules": [{"name": "open", "limit_keys": ["header:x-api-key"], "match": ` + match + `,
	  "algorithm": "token_bucket", "algorithm_config": {"rps": 1e6, "burst": 1e9}` + extra + `}]}`
}

var (
	exactMatch = matchLimits(`{"path": "/api/items", "ip:address": "10.1.2.3"}`, "")
	regexMatch = matchLimits(`{"path": {"regex": "^/api/[a-z]+$"}, "ip:address": {"cidr": ["10.0.0.0/8", "2001:db8::/32"]}}`, "")
	noOverride = matchLimits(`{}`, "")
)

// tenThousandOverrides is noOverride with 10,000 overrides, none of them
// the benchmark's key.
func tenThousandOverrides() string {
	var b strings.Builder
	for i := range 10000 {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`{"key": "customer-` + strconv.Itoa(i) + `", "algorithm_config": {"burst": ` + strconv.Itoa(1e8+i%7) + `}}`)
	}
	return matchLimits(`{}`, `, "overrides": [`+b.String()+`]`)
}

// BenchmarkMatch measures the new match conditions and override lookups
// against the empty plugin, and each against its plain counterpart in one
// interleaved run ("-vs-" cases: x-floor is then the ratio of the two
// configurations): a regex and a CIDR condition against two exact ones,
// a key missing from 10,000 overrides against a rule without any, and the
// request's own override bounded in time or on a weekly schedule (it reads
// the clock) against the same override for good, and a rule bounded in
// time or on a weekly schedule against the same rule for good.
func BenchmarkMatch(b *testing.B) {
	overrides := tenThousandOverrides()
	const own = `, "overrides": [{"key": "k1", "algorithm_config": {"burst": 2e9}`
	timed, untimed := matchLimits(`{}`, own+`, "until": "2199-01-01T00:00:00Z"}]`), matchLimits(`{}`, own+`}]`)
	k := same(Headers("x-api-key", "k1"))
	for _, c := range []struct{ name, config, floorConfig string }{
		{"exact", exactMatch, ""},
		{"regex-cidr", regexMatch, ""},
		{"regex-cidr-vs-exact", regexMatch, exactMatch},
		{"no-overrides", noOverride, ""},
		{"overrides-10000-miss", overrides, ""},
		{"overrides-10000-miss-vs-none", overrides, noOverride},
		{"override-timed-vs-untimed", timed, untimed},
		{"override-scheduled-vs-untimed", matchLimits(`{}`, own+`, "schedule": {"from": "00:00", "until": "24:00", "time_zone": "Europe/Berlin"}}]`), untimed},
		{"rule-timed-vs-untimed", matchLimits(`{}`, `, "from": "2000-01-01T00:00:00Z", "until": "2199-01-01T00:00:00Z"`), noOverride},
		{"rule-scheduled-vs-untimed", matchLimits(`{}`, `, "schedule": {"from": "00:00", "until": "24:00", "time_zone": "Europe/Berlin"}`), noOverride},
	} {
		b.Run(c.name, func(b *testing.B) {
			floor := floorWasm(b)
			if c.floorConfig != "" {
				floor = pluginWasm(b)
			}
			Run(b, Case{Wasm: pluginWasm(b), Floor: floor, FloorConfig: c.floorConfig, Config: c.config, Request: k, Rejected: &no,
				After: func(b *testing.B, h *wasmhost.Host) {
					if n, _ := h.Metric("sluice.rule.open.allowed"); n == 0 {
						b.Fatal("the rule did not apply to the benchmark's requests")
					}
					if n, _ := h.Metric("sluice.rule.open.overridden"); strings.Contains(c.name, "override-") && n == 0 {
						b.Fatal("the override did not decide the benchmark's requests")
					}
				}})
		})
	}
}
