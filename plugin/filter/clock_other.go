//go:build !wasip1

package filter

import (
	"time"

	"github.com/sluice-rl/sluice/shared/limiter"
)

// nowSeconds is the realtime clock in unix seconds, in whole microseconds
// (native builds: tests).
func nowSeconds() float64 { return limiter.Seconds(nowNanos()) }

// nowNanos is the realtime clock in unix nanoseconds.
func nowNanos() int64 { return time.Now().UnixNano() }

var monoOrigin = time.Now()

// monoNanos is a monotonic clock in nanoseconds since process start
// (native builds: tests).
func monoNanos() int64 { return time.Since(monoOrigin).Nanoseconds() }
