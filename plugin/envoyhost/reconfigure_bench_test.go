package envoyhost_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/plugin/envoyhost"
	"github.com/sluice-rl/sluice/plugin/scenario"
)

// BenchmarkEnvoyHostReconfigure: one configuration push (proxy_on_configure
// on two VMs, through the host program's pipe) of a policy with a per-key
// rule, without resets, with 256 resets every Envoy process has applied
// already (what later pushes carry for a while), and with 256 new ones
// naming identities whose state is then forgotten (the first push after
// each one's reset). Resets cost configuration loads only; requests never
// look at them.
//
//	SLUICE_WASM_DIR=$PWD/bin go test ./plugin/envoyhost -run '^$' -bench EnvoyHostReconfigure -count 6
func BenchmarkEnvoyHostReconfigure(b *testing.B) {
	const n = 256
	base := `{"rules": [{"name": "per-key", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
  "algorithm_config": {"rps": 1, "burst": 10}}]`
	resets := func(round int) string {
		entries := make([]string, n)
		for i := range entries {
			entries[i] = fmt.Sprintf(`{"id": "r%d-%d", "rule": "per-key", "key": "client-%d"}`, round, i, i)
		}
		return base + `, "resets": [` + strings.Join(entries, ", ") + `]}`
	}
	cases := []struct {
		name   string
		config func(i int) string
	}{
		{"resets=0", func(int) string { return base + "}" }},
		{"resets=256/applied", func(int) string { return resets(0) }},
		{"resets=256/new", func(i int) string { return resets(i + 1) }},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			wasm := scenario.PluginWasmPath(b)
			envoyhost.Require(b, envoyhost.FastJIT)
			h, err := envoyhost.Start(envoyhost.FastJIT, scenario.Options{WasmPath: wasm, Config: []byte(resets(0)), VMs: 2})
			if err != nil {
				b.Fatal(err)
			}
			defer h.Close()
			i := 0
			for b.Loop() {
				b.StopTimer()
				rs := make([]scenario.Request, n) // state for every identity a reset names
				for j := range rs {
					rs[j] = hdr("x-api-key", fmt.Sprintf("client-%d", j))
				}
				if _, err := h.HTTPMany(0, rs); err != nil {
					b.Fatal(err)
				}
				cfg := []byte(c.config(i))
				b.StartTimer()
				if err := h.Reconfigure(cfg); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// BenchmarkEnvoyHostResetEveryIdentity: a push carrying a new reset of
// every identity of a rule of the default table (max_keys 65536: 16,384
// groups, 2,048 identities holding state), then the ticks that finish the
// walk (2,048 groups a turn: one as the configuration loads, seven on
// ticks), on two VMs under Envoy's JIT. ns/op is the whole walk with its
// push; ms/turn the time of one turn, the longest a worker is busy with
// it at once.
//
//	SLUICE_WASM_DIR=$PWD/bin go test ./plugin/envoyhost -run '^$' -bench EnvoyHostResetEveryIdentity -count 6
func BenchmarkEnvoyHostResetEveryIdentity(b *testing.B) {
	const identities = 2048
	base := `{"rules": [{"name": "per-key", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
  "algorithm_config": {"rps": 1, "burst": 10}}]`
	push := func(round int) []byte {
		return []byte(base + fmt.Sprintf(`, "resets": [{"id": "all-%d", "rule": "per-key", "all": true}]}`, round))
	}
	wasm := scenario.PluginWasmPath(b)
	envoyhost.Require(b, envoyhost.FastJIT)
	h, err := envoyhost.Start(envoyhost.FastJIT, scenario.Options{WasmPath: wasm, Config: []byte(base + "}"), VMs: 2})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	rs := make([]scenario.Request, identities)
	for j := range rs {
		rs[j] = hdr("x-api-key", fmt.Sprintf("client-%d", j))
	}
	i := 0
	for b.Loop() {
		b.StopTimer()
		if _, err := h.HTTPMany(0, rs); err != nil {
			b.Fatal(err)
		}
		i++
		cfg := push(i)
		b.StartTimer()
		if err := h.Reconfigure(cfg); err != nil {
			b.Fatal(err)
		}
		for range 7 {
			h.Advance(10 * time.Millisecond)
			if err := h.Tick(); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	if n, _ := h.Metric("sluice.resets_applied"); n != uint64(i) {
		b.Fatalf("%d resets applied after %d walks: a walk did not finish in its ticks", n, i)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/8/1e6, "ms/turn")
}
