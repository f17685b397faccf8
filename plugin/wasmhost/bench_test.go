package wasmhost

import (
	"context"
	"testing"
)

// BenchmarkEmptyStream is the floor of the host: one full stream (context
// create, request headers, response headers, log, done, delete) of the empty
// plugin on one VM.
func BenchmarkEmptyStream(b *testing.B) {
	h := newHost(b, Config{Wasm: emptyWasm(b)})
	vm := h.VM(0)
	req := &Request{Headers: []Header{{":method", "GET"}, {":path", "/"}, {":authority", "example.com"}, {":scheme", "http"}}}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := vm.HTTP(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkProbeHostCalls measures a stream of the probe plugin making the
// host calls a rate limiter makes: a header read, a property read, the
// clock, a shared-data get and a CAS set, plus adding a result header per
// command. Most of the time is the probe's own script handling in the guest.
func BenchmarkProbeHostCalls(b *testing.B) {
	h := newHost(b, Config{})
	h.SharedData().Set("n", []byte("0"), 0)
	vm := h.VM(0)
	req := &Request{
		Headers:    []Header{{"x-probe", "hget x-api-key;prop source.address;now;incr n"}, {"x-api-key", "k1"}},
		Properties: Properties{"source.address": []byte("10.0.0.1:1234")},
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := vm.HTTP(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEmptyStreamInto is BenchmarkEmptyStream reusing one Result
// (HTTPInto): the floor without the per-request result allocations.
func BenchmarkEmptyStreamInto(b *testing.B) {
	h := newHost(b, Config{Wasm: emptyWasm(b)})
	vm := h.VM(0)
	req := &Request{Headers: []Header{{":method", "GET"}, {":path", "/"}, {":authority", "example.com"}, {":scheme", "http"}}}
	ctx := context.Background()
	var res Result
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := vm.HTTPInto(ctx, req, &res); err != nil {
			b.Fatal(err)
		}
	}
}
