package filter

// secondsOf is the unix time ns in seconds, truncated to the microsecond.
// Shared data keeps a bucket's last refill in micro-units: a clock read
// finer than that would lose up to half a microsecond of refill to the
// rounding of every stored bucket, so that a client sending at exactly the
// rate would drift into rejections (limiter.DueSlack covers one rounding,
// not a drift).
func secondsOf(ns int64) float64 { return float64(ns/1000) / 1e6 }
