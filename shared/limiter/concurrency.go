package limiter

import "github.com/sluice-rl/sluice/shared/state"

// Concurrency admits at most Limit requests of one identity in flight at
// once. A request takes a place when it is admitted and gives it back when
// its stream ends (RefundWindow of the period it was counted in).
//
// The state is a window of two periods of Lease seconds, aligned to the
// epoch: c0 counts the places taken in the current period, c1 those of
// the period before, and
//
//	in flight = c0 + c1.
//
// A place is counted in the period its request was admitted in; when that
// period is two periods old its count leaves the state, given back or not.
// So a place a stream never gave back (its VM crashed before the stream
// ended) returns within 2*Lease seconds, and a stream lasting longer than
// Lease may stop counting after between Lease and 2*Lease seconds: Lease
// must be at least the longest request. In return the state is two numbers,
// whatever the number of requests in flight, and the filter stores it with
// the windows' machinery (bounded groups, overflow, refunds).
type Concurrency struct {
	Limit float64 // the most in flight at once, >= 1
	Lease float64 // seconds a place is counted at least, > 0
}

// ConcurrencyRetry is the wait a refused request is given: when a place
// frees depends on other requests, not on time.
const ConcurrencyRetry = 1

// Capacity returns Limit.
func (c Concurrency) Capacity() float64 { return c.Limit }

// PeriodSeconds returns Lease.
func (c Concurrency) PeriodSeconds() float64 { return c.Lease }

// Take implements Window: it admits the request when cost more places are
// free, and counts them in the current period. Remaining is the places
// still free; Reset is the time until every counted place has left the
// state (0 when none is taken, so an idle state may be reused like a fresh
// one).
func (c Concurrency) Take(w *state.Window, exists bool, now, cost float64) Decision {
	d := RollingWindow{Limit: c.Limit, Period: c.Lease, Periods: 2}.Take(w, exists, now, cost)
	if !d.Allowed {
		d.Wait = ConcurrencyRetry
	}
	return d
}
