package wasmhost

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/plugin/wasmhost/wasmtest"
)

const (
	emptyPkg = "./plugin/wasmhost/testdata/empty"
	probePkg = "./plugin/wasmhost/testdata/probe"
)

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func probeWasm(tb testing.TB) []byte { return wasmtest.Build(tb, probePkg) }
func emptyWasm(tb testing.TB) []byte { return wasmtest.Build(tb, emptyPkg) }

// newHost starts a Host (probe plugin unless cfg.Wasm is set) closed at the
// end of the test.
func newHost(tb testing.TB, cfg Config) *Host {
	tb.Helper()
	if cfg.Wasm == nil {
		cfg.Wasm = probeWasm(tb)
	}
	if cfg.CacheDir == "" {
		cfg.CacheDir = wasmtest.CacheDir(tb)
	}
	h, err := New(context.Background(), cfg)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	tb.Cleanup(func() {
		if err := h.Close(context.Background()); err != nil {
			tb.Errorf("Close: %v", err)
		}
	})
	return h
}

// run sends a request whose x-probe header is script and returns the result.
func run(tb testing.TB, vm *VM, script string, extra ...Header) *Result {
	tb.Helper()
	res, err := vm.HTTP(context.Background(), &Request{Headers: append([]Header{{"x-probe", script}}, extra...)})
	if err != nil {
		tb.Fatalf("HTTP(%q): %v", script, err)
	}
	return res
}

// results returns the x-r<i> results of a request's commands (from the
// upstream headers, or for a rejected request from the headers the plugin saw).
func results(tb testing.TB, vm *VM, script string, extra ...Header) []string {
	tb.Helper()
	res := run(tb, vm, script, extra...)
	if res.UpstreamHeaders == nil {
		tb.Fatalf("%q: no upstream headers (rejected=%v paused=%v)", script, res.Rejected, res.Paused)
	}
	return resultsOf(res.UpstreamHeaders, "x-r")
}

// one runs a single command and returns its result.
func one(tb testing.TB, vm *VM, cmd string, extra ...Header) string {
	tb.Helper()
	r := results(tb, vm, cmd, extra...)
	if len(r) != 1 {
		tb.Fatalf("%q: results %q", cmd, r)
	}
	return r[0]
}

func resultsOf(h []Header, prefix string) []string {
	var out []string
	for i := 0; ; i++ {
		v, ok := header(h, prefix+itoa(i))
		if !ok {
			return out
		}
		out = append(out, v)
	}
}

func header(h []Header, name string) (string, bool) {
	for _, kv := range h {
		if kv[0] == name {
			return kv[1], true
		}
	}
	return "", false
}

func headerValues(h []Header, name string) []string {
	var out []string
	for _, kv := range h {
		if kv[0] == name {
			out = append(out, kv[1])
		}
	}
	return out
}

func logsContaining(h *Host, s string) []LogEntry {
	var out []LogEntry
	for _, l := range h.Logs() {
		if strings.Contains(l.Message, s) {
			out = append(out, l)
		}
	}
	return out
}

func ctxTimeout(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	tb.Cleanup(cancel)
	return ctx
}
