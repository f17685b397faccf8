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
		Run(b, Case{Wasm: pluginWasm(b), Config: limits, Request: same(Headers("x-deny", "k")), Rejected: &no})
	})
	if res.N != 0 {
		t.Fatalf("the harness accepted rejected requests in an allowed-path case (N=%d)", res.N)
	}
}
