package fleet

import (
	"math"
	"time"

	"github.com/sluice-rl/sluice/shared/limiter"
	"github.com/sluice-rl/sluice/shared/policy"
)

// Window is a global fixed window or quota as the rate limit service counts
// it: at most Limit whole requests leased per window, in one counter per
// window whose key expires at the window's end. Bounds are computed on the
// admin's clock: fixed windows aligned on the Unix epoch (as the plugin's
// local ones), quotas the calendar periods of their zone.
type Window struct {
	Limit   int64         // whole requests per window, >= 1
	Seconds int64         // a fixed window's length; 0 for a quota
	Quota   limiter.Quota // a quota's period and zone (when Seconds is 0)
}

// windowKeyGrace keeps a counter a little past its window's end, so that a
// Redis clock ahead of the admin's does not drop a window the admin still
// counts in.
const windowKeyGrace = 5 * time.Second

// Bounds returns the window containing now: start <= now < end.
func (w Window) Bounds(now time.Time) (start, end time.Time) {
	if w.Seconds > 0 {
		ms := now.UnixMilli()
		per := w.Seconds * 1000
		s := ms - ms%per
		return time.UnixMilli(s), time.UnixMilli(s + per)
	}
	s, e := w.Quota.Bounds(float64(now.UnixNano()) / 1e9)
	return time.Unix(int64(s), 0), time.Unix(int64(e), 0)
}

// valid reports whether w can count anything.
func (w Window) valid() bool {
	return w.Limit >= 1 && (w.Seconds > 0 || w.Quota.Period != 0)
}

var quotaPeriods = map[string]limiter.Period{
	policy.PeriodHour: limiter.PeriodHour, policy.PeriodDay: limiter.PeriodDay,
	policy.PeriodWeek: limiter.PeriodWeek, policy.PeriodMonth: limiter.PeriodMonth,
}

// windowOf returns the Window of a global fixed_window or quota rule.
func windowOf(r policy.Rule) (Window, bool) {
	var w Window
	switch {
	case r.Window != nil && r.Algorithm == policy.AlgorithmFixedWindow:
		w = Window{Limit: int64(math.Floor(r.Window.Limit)), Seconds: int64(r.Window.WindowSeconds)}
	case r.Quota != nil:
		// No bounds cache (limiter.NewQuota): the server's calls run
		// concurrently, and PeriodBounds is cheap next to a Redis call.
		w = Window{Limit: int64(math.Floor(r.Quota.Limit)),
			Quota: limiter.Quota{Limit: r.Quota.Limit, Period: quotaPeriods[r.Quota.Period], Location: r.Quota.Location}}
	default:
		return Window{}, false
	}
	return w, w.valid()
}
