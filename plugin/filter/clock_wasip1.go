//go:build wasip1

package filter

import (
	"time"

	"github.com/sluice-rl/sluice/shared/limiter"
)

// clockTimeGet is WASI's clock_time_get, imported directly: time.Now()
// reads both the realtime and the monotonic clock (two host calls), and the
// filter only needs the realtime one. In Envoy both are the proxy's clocks.
//
//go:wasmimport wasi_snapshot_preview1 clock_time_get
//go:noescape
func clockTimeGet(clockID uint32, precision uint64, t *uint64) uint32

const (
	clockRealtime  = 0
	clockMonotonic = 1
)

// nowSeconds is the WASI realtime clock (Envoy's clock) in unix seconds,
// in whole microseconds (limiter.Seconds).
func nowSeconds() float64 { return limiter.Seconds(nowNanos()) }

// nowNanos is the WASI realtime clock (Envoy's clock) in unix nanoseconds.
func nowNanos() int64 {
	var ns uint64
	if clockTimeGet(clockRealtime, 1, &ns) != 0 {
		return time.Now().UnixNano()
	}
	return int64(ns)
}

// monoNanos is the WASI monotonic clock in nanoseconds (an arbitrary
// origin): held requests are timed with it, so a realtime clock step
// neither releases them early nor holds them for the size of the step.
func monoNanos() int64 {
	var ns uint64
	if clockTimeGet(clockMonotonic, 1, &ns) != 0 {
		return time.Now().UnixNano()
	}
	return int64(ns)
}
