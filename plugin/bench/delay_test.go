package bench

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/plugin/wasmhost"
)

// delayLimits is one rule with delayed admission: 1000 tokens/s, burst
// 1000, held up to 60 s.
const delayLimits = `{"rules": [
  {"name": "smooth", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
   "algorithm_config": {"rps": 1000, "burst": 1000, "max_delay_ms": 60000}}]}`

// BenchmarkDelay measures delayed admission (max_delay_ms) against the
// empty floor:
//
//   - allowed: a request that finds its tokens, under a rule with
//     max_delay_ms (what a configured delay costs when nobody waits: the
//     removal of a client-sent x-sluice-delay-ms);
//   - held: a request that is held and resumed, its whole life: request
//     headers (reserve, queue, Pause), its share of the on_tick that resumes
//     it (set_effective_context, the upstream delay header,
//     continue_stream), response headers (the delay header) and the end of
//     the stream. The clock (a ManualClock) moves 1 ms per request, the
//     bucket's refill for one token, so every request waits exactly 1 ms;
//     the fast tick (5 ms) resumes them five at a time, as it would in
//     Envoy.
func BenchmarkDelay(b *testing.B) {
	b.Run("vms=1/allowed", func(b *testing.B) {
		// The clock is frozen, so 500 keys with a burst of 1000 each
		// serve 500,000 requests without waiting.
		keys := make([]*wasmhost.Request, 500)
		for i := range keys {
			keys[i] = Headers("x-api-key", "k"+itoaSmall(i))
		}
		Run(b, Case{Wasm: pluginWasm(b), Floor: floorWasm(b), Config: delayLimits,
			Clock:    wasmhost.NewManualClock(time.Unix(1_700_000_000, 0)),
			Request:  func(vm, i int) *wasmhost.Request { return keys[i%len(keys)] },
			Rejected: &no,
			After: func(b *testing.B, h *wasmhost.Host) {
				if n, _ := h.Metric("sluice.rule.smooth.delayed"); n != 0 {
					b.Fatalf("%d requests were held in the allowed case", n)
				}
			}})
	})
	b.Run("vms=1/held", benchmarkHeld)
}

func benchmarkHeld(b *testing.B) {
	clock := wasmhost.NewManualClock(time.Unix(1_700_000_000, 0))
	c := Case{Wasm: pluginWasm(b), Floor: floorWasm(b), Config: delayLimits, Clock: clock,
		Request: same(Headers("x-api-key", "held"))}
	plugin := startHost(b, c.Wasm, c.Config, c) // the warm-up takes 200 of the burst
	fc := c
	fc.Clock = wasmhost.NewManualClock(time.Unix(1_700_000_000, 0)) // the floor's runtime sleeps must not move ours
	floor := startHost(b, c.Floor, "", fc)
	ctx := context.Background()
	vm, fvm := plugin.VM(0), floor.VM(0)
	req := Headers("x-api-key", "held")
	// Empty the bucket: from here on requests wait for the refill.
	var pending []*wasmhost.Stream
	for i := 0; len(pending) == 0; i++ {
		r, err := vm.HTTP(ctx, req)
		if err != nil || r.Rejected || i > 100_000 {
			b.Fatalf("draining: %+v %v", r, err)
		}
		if r.Paused {
			pending = append(pending, r.Stream)
		}
	}
	var res wasmhost.Result
	var pluginNs, floorNs time.Duration
	notHeld := 0
	b.ReportAllocs()
	b.ResetTimer()
	for start := 0; start < b.N; start += chunk {
		end := min(start+chunk, b.N)
		t0 := time.Now()
		for i := start; i < end; i++ {
			if err := fvm.HTTPInto(ctx, req, &res); err != nil {
				b.Fatal(err)
			}
		}
		floorNs += time.Since(t0)
		t0 = time.Now()
		for i := start; i < end; i++ {
			r, err := vm.HTTP(ctx, req)
			if err != nil {
				b.Fatal(err)
			}
			switch {
			case r.Rejected:
				b.Fatalf("request %d rejected", i)
			case r.Paused:
				pending = append(pending, r.Stream)
			default:
				// The Go runtime's sleeps in the guest (GC) advance a
				// ManualClock too: a jump refills the bucket and a few
				// requests pass at once. Counted, and bounded below.
				notHeld++
			}
			clock.Advance(time.Millisecond)
			if err := vm.Tick(ctx); err != nil {
				b.Fatal(err)
			}
			pending = completeResumed(b, pending)
		}
		pluginNs += time.Since(t0)
	}
	b.StopTimer()
	for len(pending) > 0 { // the last few, outside the timing
		clock.Advance(5 * time.Millisecond)
		if err := vm.Tick(ctx); err != nil {
			b.Fatal(err)
		}
		pending = completeResumed(b, pending)
	}
	b.ReportMetric(float64(pluginNs.Nanoseconds())/float64(b.N), "ns/op")
	b.ReportMetric(float64(floorNs.Nanoseconds())/float64(b.N), "floor-ns/op")
	b.ReportMetric(float64(pluginNs)/float64(floorNs), "x-floor")
	b.ReportMetric(float64(b.N-notHeld)/float64(b.N), "held/op")
	if notHeld > b.N/20 {
		b.Fatalf("only %d of %d requests were held", b.N-notHeld, b.N)
	}
}

// completeResumed finishes the streams the last tick resumed (response
// headers, log, done, delete) and returns the ones still held.
func completeResumed(b *testing.B, pending []*wasmhost.Stream) []*wasmhost.Stream {
	kept := pending[:0]
	for _, s := range pending {
		select {
		case <-s.Resumed():
			if _, err := s.Complete(context.Background(), nil); err != nil {
				b.Fatal(err)
			}
		default:
			kept = append(kept, s)
		}
	}
	clear(pending[len(kept):])
	return kept
}

func itoaSmall(i int) string {
	if i == 0 {
		return "0"
	}
	var buf [8]byte
	n := len(buf)
	for i > 0 {
		n--
		buf[n] = byte('0' + i%10)
		i /= 10
	}
	return string(buf[n:])
}
