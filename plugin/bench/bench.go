// Package bench measures full HTTP streams of a proxy-wasm module in the
// project's host (plugin/wasmhost), so every plugin change can be quoted as
// a ratio to the empty plugin measured in the same run ("x-floor"), which
// is what stays meaningful on noisy two-core machines.
//
// A Case runs b.N full streams (context create, request headers, response
// headers, log, done, delete) spread over the host's VMs, one goroutine per
// VM like Envoy's workers, and reports:
//
//	ns/op     wall time per request (throughput across all VMs)
//	p50-ns, p99-ns, p99.9-ns   latency of one stream
//	x-floor   ns/op divided by the floor's ns/op from the same process
//
// The floor is the last case run with Floor set; put it first in a table.
package bench

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/plugin/wasmhost"
)

// Case is one benchmarked configuration.
type Case struct {
	Wasm   []byte
	Config string
	VMs    int // default 1
	Clock  wasmhost.Clock
	// Request returns the i-th request sent to VM vm. It must not allocate
	// much: return prebuilt requests.
	Request func(vm, i int) *wasmhost.Request
	// Rejected, when set, is checked on every result.
	Rejected *bool
	// After runs once after the timed loop (e.g. to report a metric).
	After func(b *testing.B, h *wasmhost.Host)
	// Floor marks the reference case: its ns/op becomes the floor that the
	// following cases are divided by.
	Floor bool
}

var (
	floorMu sync.Mutex
	floorNs float64
)

// setFloor records ns/op as the floor for the following cases' x-floor.
func setFloor(ns float64) {
	floorMu.Lock()
	floorNs = ns
	floorMu.Unlock()
}

func floor() float64 {
	floorMu.Lock()
	defer floorMu.Unlock()
	return floorNs
}

// Run benchmarks c.
func Run(b *testing.B, c Case) {
	b.Helper()
	if c.VMs == 0 {
		c.VMs = 1
	}
	h, err := wasmhost.New(context.Background(), wasmhost.Config{
		Wasm: c.Wasm, PluginConfig: []byte(c.Config), VMs: c.VMs, Clock: c.Clock,
	})
	if err != nil {
		b.Fatalf("starting the host: %v", err)
	}
	defer h.Close(context.Background())

	// Warm up each VM so first-use costs (allocations, lazy init) stay out.
	for v := 0; v < c.VMs; v++ {
		for i := 0; i < 200; i++ {
			if _, err := h.VM(v).HTTP(context.Background(), c.Request(v, i)); err != nil {
				b.Fatalf("warm-up: %v", err)
			}
		}
	}

	lat := make([]time.Duration, b.N)
	var wg sync.WaitGroup
	errs := make(chan error, c.VMs)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for v := 0; v < c.VMs; v++ {
		wg.Add(1)
		go func(v int) {
			defer wg.Done()
			vm := h.VM(v)
			ctx := context.Background()
			for i := v; i < b.N; i += c.VMs {
				req := c.Request(v, i)
				t0 := time.Now()
				res, err := vm.HTTP(ctx, req)
				lat[i] = time.Since(t0)
				if err != nil {
					errs <- err
					return
				}
				if c.Rejected != nil && res.Rejected != *c.Rejected {
					errs <- errRejected{want: *c.Rejected}
					return
				}
			}
		}(v)
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}

	ns := float64(elapsed.Nanoseconds()) / float64(b.N)
	slices.Sort(lat)
	b.ReportMetric(pct(lat, 0.50), "p50-ns")
	b.ReportMetric(pct(lat, 0.99), "p99-ns")
	b.ReportMetric(pct(lat, 0.999), "p99.9-ns")
	if c.Floor {
		setFloor(ns)
	} else if f := floor(); f > 0 {
		b.ReportMetric(ns/f, "x-floor")
	}
	if c.After != nil {
		c.After(b, h)
	}
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
// name/value pairs.
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
