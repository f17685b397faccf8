//go:build !wasip1

package filter

import "time"

// nowSeconds is the realtime clock in unix seconds (native builds: tests).
func nowSeconds() float64 {
	return float64(time.Now().UnixNano()) / 1e9
}

var monoOrigin = time.Now()

// monoNanos is a monotonic clock in nanoseconds since process start
// (native builds: tests).
func monoNanos() int64 { return time.Since(monoOrigin).Nanoseconds() }
