package envoyhost_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/plugin/envoyhost"
	"github.com/sluice-rl/sluice/plugin/scenario"
	"github.com/sluice-rl/sluice/plugin/wasmhost/wasmtest"
)

// Modules are written once per test binary to a temporary directory: the
// host program reads the module from a path.
var (
	modOnce  sync.Once
	modDir   string
	modErr   error
	modPaths = map[string]string{}
)

func TestMain(m *testing.M) {
	code := m.Run()
	closeBenchHosts()
	if modDir != "" {
		os.RemoveAll(modDir)
	}
	os.Exit(code)
}

// module returns the path of the compiled package pkg ("./plugin",
// "./plugin/wasmhost/testdata/empty"), prebuilt in SLUICE_WASM_DIR or built.
func module(tb testing.TB, pkg string) string {
	tb.Helper()
	wasm := wasmtest.Build(tb, pkg)
	modOnce.Do(func() { modDir, modErr = os.MkdirTemp("", "sluice-envoyhost-") })
	if modErr != nil {
		tb.Fatal(modErr)
	}
	mu.Lock()
	defer mu.Unlock()
	if p, ok := modPaths[pkg]; ok {
		return p
	}
	p := filepath.Join(modDir, filepath.Base(pkg)+".wasm")
	if err := os.WriteFile(p, wasm, 0o644); err != nil {
		tb.Fatal(err)
	}
	modPaths[pkg] = p
	return p
}

var mu sync.Mutex

func plugin(tb testing.TB) string { return module(tb, "./plugin") }

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// eachMode runs f as a subtest per WAMR mode.
func eachMode(t *testing.T, f func(t *testing.T, start scenario.Starter)) {
	for _, m := range envoyhost.Modes {
		t.Run(string(m), func(t *testing.T) { f(t, envoyhost.Starter(m)) })
	}
}

func startHost(t *testing.T, start scenario.Starter, config string, vms int) scenario.Host {
	t.Helper()
	h, err := start(t, scenario.Options{WasmPath: plugin(t), Config: []byte(config), VMs: vms, Start: t0})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	return h
}

func header(h []scenario.Header, name string) (string, bool) {
	for _, kv := range h {
		if kv[0] == name {
			return kv[1], true
		}
	}
	return "", false
}

func key(k string) scenario.Request {
	return scenario.Request{Headers: []scenario.Header{{"x-api-key", k}}}
}

const burst3 = `{"rules": [{"name": "api", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
  "algorithm_config": {"tokens_per_second": 1, "burst": 3}}]}`

func TestEnvoyHostScenarios(t *testing.T) {
	for _, m := range envoyhost.Modes {
		t.Run(string(m), func(t *testing.T) { scenario.Run(t, envoyhost.Starter(m)) })
	}
}

func TestConfigurationRefusedByOnConfigureIsAnError(t *testing.T) {
	eachMode(t, func(t *testing.T, start scenario.Starter) {
		_, err := start(t, scenario.Options{WasmPath: plugin(t), Config: []byte(`{"rules": [{"name": "x", "algorithm": "nope"}]}`)})
		if err == nil {
			t.Fatal("a configuration the plugin rejects started a host")
		}
		if !strings.Contains(err.Error(), "proxy_on_configure returned false") || !strings.Contains(err.Error(), "VM 0") {
			t.Fatalf("error does not say which VM refused in on_configure: %v", err)
		}
	})
}

func TestBurstOfThreeThenRateLimitedWithHeaders(t *testing.T) {
	eachMode(t, func(t *testing.T, start scenario.Starter) {
		h := startHost(t, start, burst3, 1)
		rs, err := h.HTTPMany(0, []scenario.Request{key("k"), key("k"), key("k"), key("k")})
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range rs[:3] {
			if r.Rejected || r.Status != 200 || r.UpstreamHeaders == nil {
				t.Fatalf("request %d: rejected=%v status=%d upstream=%v", i, r.Rejected, r.Status, r.UpstreamHeaders)
			}
		}
		r := rs[3]
		if !r.Rejected || r.Status != 429 || r.UpstreamHeaders != nil {
			t.Fatalf("fourth request: rejected=%v status=%d upstream=%v, want a local 429", r.Rejected, r.Status, r.UpstreamHeaders)
		}
		for _, name := range []string{"ratelimit", "ratelimit-policy", "retry-after"} {
			if _, ok := header(r.ResponseHeaders, name); !ok {
				t.Errorf("429 without %s: %v", name, r.ResponseHeaders)
			}
		}
		if v, _ := header(r.ResponseHeaders, "ratelimit-policy"); v != `"api";q=3;w=3` {
			t.Errorf("ratelimit-policy %q", v)
		}
		if v, _ := header(r.ResponseHeaders, "content-type"); v != "application/json" {
			t.Errorf("content-type %q: the plugin's own content-type must win over the host's text/plain", v)
		}
		if n, ok := h.Metric("sluice.rule.api.rejected"); !ok || n != 1 {
			t.Errorf("sluice.rule.api.rejected = %d, %v; want 1", n, ok)
		}
	})
}

func TestAdvanceRefillsTheBucket(t *testing.T) {
	eachMode(t, func(t *testing.T, start scenario.Starter) {
		h := startHost(t, start, burst3, 1)
		for i := 0; i < 4; i++ {
			if _, err := h.HTTP(0, key("k")); err != nil {
				t.Fatal(err)
			}
		}
		r, _ := h.HTTP(0, key("k"))
		if !r.Rejected {
			t.Fatal("empty bucket admitted a request")
		}
		h.Advance(time.Second)
		r, err := h.HTTP(0, key("k"))
		if err != nil || r.Rejected {
			t.Fatalf("after one second (one token): rejected=%v err=%v", r.Rejected, err)
		}
		r, _ = h.HTTP(0, key("k"))
		if !r.Rejected {
			t.Fatal("one second refilled more than one token")
		}
	})
}

func TestReconfigureKeepsBuckets(t *testing.T) {
	eachMode(t, func(t *testing.T, start scenario.Starter) {
		h := startHost(t, start, burst3, 2)
		for i := 0; i < 3; i++ {
			if r, err := h.HTTP(i%2, key("k")); err != nil || r.Rejected {
				t.Fatalf("request %d: %v %v", i, r.Rejected, err)
			}
		}
		// Same rule name and limits, another configuration text.
		if err := h.Reconfigure([]byte(strings.Replace(burst3, `"rules"`, `"mode": "enforce", "rules"`, 1))); err != nil {
			t.Fatal(err)
		}
		for vm := 0; vm < 2; vm++ {
			if r, err := h.HTTP(vm, key("k")); err != nil || !r.Rejected {
				t.Fatalf("VM %d after the update: rejected=%v err=%v; the bucket was reset", vm, r.Rejected, err)
			}
		}
		if err := h.Reconfigure([]byte(`{"rules": [{"name": "x", "algorithm": "nope"}]}`)); err == nil {
			t.Fatal("an invalid configuration was accepted")
		}
		if r, err := h.HTTP(0, key("k")); err != nil || !r.Rejected {
			t.Fatalf("after a refused update: rejected=%v err=%v; want the old configuration in force", r.Rejected, err)
		}
	})
}

// Two VMs race on one new hot key through the library's real shared data:
// exactly the bucket is admitted, in every trial.
func TestTwoVMsRacingOnAHotKeyAdmitExactlyTheBucket(t *testing.T) {
	const tokens, trials = 100, 20
	cfg := fmt.Sprintf(`{"rules": [{"name": "hot", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
	  "algorithm_config": {"tokens_per_second": 1, "burst": %d}}]}`, tokens)
	eachMode(t, func(t *testing.T, start scenario.Starter) {
		h := startHost(t, start, cfg, 2)
		for trial := 0; trial < trials; trial++ {
			reqs := make([]scenario.Request, tokens)
			for i := range reqs {
				reqs[i] = key(fmt.Sprintf("trial-%d", trial))
			}
			var wg sync.WaitGroup
			admitted := make([]int, 2)
			errs := make([]error, 2)
			for vm := 0; vm < 2; vm++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rs, err := h.HTTPMany(vm, reqs)
					errs[vm] = err
					for _, r := range rs {
						if !r.Rejected {
							admitted[vm]++
						}
					}
				}()
			}
			wg.Wait()
			if errs[0] != nil || errs[1] != nil {
				t.Fatal(errs)
			}
			if got := admitted[0] + admitted[1]; got != tokens {
				t.Fatalf("trial %d: admitted %d (VM 0 %d, VM 1 %d), want exactly %d", trial, got, admitted[0], admitted[1], tokens)
			}
		}
	})
}

func TestSharedDataSizeGrowsWithIdentities(t *testing.T) {
	eachMode(t, func(t *testing.T, start scenario.Starter) {
		h := startHost(t, start, burst3, 1)
		k0, b0, err := h.SharedDataSize()
		if err != nil {
			t.Fatal(err)
		}
		var reqs []scenario.Request
		for i := 0; i < 50; i++ {
			reqs = append(reqs, key(fmt.Sprintf("id-%d", i)))
		}
		if _, err := h.HTTPMany(0, reqs); err != nil {
			t.Fatal(err)
		}
		k1, b1, err := h.SharedDataSize()
		if err != nil {
			t.Fatal(err)
		}
		if k1 <= k0 || b1 <= b0 {
			t.Fatalf("shared data %d keys/%d bytes before, %d/%d after 50 identities", k0, b0, k1, b1)
		}
		if _, ok, err := h.SharedGet("no such key"); ok || err != nil {
			t.Fatalf("SharedGet of a missing key: ok=%v err=%v", ok, err)
		}
	})
}

func TestPausedRequestResumedByTickAfterAdvance(t *testing.T) {
	const cfg = `{"rules": [{"name": "smooth", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
	  "algorithm_config": {"tokens_per_second": 10, "burst": 10, "max_delay_ms": 500}}]}`
	eachMode(t, func(t *testing.T, start scenario.Starter) {
		h := startHost(t, start, cfg, 1)
		for i := 0; i < 10; i++ {
			if r, err := h.HTTP(0, key("k")); err != nil || r.Rejected || r.Paused {
				t.Fatalf("request %d within the burst: %+v %v", i, r, err)
			}
		}
		r, err := h.HTTP(0, key("k"))
		if err != nil || !r.Paused || r.Stream == nil {
			t.Fatalf("11th request: paused=%v err=%v, want held", r.Paused, err)
		}
		if r.Stream.Settled() {
			t.Fatal("settled before its token is due")
		}
		h.Advance(150 * time.Millisecond)
		if err := h.Tick(); err != nil {
			t.Fatal(err)
		}
		if !r.Stream.Settled() {
			t.Fatalf("not resumed by the tick after its token came; logs: %v", h.Logs())
		}
		done, err := r.Stream.Complete()
		if err != nil || done.Rejected || done.Status != 200 || done.UpstreamHeaders == nil {
			t.Fatalf("completed: %+v %v", done, err)
		}
	})
}

func TestTelemetryCallAnsweredThroughPendingCalls(t *testing.T) {
	const cfg = `{"telemetry": {"cluster": "sluice_admin", "token": "t0k", "interval_ms": 1000},
	  "rules": [{"name": "api", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
	  "algorithm_config": {"tokens_per_second": 1, "burst": 3}}]}`
	eachMode(t, func(t *testing.T, start scenario.Starter) {
		h, err := start(t, scenario.Options{WasmPath: plugin(t), Config: []byte(cfg), Start: t0, Clusters: []string{"sluice_admin"}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.HTTP(0, key("k")); err != nil {
			t.Fatal(err)
		}
		h.Advance(time.Second)
		if err := h.Tick(); err != nil {
			t.Fatal(err)
		}
		calls, err := h.PendingCalls()
		if err != nil {
			t.Fatal(err)
		}
		if len(calls) != 1 {
			t.Fatalf("%d pending calls after the interval, want one report", len(calls))
		}
		c := calls[0]
		if c.Cluster != "sluice_admin" || len(c.Body) == 0 {
			t.Fatalf("call %+v", c)
		}
		if m, _ := header(c.Headers, ":method"); m != "POST" {
			t.Errorf(":method %q", m)
		}
		if err := h.Respond(c.ID, []scenario.Header{{":status", "204"}}, nil); err != nil {
			t.Fatal(err)
		}
		if calls, _ := h.PendingCalls(); len(calls) != 0 {
			t.Fatalf("still pending after Respond: %v", calls)
		}
		if err := h.Respond(c.ID, nil, nil); err == nil {
			t.Fatal("answering a call twice succeeded")
		}
	})
}

func TestBadVMAndUnknownStreamAreErrors(t *testing.T) {
	eachMode(t, func(t *testing.T, start scenario.Starter) {
		h := startHost(t, start, burst3, 1)
		if _, err := h.HTTP(1, key("k")); err == nil {
			t.Fatal("a request on a VM the host does not have succeeded")
		}
		// The host program answers a malformed line with an error and goes on.
		if r, err := h.HTTP(0, key("k\x00%\n ")); err != nil || r.Rejected {
			t.Fatalf("binary header value: %+v %v", r, err)
		}
	})
}

func TestTrapIsAnErrorNamingTheVMAndCallback(t *testing.T) {
	probe := module(t, "./plugin/wasmhost/testdata/probe")
	eachMode(t, func(t *testing.T, start scenario.Starter) {
		h, err := start(t, scenario.Options{WasmPath: probe, VMs: 2, Start: t0})
		if err != nil {
			t.Fatal(err)
		}
		_, err = h.HTTP(1, scenario.Request{Headers: []scenario.Header{{"x-probe", "trap"}}})
		if err == nil || !strings.Contains(err.Error(), "VM 1") || !strings.Contains(err.Error(), "proxy_on_request_headers") {
			t.Fatalf("trap: %v, want an error naming VM 1 and proxy_on_request_headers", err)
		}
		if _, err := h.HTTP(1, scenario.Request{}); err == nil || !strings.Contains(err.Error(), "failed earlier") {
			t.Fatalf("after the trap VM 1 answered: %v", err)
		}
		if r, err := h.HTTP(0, scenario.Request{}); err != nil || r.Status != 200 {
			t.Fatalf("VM 0 after VM 1 trapped: %+v %v", r, err)
		}
	})
}
