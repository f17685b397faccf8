//go:build !wasip1

package filter_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/proxytest"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/sluice-rl/sluice/plugin/bench"
	"github.com/sluice-rl/sluice/plugin/filter"
)

// The profile-guided build. The module is compiled with plugin/default.pgo
// (make pgo writes it from BenchmarkProfileWorkload): with a profile, Go
// inlines hot calls far beyond its usual budget, and under WAMR's fast JIT
// each call saved is 100-200 instructions. The workload runs the filter
// natively through the SDK's emulator; a profile names functions and call
// sites, not machine code, so a native one guides the wasm build. It
// covers the request paths operators run, weighted as traffic would be:
// mostly allowed requests, some rejected, tiers chosen by a JWT claim,
// windows, bounded identities and a shadow trial. See
// docs/design/performance.md.

// workloadPhase is one configuration and the requests sent to it, in turn.
type workloadPhase struct {
	name     string
	config   string
	requests []workloadRequest
}

type workloadRequest struct {
	headers [][2]string
	reject  bool // the filter must answer 429 (else it must pass)
}

func workloadPhases() []workloadPhase {
	never := func(s string) string { // a rate no run can exhaust
		return strings.NewReplacer(`"rps": 1000, "burst": 2000`, `"rps": 1e9, "burst": 1e9`,
			`"rps": 10, "burst": 20`, `"rps": 1e9, "burst": 1e9`).Replace(s)
	}
	windows := `{"rules": [
	  {"name": "sliding", "max_keys": 4096, "limit_keys": ["header:x-api-key"], "algorithm": "sliding_window",
	   "algorithm_config": {"limit": 1000000000, "window_seconds": 60}},
	  {"name": "fixed", "limit_keys": ["path"], "algorithm": "fixed_window",
	   "algorithm_config": {"limit": 1000000000, "window_seconds": 1}}]}`
	bounded := `{"rules": [{"name": "per-client", "max_keys": 4096, "limit_keys": ["header:x-api-key"],
	  "algorithm": "token_bucket", "algorithm_config": {"rps": 1e9, "burst": 1e9}}]}`
	req := func(kv ...string) [][2]string {
		h := [][2]string{{":path", "/v1/items"}, {":method", "GET"}, {":authority", "api.example.com"}}
		for i := 0; i+1 < len(kv); i += 2 {
			h = append(h, [2]string{kv[i], kv[i+1]})
		}
		return h
	}
	var clients []workloadRequest
	for i := range 64 {
		clients = append(clients, workloadRequest{headers: req("x-api-key", "client-"+strconv.Itoa(i))})
	}
	allowed := workloadRequest{headers: req("x-api-key", "k")}
	return []workloadPhase{
		{"allowed-and-rejected", benchConfig, []workloadRequest{allowed, allowed, allowed,
			{headers: req("x-deny", "k"), reject: true}, {headers: req("x-other", "k")}}},
		{"tiers-by-jwt", never(fairvisorTiered), []workloadRequest{
			{headers: req("x-api-key", "k", "authorization", bearer(`{"sub":"u1","plan":"enterprise"}`))},
			{headers: req("x-api-key", "k2", "authorization", bearer(`{"sub":"u2","plan":"free"}`))}}},
		{"windows", windows, clients[:8]},
		{"bounded-identities", bounded, clients},
		{"shadow-trial", bench.TrialConfig(1, "header:x-plan"), []workloadRequest{allowed,
			{headers: bench.BrowserHeaders("k", 0)}}},
	}
}

// BenchmarkProfileWorkload runs every phase for an equal share of b.N
// streams and checks each decision and that nothing failed open, so a
// profile of a broken filter fails instead of being written.
func BenchmarkProfileWorkload(b *testing.B) {
	phases := workloadPhases()
	per := max(b.N/len(phases), 1)
	for _, ph := range phases {
		runWorkloadPhase(b, ph, per)
	}
}

func runWorkloadPhase(tb testing.TB, ph workloadPhase, streams int) {
	opt := proxytest.NewEmulatorOption().WithVMContext(filter.NewVMContext()).WithPluginConfiguration([]byte(ph.config))
	host, reset := proxytest.NewHostEmulator(opt)
	defer reset()
	if st := host.StartVM(); st != types.OnVMStartStatusOK {
		tb.Fatalf("%s: on_vm_start = %v", ph.name, st)
	}
	if st := host.StartPlugin(); st != types.OnPluginStartStatusOK {
		tb.Fatalf("%s: on_configure = %v", ph.name, st)
	}
	resp := [][2]string{{":status", "200"}}
	for i := range streams {
		r := ph.requests[i%len(ph.requests)]
		id := host.InitializeHttpContext()
		host.CallOnRequestHeaders(id, r.headers, true)
		if rejected := host.GetSentLocalResponse(id) != nil; rejected != r.reject {
			tb.Fatalf("%s: request %d rejected = %v, want %v", ph.name, i, rejected, r.reject)
		}
		if !r.reject {
			host.CallOnResponseHeaders(id, resp, true)
		}
		host.CompleteHttpContext(id)
	}
	// A warning means a rule failed open or similar: not the path to profile.
	if w := append(host.GetWarnLogs(), host.GetErrorLogs()...); len(w) > 0 {
		tb.Fatalf("%s: the filter logged %q", ph.name, w[0])
	}
}

// TestProfileWorkloadDecides runs the workload briefly, so a change that
// breaks it fails here rather than when the profile is next refreshed.
func TestProfileWorkloadDecides(t *testing.T) {
	for _, ph := range workloadPhases() {
		t.Run(ph.name, func(t *testing.T) { runWorkloadPhase(t, ph, 50) })
	}
}
