package envoyhost_test

import (
	"encoding/binary"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/sluice-rl/sluice/plugin/bench"
	"github.com/sluice-rl/sluice/plugin/envoyhost"
	"github.com/sluice-rl/sluice/plugin/scenario"
	"github.com/sluice-rl/sluice/shared/simulate"
)

// Benchmarks under Envoy's own wasm host. Streams run inside the host
// program (Host.Bench: no pipe round trip per stream) and every plugin case
// is measured against the empty plugin in the same run, in interleaved
// chunks, so a noisy machine slows both alike. Metrics (benchstat reads
// them): host-ns/op (one plugin stream), floor-ns/op (one empty-plugin
// stream), x-floor (their ratio); the identities cases add x-exact (bounded
// storage against exact per-key storage, same run); the stream cases add
// the same ratio on the VM threads' CPU time (x-floor-cpu), steadier on a
// loaded machine.
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
	key  string // in benchHosts
	next int
	cpu  int64 // CPU ns of the streams run since the last cpuSince
}

// cpuSince returns and resets bh.cpu.
func (bh *benchHost) cpuSince() int64 {
	c := bh.cpu
	bh.cpu = 0
	return c
}

// release closes hosts and forgets them, so that the next run starts new
// ones.
func release(hosts ...*benchHost) {
	benchMu.Lock()
	defer benchMu.Unlock()
	for _, bh := range hosts {
		if bh != nil && benchHosts[bh.key] == bh {
			delete(benchHosts, bh.key)
			bh.h.Close()
		}
	}
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
	// Every host of a run shares one CPU, so their ratios compare like
	// with like (envoyhost.Host.PinTo says why).
	cpu, pin, err := envoyhost.BenchCPU()
	if err == nil && pin {
		err = h.PinTo(cpu)
	}
	if err != nil {
		h.Close()
		b.Fatal(err)
	}
	bh := &benchHost{h: h, key: k}
	benchHosts[k] = bh
	return bh
}

// run sends n streams of r (identities continue from bh.next), adds the
// VM thread's CPU time to bh.cpu and returns the wall time in ns.
func (bh *benchHost) run(b *testing.B, n int, r scenario.Request, wantRejected bool) int64 {
	res, err := bh.h.Bench(0, bh.next, n, r)
	if err != nil {
		b.Fatal(err)
	}
	bh.next += n
	if wantRejected && res.Rejected != n || !wantRejected && res.Rejected != 0 {
		b.Fatalf("%d of %d streams rejected (want %v for all)", res.Rejected, n, wantRejected)
	}
	bh.cpu += res.CPU.Nanoseconds()
	return res.Wall.Nanoseconds()
}

func hdr(kv ...string) scenario.Request {
	var r scenario.Request
	for i := 0; i+1 < len(kv); i += 2 {
		r.Headers = append(r.Headers, scenario.Header{kv[i], kv[i+1]})
	}
	return r
}

type streamCase struct {
	name   string
	config string
	req    scenario.Request
	reject bool
	// baseConfig, when set, runs the filter with this configuration as
	// the base (see benchStreams): x-base is then config against it.
	baseConfig string
}

// benchPrimers ready each new host of a configuration before its first
// streams: a global rule's lease, say.
var benchPrimers = map[string]func(b *testing.B, bh *benchHost){
	spentConfig: spendDeny, blockedConfig: spendDeny,
}

// spentConfig's "deny" admits one request: once it has, the identity's
// bucket is stored and empty, as a client's that spent its burst, and its
// requests are refused. blockedConfig blocks it when it is refused.
var (
	spentConfig   = strings.Replace(benchConfig, `"burst": 0.5}`, `"burst": 1}`, 1)
	blockedConfig = strings.Replace(spentConfig, `"burst": 1}`, `"burst": 1, "block_seconds": 60}`, 1)
)

func spendDeny(b *testing.B, bh *benchHost) {
	b.Helper()
	if res, err := bh.h.HTTP(0, hdr("x-deny", "k")); err != nil || res.Rejected {
		b.Fatalf("the first request of x-deny: %v (rejected %v)", err, res.Rejected)
	}
}

func BenchmarkEnvoyHostStream(b *testing.B) {
	benchStreams(b, []streamCase{
		{"allowed", benchConfig, hdr("x-api-key", "k"), false, ""},
		{"rejected", benchConfig, hdr("x-deny", "k"), true, ""},
	})
}

// BenchmarkEnvoyHostProbe: variants of the allowed request that isolate
// parts of its cost (each against the empty plugin, like the cases above):
// without the response fields, with the older (opt-in) ones too (and under
// their X-RateLimit- names, x-base against the unprefixed), a rejection
// carrying a field of your own ("reject_headers"; x-base against the
// rejection without), the rule's own limit and remaining sent too
// ("limit_headers"; x-base against the allowed request), a request no
// rule applies to (one header read, nothing else), the bucket keyed by
// the client certificate, the route or a value of the dynamic metadata (a
// property read), the client address or its network (masked), a cookie or
// nothing ("all") instead of a header, the
// rule enforced on a share of its identities (the identity hashed on every
// request; while the rule marks, the filter owns the shadow header, as
// beside a shadow rule), charged by the response's status instead of per request, and a
// concurrency rule in its place (a place taken, then given back when the
// stream ends) (x-base: against the allowed request's configuration, same
// request).
func BenchmarkEnvoyHostProbe(b *testing.B) {
	with := func(field string) string { return `{` + field + `, ` + benchConfig[1:] }
	// keyedBy is the allowed request's case with the bucket keyed by a
	// property source instead: the same request, carrying the property.
	keyedBy := func(name, source, property, value string) streamCase {
		r := hdr("x-api-key", "k")
		r.Properties = map[string][]byte{property: []byte(value)}
		return streamCase{name, strings.Replace(benchConfig, `"header:x-api-key"`, `"`+source+`"`, 1), r, false, benchConfig}
	}
	// countedBy is the allowed request's case with the bucket charged by
	// the response's status, the upstream answering status: a 200 is read
	// and charged nothing, a 401 is charged after the response.
	countedBy := func(name, status string) streamCase {
		r := hdr("x-api-key", "k")
		r.ResponseHeaders = []scenario.Header{{":status", status}}
		counted := strings.Replace(benchConfig, `"burst": 1e12}`, `"burst": 1e12, "cost_source": "response_status:401,403"}`, 1)
		return streamCase{name, counted, r, false, benchConfig}
	}
	// Keyed by a cookie of a browser's Cookie header instead of the
	// header: the same request, carrying both.
	withCookie := hdr("x-api-key", "k")
	withCookie.Headers = append(withCookie.Headers, scenario.Header{"cookie", "_ga=GA1.2.1234567.1700000000; theme=dark; lang=en; sid=s-4f1c2a"})
	byCookie := streamCase{"cookie", strings.Replace(benchConfig, `"header:x-api-key"`, `"cookie:sid"`, 1), withCookie, false, benchConfig}
	inFlight := strings.Replace(benchConfig, `"algorithm": "token_bucket",
  "algorithm_config": {"rps": 1e9, "burst": 1e12}}`, `"algorithm": "concurrency",
  "algorithm_config": {"limit": 1000}}`, 1)
	benchStreams(b, []streamCase{
		{"concurrency", inFlight, hdr("x-api-key", "k"), false, benchConfig},
		countedBy("response-status-uncounted", "200"),
		countedBy("response-status-counted", "401"),
		keyedBy("peer-principal", "peer:principal", simulate.PeerPrincipalProperty, "spiffe://cluster.local/ns/shop/sa/web"),
		keyedBy("route", "route", simulate.RouteProperty, "checkout"),
		keyedBy("cluster", "cluster", simulate.ClusterProperty, "outbound|8080||payments.prod.svc.cluster.local"),
		keyedBy("connection", "connection", simulate.ConnectionProperty, string(binary.LittleEndian.AppendUint64(nil, 4294967303))),
		keyedBy("ip-address", "ip:address", "source.address", "203.0.113.7:5555"),
		keyedBy("ip-network", "ip:network", "source.address", "[2001:db8:1:2::7]:5555"),
		byCookie,
		{"all", strings.Replace(benchConfig, `"header:x-api-key"`, `"all"`, 1), hdr("x-api-key", "k"), false, benchConfig},
		sharedBy("enforce-percent", true, ""),
		sharedBy("enforce-percent-spared", false, ""),
		sharedBy("enforce-percent-unmarked", true, ` "shadow_mark": false,`),
		{"shadow-rule-beside", strings.Replace(benchConfig, `{"name": "deny",`, `{"name": "deny", "mode": "shadow",`, 1), hdr("x-api-key", "k"), false, benchConfig},
		keyedBy("metadata", "metadata:envoy.filters.http.jwt_authn:jwt_payload.sub",
			"metadata.filter_metadata.envoy.filters.http.jwt_authn.jwt_payload.sub", "alice"),
		{"no-response-headers", with(`"response_headers": false`), hdr("x-api-key", "k"), false, ""},
		{"legacy-headers", with(`"legacy_headers": true`), hdr("x-api-key", "k"), false, ""},
		{"x-ratelimit-headers", with(`"legacy_headers": "x-ratelimit"`), hdr("x-api-key", "k"), false, with(`"legacy_headers": true`)},
		// A blocked identity's refusals (block_seconds): its first refusal
		// wrote the block; x-base against the refusals of a bucket spent
		// the same way, without the block.
		{"rejected-blocked", blockedConfig, hdr("x-deny", "k"), true, spentConfig},
		{"rejected-reject-headers", with(`"reject_headers": {"x-local-rate-limit": "true"}`), hdr("x-deny", "k"), true, benchConfig},
		{"limit-headers", strings.Replace(benchConfig, `"name": "bench",`, `"name": "bench", "limit_headers": {"limit": "x-ratelimit-limit-minute", "remaining": "x-ratelimit-remaining-minute"},`, 1),
			hdr("x-api-key", "k"), false, benchConfig},
		{"no-rule-applies", benchConfig, hdr("x-other", "k"), false, ""},
	})
}

// sharedBy is the allowed request's case with the rule enforced on half of
// its identities (and extra fields), for an API key the rule enforces on
// (enforced) or spares. A spared identity's request gets no RateLimit
// fields from the rule.
func sharedBy(name string, enforced bool, extra string) streamCase {
	key := scenario.KeyAt(50, enforced)
	return streamCase{name, strings.Replace(benchConfig, `"name": "bench",`, `"name": "bench", "enforce_percent": 50,`+extra, 1),
		hdr("x-api-key", key), false, benchConfig}
}

// benchStreams measures each case against the empty plugin, interleaved.
// SLUICE_ENVOYHOST_BASE_WASM names another build of the filter (say, the
// one before a change) run with the same configuration in the same
// interleaved loop: base-ns/op is its stream and x-base the plugin's
// stream against it. A case's baseConfig runs this filter with that
// configuration as the base instead.
func benchStreams(b *testing.B, cases []streamCase) {
	basePath := os.Getenv("SLUICE_ENVOYHOST_BASE_WASM")
	for _, mode := range envoyhost.Modes {
		for _, c := range cases {
			b.Run(string(mode)+"/"+c.name, func(b *testing.B) {
				p := benchHostFor(b, mode, plugin(b), c.config)
				if prime := benchPrimers[c.config]; prime != nil && p.next == 0 {
					prime(b, p)
				}
				e := benchHostFor(b, mode, module(b, "./plugin/wasmhost/testdata/empty"), "")
				var base *benchHost
				switch {
				case c.baseConfig != "":
					base = benchHostFor(b, mode, plugin(b), c.baseConfig)
					if prime := benchPrimers[c.baseConfig]; prime != nil && base.next == 0 {
						prime(b, base)
					}
				case basePath != "":
					base = benchHostFor(b, mode, basePath, c.config)
				}
				// New hosts run a chunk before the clock starts (the first
				// streams fill the VM's caches and grow its buffers).
				for _, h := range []*benchHost{p, e, base} {
					if h != nil && h.next == 0 {
						h.run(b, chunk, c.req, h != e && c.reject)
					}
				}
				var pns, ens, bns int64
				p.cpuSince()
				e.cpuSince()
				if base != nil {
					base.cpuSince()
				}
				b.ResetTimer()
				for done := 0; done < b.N; done += chunk {
					n := min(chunk, b.N-done)
					pns += p.run(b, n, c.req, c.reject)
					ens += e.run(b, n, c.req, false)
					if base != nil {
						bns += base.run(b, n, c.req, c.reject)
					}
				}
				report(b, pns, ens)
				pcpu := p.cpuSince()
				reportCPU(b, pcpu, e.cpuSince())
				if base != nil {
					bcpu := base.cpuSince()
					b.ReportMetric(float64(bns)/float64(b.N), "base-ns/op")
					b.ReportMetric(float64(pns)/float64(bns), "x-base")
					if bcpu > 0 && pcpu > 0 {
						b.ReportMetric(float64(pcpu)/float64(bcpu), "x-base-cpu")
					}
				}
				// Each measured run gets new hosts: a host keeps the
				// memory layout it started with, which moved two hosts
				// of the same build and configuration up to 2.5% apart,
				// so the median of -count runs averages it out.
				if b.N > 1 {
					release(p, e, base)
				}
			})
		}
	}
}

// BenchmarkEnvoyHostTrial: a shadow trial as the admin pushes it, one or
// four rules that do not match the request (bench.TrialConfig, matching on
// a header the current policy does not read, or for "on-x-api-key" on one
// it reads), against the empty plugin and
// (x-base) against the same configuration without the trial, interleaved.
// The request has 5 headers (the pseudo-headers and x-api-key); the
// "browser" cases send the 15 of a realistic request
// (bench.BrowserHeaders), "browser+plan" those and x-plan: free. The
// "headers=N" cases add filler headers up to N (+plan: x-plan among them)
// without a trial base: with SLUICE_ENVOYHOST_BASE_WASM set to a build that
// reads header by header, their x-base is the whole-map read against
// single reads at that header count (how maxPairsHeaders in
// plugin/filter/pairs.go was chosen).
func BenchmarkEnvoyHostTrial(b *testing.B) {
	req := hdr("x-api-key", "k")
	browser := scenario.Request{Headers: bench.BrowserHeaders("k", 0)}
	cases := []streamCase{
		{name: "no-trial", config: bench.TrialConfig(0, ""), req: req},
		{name: "trial-rules=1", config: bench.TrialConfig(1, "header:x-plan"), req: req, baseConfig: bench.TrialConfig(0, "")},
		{name: "trial-rules=4", config: bench.TrialConfig(4, "header:x-plan"), req: req, baseConfig: bench.TrialConfig(0, "")},
		{name: "browser/no-trial", config: bench.TrialConfig(0, ""), req: browser},
		{name: "browser/trial-rules=1", config: bench.TrialConfig(1, "header:x-plan"), req: browser, baseConfig: bench.TrialConfig(0, "")},
		{name: "browser/trial-rules=4", config: bench.TrialConfig(4, "header:x-plan"), req: browser, baseConfig: bench.TrialConfig(0, "")},
	}
	// The same with x-plan: free sent, as under a trial of plan tiers (the
	// trial rule reads a header that is there, matching another value).
	plan := scenario.Request{Headers: append(bench.BrowserHeaders("k", 0), scenario.Header{"x-plan", "free"})}
	cases = append(cases,
		streamCase{name: "browser+plan/no-trial", config: bench.TrialConfig(0, ""), req: plan},
		// The same configuration on both sides (a second host: the key
		// differs by a space): how near 1.00 x-base-cpu reads when
		// nothing differs.
		streamCase{name: "browser+plan/same-as-base", config: bench.TrialConfig(0, ""), req: plan, baseConfig: bench.TrialConfig(0, "") + " "},
		streamCase{name: "browser+plan/trial-rules=1", config: bench.TrialConfig(1, "header:x-plan"), req: plan, baseConfig: bench.TrialConfig(0, "")},
		streamCase{name: "browser+plan/trial-rules=4", config: bench.TrialConfig(4, "header:x-plan"), req: plan, baseConfig: bench.TrialConfig(0, "")},
		// Trial rules on a header the current policy reads already (as when
		// the draft changes the numbers of rules it has): no read more.
		streamCase{name: "browser+plan/on-x-api-key/trial-rules=1", config: bench.TrialConfig(1, "header:x-api-key"), req: plan, baseConfig: bench.TrialConfig(0, "")},
		streamCase{name: "browser+plan/on-x-api-key/trial-rules=4", config: bench.TrialConfig(4, "header:x-api-key"), req: plan, baseConfig: bench.TrialConfig(0, "")})
	for _, n := range []int{16, 24, 32, 64} {
		cases = append(cases, streamCase{name: fmt.Sprintf("headers=%d/trial-rules=1", n), config: bench.TrialConfig(1, "header:x-plan"),
			req: scenario.Request{Headers: bench.BrowserHeaders("k", n-15)}})
		cases = append(cases, streamCase{name: fmt.Sprintf("headers=%d+plan/trial-rules=1", n), config: bench.TrialConfig(1, "header:x-plan"),
			req: scenario.Request{Headers: append(bench.BrowserHeaders("k", n-16), scenario.Header{"x-plan", "free"})}})
	}
	benchStreams(b, cases)
}

// reportCPU reports the same on the VM threads' CPU time: cpu-ns/op,
// cpu-floor-ns/op, x-floor-cpu.
func reportCPU(b *testing.B, pcpu, ecpu int64) {
	if pcpu == 0 || ecpu == 0 { // a host program that does not measure it
		return
	}
	b.ReportMetric(float64(pcpu)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(ecpu)/float64(b.N), "cpu-floor-ns/op")
	b.ReportMetric(float64(pcpu)/float64(ecpu), "x-floor-cpu")
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

// BenchmarkEnvoyHostCallbacks breaks a stream down: the time in each
// callback (metrics <callback>-ns/op, the module's work and its host calls
// included) and the host calls and guest entries per stream (logged with
// -v), for the filter's allowed and rejected requests and the empty plugin,
// and with SLUICE_ENVOYHOST_BASE_WASM for that module's allowed request.
func BenchmarkEnvoyHostCallbacks(b *testing.B) {
	cases := []struct {
		name, pkg, config string
		req               scenario.Request
	}{
		{"allowed", "./plugin", benchConfig, hdr("x-api-key", "k")},
		{"rejected", "./plugin", benchConfig, hdr("x-deny", "k")},
		{"empty", "./plugin/wasmhost/testdata/empty", "", hdr("x-api-key", "k")},
	}
	if base := os.Getenv("SLUICE_ENVOYHOST_BASE_WASM"); base != "" {
		cases = append(cases, struct {
			name, pkg, config string
			req               scenario.Request
		}{"base-allowed", base, benchConfig, hdr("x-api-key", "k")})
	}
	for _, mode := range envoyhost.Modes {
		for _, c := range cases {
			b.Run(string(mode)+"/"+c.name, func(b *testing.B) {
				wasm := c.pkg
				if strings.HasPrefix(wasm, "./") {
					wasm = module(b, c.pkg)
				}
				h := benchHostFor(b, mode, wasm, c.config)
				p, err := h.h.Profile(0, h.next, b.N, c.req, true)
				if err != nil {
					b.Fatal(err)
				}
				h.next += 2 * b.N
				var total int64
				for i, name := range envoyhost.Callbacks {
					b.ReportMetric(float64(p.CallbackNS[i])/float64(b.N), name+"-ns/op")
					total += p.CallbackNS[i]
				}
				b.ReportMetric(float64(total)/float64(b.N), "callbacks-ns/op")
				names := make([]string, 0, len(p.Calls))
				for k := range p.Calls {
					names = append(names, k)
				}
				slices.Sort(names)
				for _, k := range names {
					b.Logf("%6.2f per stream  %s", float64(p.Calls[k])/float64(b.N), k)
				}
			})
		}
	}
}

// BenchmarkEnvoyHostCallCost prices each kind of host call an allowed
// request makes: the hostcost module (testdata/hostcost) making an
// operation four times per stream, against the empty plugin in the same
// interleaved loop. op-cpu-ns is one operation's CPU time (the difference
// to the empty plugin, over four); "none" is the module doing nothing (its
// difference is noise). "allowed-calls" makes once each the host calls of
// the filter's allowed request (BenchmarkEnvoyHostStream), with no other
// work: the filter's time beyond it is its own Go code.
func BenchmarkEnvoyHostCallCost(b *testing.B) {
	type costCase struct {
		name, config string
		reps         int // operations per stream
	}
	cases := []costCase{{"none", "", 4}}
	for _, o := range []string{"absent", "header", "pairs", "clock", "get", "set", "metric", "response"} {
		cases = append(cases, costCase{o, strings.Repeat(o+" ", 4), 4})
	}
	cases = append(cases, costCase{"allowed-calls", "header clock get set metric response response", 1})
	for _, mode := range envoyhost.Modes {
		for _, c := range cases {
			b.Run(string(mode)+"/"+c.name, func(b *testing.B) {
				p := benchHostFor(b, mode, module(b, "./plugin/envoyhost/testdata/hostcost"), c.config)
				e := benchHostFor(b, mode, module(b, "./plugin/wasmhost/testdata/empty"), "")
				req := hdr("x-api-key", "k")
				var pns, ens int64
				p.cpuSince()
				e.cpuSince()
				b.ResetTimer()
				for done := 0; done < b.N; done += chunk {
					n := min(chunk, b.N-done)
					pns += p.run(b, n, req, false)
					ens += e.run(b, n, req, false)
				}
				report(b, pns, ens)
				pcpu, ecpu := p.cpuSince(), e.cpuSince()
				reportCPU(b, pcpu, ecpu)
				if pcpu > 0 && ecpu > 0 {
					b.ReportMetric(float64(pcpu-ecpu)/float64(b.N)/float64(c.reps), "op-cpu-ns")
				}
			})
		}
	}
}
