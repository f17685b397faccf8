package filter_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/plugin/wasmhost"
	"github.com/sluice-rl/sluice/plugin/wasmhost/wasmtest"
)

// benchConfig: "bench" admits everything (its bucket stays near full),
// "deny" rejects everything (cost 1 > burst 0.5). One policy, so a request
// with x-api-key meets "bench" only and one with x-deny meets "deny" only.
const benchConfig = `{"rules": [{"name": "bench", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
  "algorithm_config": {"rps": 1e6, "burst": 1e6}},
  {"name": "deny", "limit_keys": ["header:x-deny"], "algorithm": "token_bucket",
  "algorithm_config": {"rps": 1e-9, "burst": 0.5}}]}`

type streamCase struct {
	name   string
	wasm   func(testing.TB) []byte
	config string
	req    *wasmhost.Request
	reject bool
}

func streamCases() []streamCase {
	empty := func(tb testing.TB) []byte { return wasmtest.Build(tb, "./plugin/wasmhost/testdata/empty") }
	noHeaders := strings.Replace(benchConfig, "{", `{"response_headers": false, `, 1)
	return []streamCase{
		{name: "empty", wasm: empty, req: rq("x-api-key", "k")},
		{name: "allowed", wasm: pluginWasm, config: benchConfig, req: rq("x-api-key", "k")},
		{name: "allowed-noheaders", wasm: pluginWasm, config: noHeaders, req: rq("x-api-key", "k")},
		{name: "no-rule-applies", wasm: pluginWasm, config: benchConfig, req: rq("x-other", "k")},
		{name: "seed-tiered-jwt", wasm: pluginWasm, config: seedTiered,
			req: rq("x-api-key", "k", "authorization", bearer(`{"sub":"user-1234","plan":"enterprise","iat":1700000000,"exp":1900000000}`))},
		{name: "rejected", wasm: pluginWasm, config: benchConfig, req: rq("x-deny", "k"), reject: true},
	}
}

func streamVM(tb testing.TB, c streamCase) *wasmhost.VM {
	h, err := wasmhost.New(context.Background(), wasmhost.Config{Wasm: c.wasm(tb), PluginConfig: []byte(c.config), VMs: 1})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = h.Close(context.Background()) })
	return h.VM(0)
}

// BenchmarkFullStream measures one full stream (create, request headers,
// response headers, log, delete) on one VM.
func BenchmarkFullStream(b *testing.B) {
	for _, c := range streamCases() {
		b.Run(c.name, func(b *testing.B) {
			vm := streamVM(b, c)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				res, err := vm.HTTP(ctx, c.req)
				if err != nil {
					b.Fatal(err)
				}
				if res.Rejected != c.reject {
					b.Fatalf("rejected = %v", res.Rejected)
				}
			}
		})
	}
}

// TestFullStreamRatio (SLUICE_PERF=1) prints each case's full-stream time as
// a ratio to the empty plugin's, taking the best of many interleaved rounds
// so that a noisy machine does not skew the ratio.
func TestFullStreamRatio(t *testing.T) {
	if os.Getenv("SLUICE_PERF") == "" {
		t.Skip("set SLUICE_PERF=1")
	}
	cases := streamCases()
	vms := make([]*wasmhost.VM, len(cases))
	best := make([]time.Duration, len(cases))
	for i, c := range cases {
		vms[i] = streamVM(t, c)
	}
	ctx := context.Background()
	for round := 0; round < 40; round++ {
		for i, c := range cases {
			start := time.Now()
			for n := 0; n < 500; n++ {
				if _, err := vms[i].HTTP(ctx, c.req); err != nil {
					t.Fatal(err)
				}
			}
			if d := time.Since(start) / 500; best[i] == 0 || d < best[i] {
				best[i] = d
			}
		}
	}
	for i, c := range cases {
		t.Logf("%-18s %8v  %.2fx", c.name, best[i], float64(best[i])/float64(best[0]))
	}
}
