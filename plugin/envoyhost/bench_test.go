package envoyhost_test

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"

	"github.com/sluice-rl/sluice/plugin/envoyhost"
	"github.com/sluice-rl/sluice/plugin/scenario"
)

// Benchmarks under Envoy's own wasm host. Streams run inside the host
// program (Host.Bench: no pipe round trip per stream) and every plugin case
// is measured against the empty plugin in the same run, in interleaved
// chunks, so a noisy machine slows both alike. Metrics (benchstat reads
// them): host-ns/op (one plugin stream), floor-ns/op (one empty-plugin
// stream), x-floor (their ratio); the identities cases add x-exact (bounded
// storage against exact per-key storage, same run).
//
//	go test ./plugin/envoyhost -run '^$' -bench . -count 6 -benchtime 20000x

// benchConfig: "bench" never runs out (the clock does not move here),
// "deny" rejects everything (cost 1 > burst 0.5).
const benchConfig = `{"rules": [{"name": "bench", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
  "algorithm_config": {"rps": 1e9, "burst": 1e12}},
  {"name": "deny", "limit_keys": ["header:x-deny"], "algorithm": "token_bucket",
  "algorithm_config": {"rps": 1e-9, "burst": 0.5}}]}`

// identityRule: one bucket per x-client value; extra sets max_keys.
func identityRule(extra string) string {
	return fmt.Sprintf(`{"rules": [{"name": "per-client", %s"limit_keys": ["header:x-client"], "algorithm": "token_bucket",
  "algorithm_config": {"rps": 1e9, "burst": 1e12}}]}`, extra)
}

const chunk = 2000

var (
	benchMu    sync.Mutex
	benchHosts = map[string]*benchHost{}
)

// benchHost is a host kept for every run of a benchmark (b.N grows) and the
// count of identities it has seen.
type benchHost struct {
	h    *envoyhost.Host
	next int
}

func closeBenchHosts() {
	benchMu.Lock()
	defer benchMu.Unlock()
	for k, bh := range benchHosts {
		bh.h.Close()
		delete(benchHosts, k)
	}
}

func benchHostFor(b *testing.B, mode envoyhost.Mode, wasm, config string) *benchHost {
	b.Helper()
	envoyhost.Require(b, mode)
	benchMu.Lock()
	defer benchMu.Unlock()
	k := string(mode) + "\x00" + wasm + "\x00" + config
	if bh := benchHosts[k]; bh != nil {
		return bh
	}
	h, err := envoyhost.Start(mode, scenario.Options{WasmPath: wasm, Config: []byte(config), Start: t0})
	if err != nil {
		b.Fatal(err)
	}
	bh := &benchHost{h: h}
	benchHosts[k] = bh
	return bh
}

// run sends n streams of r (identities continue from bh.next) and returns ns.
func (bh *benchHost) run(b *testing.B, n int, r scenario.Request, wantRejected bool) int64 {
	d, rejected, err := bh.h.Bench(0, bh.next, n, r)
	if err != nil {
		b.Fatal(err)
	}
	bh.next += n
	if wantRejected && rejected != n || !wantRejected && rejected != 0 {
		b.Fatalf("%d of %d streams rejected (want %v for all)", rejected, n, wantRejected)
	}
	return d.Nanoseconds()
}

func hdr(kv ...string) scenario.Request {
	var r scenario.Request
	for i := 0; i+1 < len(kv); i += 2 {
		r.Headers = append(r.Headers, scenario.Header{kv[i], kv[i+1]})
	}
	return r
}

func BenchmarkEnvoyHostStream(b *testing.B) {
	cases := []struct {
		name   string
		config string
		req    scenario.Request
		reject bool
	}{
		{"allowed", benchConfig, hdr("x-api-key", "k"), false},
		{"rejected", benchConfig, hdr("x-deny", "k"), true},
	}
	for _, mode := range envoyhost.Modes {
		for _, c := range cases {
			b.Run(string(mode)+"/"+c.name, func(b *testing.B) {
				p := benchHostFor(b, mode, plugin(b), c.config)
				e := benchHostFor(b, mode, module(b, "./plugin/wasmhost/testdata/empty"), "")
				var pns, ens int64
				b.ResetTimer()
				for done := 0; done < b.N; done += chunk {
					n := min(chunk, b.N-done)
					pns += p.run(b, n, c.req, c.reject)
					ens += e.run(b, n, c.req, false)
				}
				report(b, pns, ens)
			})
		}
	}
}

func report(b *testing.B, pns, ens int64) {
	b.ReportMetric(float64(pns)/float64(b.N), "host-ns/op")
	b.ReportMetric(float64(ens)/float64(b.N), "floor-ns/op")
	b.ReportMetric(float64(pns)/float64(ens), "x-floor")
}

// identities is how many distinct identities each side has seen before the
// measured ones: SLUICE_ENVOYHOST_IDENTITIES, default a million.
func identities(b *testing.B) int {
	if s := os.Getenv("SLUICE_ENVOYHOST_IDENTITIES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			b.Fatalf("SLUICE_ENVOYHOST_IDENTITIES=%q: want a count", s)
		}
		return n
	}
	return 1_000_000
}

// BenchmarkEnvoyHostMillionIdentities: every measured stream is a new
// identity after a million others, with the default bounded storage
// (max_keys) and with exact per-key storage (max_keys 0), interleaved.
// host-ns/op and x-floor are the bounded side's; x-exact is bounded against
// exact.
func BenchmarkEnvoyHostMillionIdentities(b *testing.B) {
	req := hdr("x-client", "client-{i}")
	for _, mode := range envoyhost.Modes {
		b.Run(string(mode), func(b *testing.B) {
			bounded := benchHostFor(b, mode, plugin(b), identityRule(""))
			exact := benchHostFor(b, mode, plugin(b), identityRule(`"max_keys": 0, `))
			e := benchHostFor(b, mode, module(b, "./plugin/wasmhost/testdata/empty"), "")
			prefill := identities(b)
			for _, side := range []*benchHost{bounded, exact} {
				for side.next < prefill {
					side.run(b, min(50_000, prefill-side.next), req, false)
				}
			}
			var bns, xns, ens int64
			b.ResetTimer()
			for done := 0; done < b.N; done += chunk {
				n := min(chunk, b.N-done)
				bns += bounded.run(b, n, req, false)
				xns += exact.run(b, n, req, false)
				ens += e.run(b, n, req, false)
			}
			report(b, bns, ens)
			b.ReportMetric(float64(xns)/float64(b.N), "exact-ns/op")
			b.ReportMetric(float64(bns)/float64(xns), "x-exact")
			keys, bytes, err := bounded.h.SharedDataSize()
			if err == nil {
				b.ReportMetric(float64(bytes), "bounded-shared-bytes")
				b.ReportMetric(float64(keys), "bounded-shared-keys")
			}
			if keys, bytes, err := exact.h.SharedDataSize(); err == nil {
				b.ReportMetric(float64(bytes), "exact-shared-bytes")
				b.ReportMetric(float64(keys), "exact-shared-keys")
			}
		})
	}
}
