// Package bench measures full HTTP streams of a proxy-wasm module in the
// project's host (plugin/wasmhost) against the empty plugin, in the same
// run, so every plugin change can be quoted as a ratio ("x-floor"): the
// number that stays meaningful on noisy two-core machines.
//
// Run sends b.N requests to the plugin and b.N to the floor (the empty
// plugin, same host, same SDK), interleaved in chunks of 256 so that load
// from elsewhere hits both alike. With several VMs, one goroutine drives
// each VM, like Envoy's worker threads. It reports:
//
//	ns/op        mean time of one plugin stream (context create, request
//	             headers, response headers, log, done, delete)
//	floor-ns/op  the same for the empty plugin
//	x-floor      ns/op / floor-ns/op
//	p50-ns, p99-ns, p99.9-ns   plugin stream latency percentiles
//	x-floor-p50  the plugin's median stream time / the floor's (robust to
//	             pauses caused by other processes, which skew the means)
//
// B/op and allocs/op count both hosts (the host side of a stream allocates
// the same for both).
package bench

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/plugin/wasmhost"
)

// Case is one benchmarked configuration.
type Case struct {
	Wasm   []byte // the module under test
	Floor  []byte // the reference module (the empty plugin)
	Config string // plugin configuration of Wasm
	VMs    int    // default 1
	Clock  wasmhost.Clock
	// Request returns the i-th request sent to VM vm. Return prebuilt
	// requests: allocations here are measured too.
	Request func(vm, i int) *wasmhost.Request
	// Rejected, when set, is checked on every plugin result.
	Rejected *bool
	// After runs once after the timed loop (e.g. to report a metric).
	After func(b *testing.B, h *wasmhost.Host)
	// HTTPCalls answers the plugin's callouts (nil: they stay pending).
	HTTPCalls wasmhost.HTTPCallHandler
	// FloorConfig is the reference module's configuration (default none):
	// with Floor set to the plugin too, x-floor compares two
	// configurations in one interleaved run.
	FloorConfig string
}

const chunk = 256

// Run benchmarks c against its floor.
func Run(b *testing.B, c Case) {
	b.Helper()
	if c.VMs == 0 {
		c.VMs = 1
	}
	plugin := startHost(b, c.Wasm, c.Config, c)
	floor := startHost(b, c.Floor, c.FloorConfig, c)

	lat := make([]time.Duration, b.N)
	floorLat := make([]time.Duration, b.N)
	pluginNs := make([]time.Duration, c.VMs)
	floorNs := make([]time.Duration, c.VMs)
	errs := make(chan error, c.VMs)
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	for v := 0; v < c.VMs; v++ {
		wg.Add(1)
		go func(v int) {
			defer wg.Done()
			if err := drive(c, v, b.N, plugin.VM(v), floor.VM(v), lat, floorLat, &pluginNs[v], &floorNs[v]); err != nil {
				errs <- err
			}
		}(v)
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}

	p, f := sum(pluginNs), sum(floorNs)
	b.ReportMetric(float64(p.Nanoseconds())/float64(b.N), "ns/op")
	b.ReportMetric(float64(f.Nanoseconds())/float64(b.N), "floor-ns/op")
	if f > 0 {
		b.ReportMetric(float64(p)/float64(f), "x-floor")
	}
	slices.Sort(lat)
	b.ReportMetric(pct(lat, 0.50), "p50-ns")
	b.ReportMetric(pct(lat, 0.99), "p99-ns")
	b.ReportMetric(pct(lat, 0.999), "p99.9-ns")
	// The floor's own tail shows how much of the plugin's is the machine.
	slices.Sort(floorLat)
	if f50 := pct(floorLat, 0.50); f50 > 0 { // the median ratio: robust to another process's pauses
		b.ReportMetric(pct(lat, 0.50)/f50, "x-floor-p50")
	}
	b.ReportMetric(pct(floorLat, 0.99), "floor-p99-ns")
	b.ReportMetric(pct(floorLat, 0.999), "floor-p99.9-ns")
	if c.After != nil {
		c.After(b, plugin)
	}
}

// drive sends VM v's share of n requests (i = v, v+VMs, ...) to the plugin
// and as many to the floor, alternating chunk by chunk. Both are timed
// request by request, alike.
func drive(c Case, v, n int, plugin, floor *wasmhost.VM, lat, floorLat []time.Duration, pluginNs, floorNs *time.Duration) error {
	ctx := context.Background()
	var res wasmhost.Result
	for start := v; start < n; start += chunk * c.VMs {
		end := min(start+chunk*c.VMs, n)
		for i := start; i < end; i += c.VMs {
			t := time.Now()
			err := floor.HTTPInto(ctx, c.Request(v, i), &res)
			floorLat[i] = time.Since(t)
			*floorNs += floorLat[i]
			if err != nil {
				return err
			}
		}
		for i := start; i < end; i += c.VMs {
			t := time.Now()
			err := plugin.HTTPInto(ctx, c.Request(v, i), &res)
			lat[i] = time.Since(t)
			*pluginNs += lat[i]
			if err != nil {
				return err
			}
			if c.Rejected != nil && res.Rejected != *c.Rejected {
				return errRejected{want: *c.Rejected}
			}
		}
	}
	return nil
}

func startHost(b *testing.B, wasm []byte, config string, c Case) *wasmhost.Host {
	b.Helper()
	if wasm == nil {
		b.Fatal(errors.New("bench: Case.Wasm and Case.Floor are both required"))
	}
	h, err := wasmhost.New(context.Background(), wasmhost.Config{
		Wasm: wasm, PluginConfig: []byte(config), VMs: c.VMs, Clock: c.Clock, HTTPCalls: c.HTTPCalls,
	})
	if err != nil {
		b.Fatalf("starting the host: %v", err)
	}
	b.Cleanup(func() { h.Close(context.Background()) })
	// Warm up so first-use costs (guest heap growth, lazy init) stay out.
	for v := 0; v < c.VMs; v++ {
		for i := 0; i < 200; i++ {
			if _, err := h.VM(v).HTTP(context.Background(), c.Request(v, i)); err != nil {
				b.Fatalf("warm-up: %v", err)
			}
		}
	}
	return h
}

func sum(ds []time.Duration) time.Duration {
	var t time.Duration
	for _, d := range ds {
		t += d
	}
	return t
}

func pct(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q * float64(len(sorted)-1))
	return float64(sorted[i].Nanoseconds())
}

type errRejected struct{ want bool }

func (e errRejected) Error() string {
	if e.want {
		return "bench: a request passed where the case expects every request to be rejected"
	}
	return "bench: a request was rejected where the case expects every request to pass"
}

// Headers builds a request with the usual pseudo-headers plus extra
// name/value pairs, from client 10.1.2.3.
func Headers(extra ...string) *wasmhost.Request {
	h := []wasmhost.Header{{":method", "GET"}, {":path", "/api/items"}, {":authority", "api.example.com"}, {":scheme", "http"}}
	for i := 0; i+1 < len(extra); i += 2 {
		h = append(h, wasmhost.Header{extra[i], extra[i+1]})
	}
	return &wasmhost.Request{
		Headers:    h,
		Properties: wasmhost.Properties{"source.address": []byte("10.1.2.3:40000")},
	}
}

// OpenAIStream is the body of a streamed chat completion of n content
// events, as the data frames it arrives in (one event each), usage in the
// last event, then [DONE]: what a response_json rule reads.
func OpenAIStream(n int) [][]byte {
	frames := make([][]byte, 0, n+2)
	for i := 0; i < n; i++ {
		frames = append(frames, []byte(`data: {"id":"chatcmpl-9","object":"chat.completion.chunk","created":1732752000,"model":"gpt-4o-mini",`+
			`"choices":[{"index":0,"delta":{"content":" token"},"finish_reason":null}],"usage":null}`+"\n\n"))
	}
	return append(frames,
		[]byte(`data: {"id":"chatcmpl-9","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":200,"total_tokens":212}}`+"\n\n"),
		[]byte("data: [DONE]\n\n"))
}

// ChatCompletion is the body of a chat completion answer whose content is
// about n bytes (with escaped quotes), usage at its end.
func ChatCompletion(n int) []byte {
	return []byte(`{"id":"chatcmpl-9","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"` +
		strings.Repeat(`lorem ipsum \"dolor\" sit amet `, n/30) + `"},"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":12,"completion_tokens":300,"total_tokens":312}}`)
}
