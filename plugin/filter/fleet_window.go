package filter

import (
	"math"

	"github.com/sluice-rl/sluice/shared/limiter"
	"github.com/sluice-rl/sluice/shared/rls"
)

// Fleet mode for global windows and quotas. The rate limit service counts
// each (sub-)window's leases (admin/fleet, all or nothing: one counter per
// window for a fixed window or quota; the current and previous windows'
// estimate for a sliding window; the sum of the last sub-periods for a
// rolling window); the plugin spends them from the same lease pools as a
// token bucket's, with three differences:
//
//   - a lease is valid until the end of the window it was counted in (a
//     rolling window's sub-period), which the answer gives as
//     duration_until_reset: the pool's stamp is the call's send time plus
//     that, never later than the end (the admin measured it after the send);
//   - unused counts lapse at the window's end: a grant for another window
//     replaces what the pool held instead of adding to it;
//   - a return names the window it was leased in (sluice_window, its start
//     in unix ms, found from the pool's stamp), so the service never frees
//     room in a later window with counts of an earlier one.

// compileWindow sets the lease shape of a global window or quota (cr.win
// set): the most one (sub-)window admits, in whole requests, is the burst,
// the limit over the window's length the rate. A token bucket keeps its
// own (set by compileRuleFleet). periodMS is what a lease is counted in: a
// fixed or sliding window, a rolling window's sub-period.
func (rf *ruleFleet) compileWindow(cr *compiledRule) {
	if cr.win == nil {
		return
	}
	burst := math.Floor(cr.win.Capacity())
	period := cr.win.PeriodSeconds()
	rf.windowed = true
	rf.tb = limiter.TokenBucket{Rate: burst / period, Burst: burst}
	if _, quota := cr.win.(limiter.Quota); !quota {
		rf.periodMS = int64(period * 1000)
	}
	switch w := cr.win.(type) {
	case limiter.RollingWindow: // the limit holds over all its sub-periods
		rf.tb.Rate = math.Floor(w.Limit) / (period * float64(max(w.Periods, 1)))
	case limiter.SlidingWindow:
		rf.sliding = true
	}
	rf.quota = cr.quota
}

// refusedWait is how long a refusal answered now holds when the service
// has no whole request left, until is the (sub-)window's end: room comes
// back only then, except in a sliding window, whose estimate falls as the
// previous window's weight decays, so that the pool asks again after a
// sync interval.
func (rf *ruleFleet) refusedWait(now, until int64) int64 {
	if rf.sliding {
		return min(until-now, rf.fc.syncMS)
	}
	return until - now
}

// leaseUntil is when a grant (or refusal) answered now, for a call sent at
// sentMS, stops: the lease TTL for a token bucket, the window's end for a
// window (the TTL if the answer has no duration_until_reset).
func (rf *ruleFleet) leaseUntil(st *rls.Status, now, sentMS int64) int64 {
	if !rf.windowed || !st.HasReset || sentMS <= 0 || sentMS > now {
		return now + rf.fc.ttlMS
	}
	return sentMS + st.ResetMillis()
}

// otherWindow reports whether a pool's stamp and a new grant's end belong
// to two different windows: more than half a period apart (the ends of
// grants in one window differ only by the calls' latencies).
func (rf *ruleFleet) otherWindow(stamp, until int64) bool {
	if !rf.windowed {
		return false
	}
	d := until - stamp
	if d < 0 {
		d = -d
	}
	half := rf.periodMS / 2
	if rf.periodMS == 0 {
		half = int64(rf.quota.PeriodSeconds() * 1000 / 4) // a month is 28 to 31 days
	}
	return d > half
}

// windowStart is the start (unix ms) of the window a lease ending at stamp
// was granted in: the window containing the millisecond before its end.
func (rf *ruleFleet) windowStart(stamp int64) int64 {
	at := max(stamp-1, 0)
	if rf.periodMS > 0 {
		return at - at%rf.periodMS
	}
	start, _ := limiter.PeriodBounds(rf.quota.Period, rf.quota.Location, float64(at)/1000)
	return int64(start) * 1000
}
