package fleet

import (
	"math"
	"time"

	"github.com/sluice-rl/sluice/shared/limiter"
	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/request"
)

// Window is a global fixed, sliding or rolling window or quota as the rate
// limit service counts it, in whole requests leased:
//
//   - fixed window, quota: at most Limit per window, in one counter per
//     window whose key expires at the window's end;
//   - sliding window (Sliding): the estimate prev × (1 − f) + cur of two
//     windows' counters at most Limit, each counter kept one window longer;
//   - rolling window (Periods > 1): at most Limit in the last Periods
//     sub-periods of Seconds (and MaxPerPeriod in one, when set), in one
//     hash per identity with a field per sub-period.
//
// A fixed window or quota may also be charged (sluice_op charge): the
// costs a response reported beyond what the plugin leased count in the
// current window unconditionally, up to Limit + MaxDebt.
//
// Bounds are computed on the admin's clock: windows and sub-periods
// aligned on the Unix epoch (as the plugin's local ones), quotas the
// calendar periods of their zone. A lease is counted in the current
// (sub-)window and ends with it (docs/design/fleet-windows.md).
type Window struct {
	Limit        int64         // whole requests per window, >= 1
	Seconds      int64         // a fixed or sliding window's length, a rolling window's sub-period; 0 for a quota
	Quota        limiter.Quota // a quota's period and zone (when Seconds is 0)
	Sliding      bool          // a sliding window
	Periods      int64         // a rolling window's sub-periods (> 1); 1 for a rolling window of one sub-period (counted as a fixed window); 0 otherwise
	MaxPerPeriod int64         // a rolling window's cap per sub-period, 0 for none
	// MaxDebt is how far past Limit a charge may count: a quota's
	// max_debt (whole requests, rounded down) when its costs are read from
	// the response, else 0 (a charge fills the window up to its limit at
	// most).
	MaxDebt int64
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

// rolling reports whether w is a rolling window of several sub-periods.
func (w Window) rolling() bool { return w.Periods > 1 }

// length is the seconds the limit holds over: the window (all its
// sub-periods); a quota's nominal period.
func (w Window) length() int64 {
	if w.Seconds == 0 {
		return int64(w.Quota.PeriodSeconds())
	}
	return w.Seconds * max(w.Periods, 1)
}

// keyEnd is when the state counted in the (sub-)window ending at end is
// no longer read: at its end for a fixed window or quota, one window later
// for a sliding window (it is the next window's prev), when it leaves the
// last of Periods sub-periods for a rolling window.
func (w Window) keyEnd(end time.Time) time.Time {
	switch {
	case w.Sliding:
		end = end.Add(time.Duration(w.Seconds) * time.Second)
	case w.rolling():
		end = end.Add(time.Duration(w.Seconds*(w.Periods-1)) * time.Second)
	}
	return end.Add(windowKeyGrace)
}

// chargeable reports whether a charge may count in w: a fixed window or a
// quota. Sliding and rolling windows (even a rolling window of one
// sub-period) take leases only.
func (w Window) chargeable() bool { return !w.Sliding && w.Periods == 0 }

// chargeCap is the most a charge may leave counted in one of w's windows.
func (w Window) chargeCap() int64 { return w.Limit + max(w.MaxDebt, 0) }

// valid reports whether w can count anything.
func (w Window) valid() bool {
	return w.Limit >= 1 && (w.Seconds > 0 || w.Quota.Period != 0)
}

// windowOf returns the Window of a global fixed, sliding or rolling window
// or quota rule.
func windowOf(r policy.Rule) (Window, bool) {
	var w Window
	switch {
	case r.Window != nil:
		w = Window{Limit: int64(math.Floor(r.Window.Limit)), Seconds: int64(r.Window.WindowSeconds),
			Sliding: r.Algorithm == policy.AlgorithmSlidingWindow}
		if r.Algorithm == policy.AlgorithmRollingWindow {
			w.MaxPerPeriod = int64(math.Floor(r.Window.MaxPerPeriod))
			if n := int64(r.Window.Periods()); n > 1 {
				w.Seconds, w.Periods = int64(r.Window.PeriodSeconds), n
			} else { // one period: a fixed window of the tighter limit
				w.Periods = 1
				if w.MaxPerPeriod > 0 {
					w.Limit, w.MaxPerPeriod = min(w.Limit, w.MaxPerPeriod), 0
				}
			}
		}
	case r.Quota != nil:
		// No bounds cache (limiter.NewQuota): the server's calls run
		// concurrently, and PeriodBounds is cheap next to a Redis call.
		w = Window{Limit: int64(math.Floor(r.Quota.Limit)), MaxDebt: quotaDebt(r.Quota),
			Quota: limiter.Quota{Limit: r.Quota.Limit, Period: request.QuotaPeriod(r.Quota.Period), Location: r.Quota.Location}}
	default:
		return Window{}, false
	}
	return w, w.valid()
}

// quotaDebt is how far past its limit a charge may count in a global
// quota's period: its max_debt in whole requests when its costs are read
// from the response (the plugin then charges what its leases could not
// cover), else 0.
func quotaDebt(q *policy.Quota) int64 {
	if q == nil || !q.Cost.FromResponse() {
		return 0
	}
	return int64(math.Floor(max(q.MaxDebt, 0)))
}
