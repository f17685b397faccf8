package filter

import (
	"math"

	"github.com/sluice-rl/sluice/shared/limiter"
	"github.com/sluice-rl/sluice/shared/rls"
)

// Fleet mode for global fixed windows and quotas. The rate limit service
// counts each window's leases in one counter (admin/fleet: at most the
// limit per window, all or nothing); the plugin spends them from the same
// lease pools as a token bucket's, with three differences:
//
//   - a lease is valid until the window's end, which the answer gives as
//     duration_until_reset: the pool's stamp is the call's send time plus
//     that, never later than the end (the admin measured it after the send);
//   - unused counts lapse at the window's end: a grant for another window
//     replaces what the pool held instead of adding to it;
//   - a return names the window it was leased in (sluice_window, its start
//     in unix ms, found from the pool's stamp), so the service never frees
//     room in a later window with counts of an earlier one.

// compileWindow sets the lease shape of a global fixed window or quota
// (cr.win set): the limit in whole requests is the burst, limit/period the
// rate. A token bucket keeps its own (set by compileRuleFleet).
func (rf *ruleFleet) compileWindow(cr *compiledRule) {
	if cr.win == nil {
		return
	}
	limit := math.Floor(cr.win.Capacity())
	period := cr.win.PeriodSeconds()
	rf.windowed = true
	rf.tb = limiter.TokenBucket{Rate: limit / period, Burst: limit}
	if _, quota := cr.win.(limiter.Quota); !quota {
		rf.periodMS = int64(period * 1000)
	}
	rf.quota = cr.quota
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
