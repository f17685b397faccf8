package bench

import (
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	lat := make([]time.Duration, 1000)
	for i := range lat {
		lat[i] = time.Duration(i+1) * time.Microsecond
	}
	for _, tc := range []struct {
		q    float64
		want float64
	}{{0.5, 500e3}, {0.99, 990e3}, {0.999, 999e3}, {0, 1e3}} {
		if got := pct(lat, tc.q); got != tc.want {
			t.Errorf("pct(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	if got := pct(nil, 0.5); got != 0 {
		t.Errorf("pct(empty) = %v, want 0", got)
	}
}

// TestRunDetectsWrongDecision makes sure the harness fails a case whose
// requests are not decided as the case expects (a benchmark of the wrong
// path would otherwise report a flattering number).
func TestRunDetectsWrongDecision(t *testing.T) {
	res := testing.Benchmark(func(b *testing.B) {
		Run(b, Case{Wasm: pluginWasm(b), Floor: floorWasm(b), Config: limits,
			Request: same(Headers("x-deny", "k")), Rejected: &no})
	})
	if res.N != 0 {
		t.Fatalf("the harness accepted rejected requests in an allowed-path case (N=%d)", res.N)
	}
}

// TestRunReportsRatio runs a tiny benchmark and checks the reported metrics
// are present and consistent.
func TestRunReportsRatio(t *testing.T) {
	res := testing.Benchmark(func(b *testing.B) {
		Run(b, Case{Wasm: pluginWasm(b), Floor: floorWasm(b), Config: limits,
			Request: same(Headers("x-api-key", "k")), Rejected: &no})
	})
	if res.N == 0 {
		t.Fatal("benchmark failed")
	}
	ns, floor, ratio := res.Extra["ns/op"], res.Extra["floor-ns/op"], res.Extra["x-floor"]
	if ns <= 0 || floor <= 0 || ratio <= 0 {
		t.Fatalf("metrics missing: %v", res.Extra)
	}
	if d := ratio - ns/floor; d > 1e-6*ratio || d < -1e-6*ratio {
		t.Errorf("x-floor %v != ns/op %v / floor-ns/op %v", ratio, ns, floor)
	}
	if res.Extra["p50-ns"] > res.Extra["p99-ns"] || res.Extra["p99-ns"] > res.Extra["p99.9-ns"] {
		t.Errorf("percentiles out of order: %v", res.Extra)
	}
}
