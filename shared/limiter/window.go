package limiter

import (
	"math"

	"github.com/sluice-rl/sluice/shared/state"
)

// Windowed algorithms. Each is a pure function over a
// state.Window: the use (summed cost) of one identity per period, newest
// first, periods aligned to the Unix epoch (period k covers [k*P, (k+1)*P)).
//
// Time. The state is rotated lazily when a request reads it: no timer is
// needed. A clock that goes backwards (now before the stored period) never
// rotates and never moves the stored period back: the request is counted in
// the stored, newest period, so no quota is minted. A broken clock (NaN,
// Inf) reads as the stored period's start; now < 0 reads as 0.
//
// Cost. Limits count cost: a request costing c uses c of the limit. A
// NaN or negative cost is treated as 0, like TokenBucket.Take.
//
// Decisions use the same Decision as TokenBucket: Remaining is what is left
// of the quota (after this request when allowed), Wait the seconds until
// the request's cost would be admitted, and Reset the seconds until the
// state is equivalent to a fresh one (no use left inside the window), the
// moment a window, like a full token bucket, carries no information and its
// storage may be reused.

// Window is a windowed algorithm: FixedWindow, SlidingWindow or
// RollingWindow.
type Window interface {
	// Take rotates w to now and tries to add cost to it. w is updated in
	// place to the state to store (unchanged apart from the rotation when
	// The request is rejected). When exists is false, w is ignored and a
	// fresh state is used.
	Take(w *state.Window, exists bool, now, cost float64) Decision
	// Capacity is the most a fresh state admits at once.
	Capacity() float64
	// PeriodSeconds is the length of one period of the state.
	PeriodSeconds() float64
}

// costEpsilon absorbs float rounding when costs such as 0.1 add up to the
// limit: 10 requests of 0.1 fit a limit of 1.
const costEpsilon = 1e-9

// RollingWindow admits at most Limit in any rolling window of Periods
// periods of Period seconds (the Nominet rolling window), and, when MaxPerPeriod > 0, at most
// MaxPerPeriod in one period.
//
// The Nominet rolling window describes it as a bucket refilled every period P: "every P you
// refill the bucket to be equal to Q - (total queries for previous period of
// (W - P))", capped at the per-period maximum in the combined form. The
// state keeps one count per period of the window (c0 the current period,
// c1 the one before, ...), so the allowance of the current period is
//
//	allowance = min(Limit - (c1 + ... + c[n-1]), MaxPerPeriod)
//
// and a request of cost c is admitted when c0 + c <= allowance, i.e. when
//
//	c <= min(Limit - (c0 + ... + c[n-1]), MaxPerPeriod - c0).
//
// Unlike the Nominet rolling window the allowance is not a stored token count that someone
// must refill on time: it is recomputed from the counts at every request,
// with the counts rotated lazily. Periods are aligned to the epoch, so the
// first period of a new identity may be partial (the Nominet rolling window starts the clock
// at the first request).
//
// A rejected request waits for the first future period boundary at which
// enough use has left the window (and the per-period count restarts). A
// request costing more than min(Limit, MaxPerPeriod) can never be admitted:
// its Wait is the time until the whole window has passed.
type RollingWindow struct {
	Limit        float64 // the most use in any window, > 0
	Period       float64 // seconds per period, > 0
	Periods      int     // periods per window, 1..state.MaxCounts
	MaxPerPeriod float64 // the most use in one period; <= 0 means no cap
}

// FixedWindow admits at most Limit per aligned window of Window seconds:
// one counter per interval [k*Window, (k+1)*Window) of Unix time, reset at
// each boundary. It is the rolling window with one period.
//
// Boundary burst: a client may use Limit just before a boundary and Limit
// again just after it, so up to 2*Limit can pass within a short time (with a
// limit of 10 a minute, 10 requests at :59 and 10 more a second later). Any
// window of Window seconds sees at most 2*Limit; the sliding and rolling
// windows bound that.
type FixedWindow struct {
	Limit  float64 // the most use per window, > 0
	Window float64 // seconds, > 0
}

// SlidingWindow admits a request when the weighted estimate of the use in
// the last Window seconds, plus its cost, is at most Limit. The state is two
// aligned fixed windows, the current one (count cur, started at Start) and
// the previous one (count prev):
//
//	f        = (now - Start) / Window              // elapsed fraction, 0..1
//	estimate = prev*(1 - f) + cur
//
// It assumes the previous window's use was spread evenly over it: a cheap,
// constant-size alternative to the Clojure/Redis limiter's log of timestamps, which is exact
// but stores one entry per admitted request.
//
// The error is at most the part of prev the estimate leaves out or keeps
// wrongly. The true use in the last Window seconds is cur plus the part of
// prev that fell in its last (1-f)*Window seconds, anywhere from 0 to
// prev. So:
//
//   - over-admission: when prev's use came at the very end of its window,
//     the true use can reach Limit + f*prev < 2*Limit (prev <= Limit);
//   - over-rejection: when prev's use came at its start, requests are refused
//     while the true use is only cur, for up to (1-f)*prev of quota.
//
// For traffic spread evenly, the estimate is exact. Like a fixed window it
// never admits more than 2*Limit in any Window seconds, but it removes the
// fixed window's boundary burst for steady clients: right after a boundary
// the previous window's count still weighs almost fully.
type SlidingWindow struct {
	Limit  float64 // > 0
	Window float64 // seconds, > 0
}

// Capacity returns min(Limit, MaxPerPeriod).
func (rw RollingWindow) Capacity() float64 {
	if rw.MaxPerPeriod > 0 && rw.MaxPerPeriod < rw.Limit {
		return rw.MaxPerPeriod
	}
	return rw.Limit
}

// PeriodSeconds returns Period.
func (rw RollingWindow) PeriodSeconds() float64 { return rw.Period }

// Take implements Window; see RollingWindow.
func (rw RollingWindow) Take(w *state.Window, exists bool, now, cost float64) Decision {
	n := min(max(rw.Periods, 1), state.MaxCounts)
	period := validPeriod(rw.Period)
	limit := max(rw.Limit, 0)
	perPeriod := limit
	if rw.MaxPerPeriod > 0 {
		perPeriod = rw.MaxPerPeriod
	}
	cost = validCost(cost)
	now = rotate(w, exists, now, period, n)

	avail := min(limit-sumCounts(w, n), perPeriod-w.Counts[0])
	var d Decision
	if avail+costEpsilon >= cost {
		w.Counts[0] += cost
		avail -= cost
		d.Allowed = true
	} else {
		d.Wait = max(rw.wait(w, n, now, period, cost, limit, perPeriod), minWait)
	}
	d.Remaining = max(avail, 0)
	d.Reset = freshIn(w, n, now, period)
	return d
}

// wait returns the seconds until the first period boundary at which cost
// fits the allowance.
func (rw RollingWindow) wait(w *state.Window, n int, now, period, cost, limit, perPeriod float64) float64 {
	fits := func(used float64) bool { return min(limit-used, perPeriod)+costEpsilon >= cost }
	inWindow := sumCounts(w, n)
	for k := 1; k <= n; k++ {
		// At the k-th next boundary, count c[n-k] has left the window (as
		// have those after it) and the new period's count is 0. One pass:
		// O(n), not O(n^2), on every rejection.
		if n-k < w.N {
			inWindow -= w.Counts[n-k]
		}
		// The running difference may round; the exact sum confirms a hit,
		// so the wait is never shorter than the true one.
		if fits(inWindow) && fits(sumCounts(w, n-k)) {
			return finite(w.Start + float64(k)*period - now)
		}
	}
	return finite(w.Start + float64(n)*period - now) // never admissible: come back after a whole window
}

// Capacity returns Limit.
func (fw FixedWindow) Capacity() float64 { return fw.Limit }

// PeriodSeconds returns Window.
func (fw FixedWindow) PeriodSeconds() float64 { return fw.Window }

// Take implements Window; see FixedWindow.
func (fw FixedWindow) Take(w *state.Window, exists bool, now, cost float64) Decision {
	return RollingWindow{Limit: fw.Limit, Period: fw.Window, Periods: 1}.Take(w, exists, now, cost)
}

// Capacity returns Limit.
func (sw SlidingWindow) Capacity() float64 { return sw.Limit }

// PeriodSeconds returns Window.
func (sw SlidingWindow) PeriodSeconds() float64 { return sw.Window }

// Take implements Window; see SlidingWindow. Counts[0] is the current
// window, Counts[1] the previous one.
func (sw SlidingWindow) Take(w *state.Window, exists bool, now, cost float64) Decision {
	win := validPeriod(sw.Window)
	limit := max(sw.Limit, 0)
	cost = validCost(cost)
	now = rotate(w, exists, now, win, 2)

	cur, prev := w.Counts[0], w.Counts[1]
	f := min(max((now-w.Start)/win, 0), 1) // a backwards clock weighs prev fully
	est := prev*(1-f) + cur
	var d Decision
	if est+cost <= limit+costEpsilon {
		w.Counts[0] += cost
		est += cost
		d.Allowed = true
	} else {
		d.Wait = max(sw.wait(w, now, win, cost, limit), minWait)
	}
	d.Remaining = max(limit-est, 0)
	d.Reset = freshIn(w, 2, now, win)
	return d
}

// wait returns the seconds until the estimate leaves room for cost: later
// in this window if cur + cost fits once prev has decayed enough, else in
// the next window once cur (then the previous count) has.
func (sw SlidingWindow) wait(w *state.Window, now, win, cost, limit float64) float64 {
	cur, prev := w.Counts[0], w.Counts[1]
	switch {
	case cost > limit+costEpsilon: // never admissible
		return finite(w.Start + 2*win - now)
	case cur+cost <= limit+costEpsilon && prev > 0:
		f := 1 - (limit-cur-cost)/prev
		return finite(w.Start + f*win - now)
	case cur > 0:
		g := max(1-(limit-cost)/cur, 0)
		return finite(w.Start + win + g*win - now)
	}
	return finite(w.Start + win - now)
}

// rotate brings w to the period containing now (aligned to the epoch) and
// returns the sanitized now. Counts of periods that have left the last n
// are dropped. A fresh or corrupt state starts empty at now's period.
func rotate(w *state.Window, exists bool, now, period float64, n int) float64 {
	valid := exists && isFinite(w.Start) && w.Start >= 0 && w.N >= 1 && w.N <= state.MaxCounts
	if !isFinite(now) {
		now = 0
		if valid {
			now = w.Start
		}
	}
	now = max(now, 0)
	cur := math.Floor(now/period) * period
	if !valid {
		*w = state.Window{Start: cur, N: 1}
		return now
	}
	for i := 0; i < w.N; i++ { // corrupt counts cannot reach the decision
		if !(w.Counts[i] >= 0) || math.IsInf(w.Counts[i], 0) {
			w.Counts[i] = 0
		}
	}
	if cur <= w.Start { // same period, or a backwards clock: count in the stored one
		w.N = min(w.N, n)
		clear(w.Counts[w.N:])
		return now
	}
	// Floor: a start left unaligned by a change of period_seconds ages by
	// whole periods only, so counts stay at least as long as they should.
	k := math.Floor((cur - w.Start) / period)
	w.Start = cur
	if k >= float64(n) {
		w.N = 1
		clear(w.Counts[:])
		return now
	}
	shift := int(k)
	keep := min(w.N, n-shift)
	copy(w.Counts[shift:shift+keep], w.Counts[:keep])
	clear(w.Counts[:shift])
	clear(w.Counts[shift+keep:])
	w.N = shift + keep
	return now
}

// sumCounts returns the use in the newest m periods.
func sumCounts(w *state.Window, m int) float64 {
	s := 0.0
	for i := 0; i < m && i < w.N; i++ {
		s += w.Counts[i]
	}
	return s
}

// freshIn returns the seconds until every count of w has left the last n
// periods: 0 when there is no use.
func freshIn(w *state.Window, n int, now, period float64) float64 {
	for i := min(w.N, n) - 1; i >= 0; i-- {
		if w.Counts[i] > 0 {
			return finite(w.Start + float64(n-i)*period - now)
		}
	}
	return 0
}

// RefundWindow removes cost from the period that began at start (where a
// request committed earlier was counted), if that period is still in w.
// It reports whether w changed.
func RefundWindow(w *state.Window, start, period, cost float64) bool {
	period = validPeriod(period)
	i := math.Round((w.Start - start) / period)
	if !(i >= 0) || i >= float64(w.N) || !(cost > 0) {
		return false
	}
	w.Counts[int(i)] = max(w.Counts[int(i)]-cost, 0)
	return true
}

func validPeriod(p float64) float64 {
	if !(p > 0) || math.IsInf(p, 0) {
		return 1
	}
	return p
}

func validCost(c float64) float64 {
	if !(c > 0) {
		return 0
	}
	return c
}
