package limiter

import (
	"math"
	"time"

	"github.com/sluice-rl/sluice/shared/state"
)

// Period is the calendar period of a Quota.
type Period uint8

// Calendar periods. A week starts on Monday (ISO 8601).
const (
	PeriodHour Period = iota + 1
	PeriodDay
	PeriodWeek
	PeriodMonth
	PeriodYear
)

// Nominal returns the period's usual length in seconds (a month: 30.436875
// days, the Gregorian mean). Calendar periods differ from it (a day of a
// daylight-saving change has 23 or 25 hours, a month 28 to 31 days); it is
// only used where a length is needed to tell periods apart (RefundWindow)
// and for the w of RateLimit-Policy.
func (p Period) Nominal() float64 {
	switch p {
	case PeriodHour:
		return 3600
	case PeriodWeek:
		return 7 * 86400
	case PeriodMonth:
		return 2629746
	case PeriodYear:
		return 31556952 // 365.2425 days
	}
	return 86400
}

// Quota admits at most Limit (summed cost) per calendar period (an hour, a
// day, an ISO week starting Monday 00:00, a month, a year) of the time zone
// Location (nil: UTC). The use resets at the start of each period in that
// zone: a month of 28, 29, 30 or 31 days, a day of 23 or 25 hours across a
// daylight-saving change.
//
// The state is a state.Window with one count: Start is the Unix time at
// which the stored period began, Counts[0] its use. A request whose now
// falls in a later period than the stored one starts from 0 (lazily, no
// timer). A clock that goes backwards into an earlier period counts in the
// stored period (no quota is minted), as with the other windows.
//
// A rejected request's Wait is the time to the end of the period (the
// reset): a quota does not refill before. A request costing more than
// Limit can never be admitted; its Wait is the same hint.
//
// Hours are 3600 s starting at a whole local hour (so zones with offsets of
// half an hour are respected); the calendar is the proleptic Gregorian one
// of the time package, with the zone's rules from the embedded tz database.
//
// Computing a period's bounds in a zone is the expensive part; NewQuota
// returns a Quota that caches the bounds of the last period it saw, so
// requests within one period only compare two numbers. Such a Quota (its
// copies share the cache) must not be used from several goroutines at
// once; a Quota built as a literal has no cache and is safe.
type Quota struct {
	Limit    float64 // the most use per period, > 0
	Period   Period
	Location *time.Location // nil: UTC

	cache *periodCache
}

// periodCache remembers the last computed period [start, end).
type periodCache struct{ start, end float64 }

// NewQuota returns a Quota with a bounds cache (see Quota).
func NewQuota(limit float64, period Period, loc *time.Location) Quota {
	return Quota{Limit: limit, Period: period, Location: loc, cache: &periodCache{start: 1, end: 0}}
}

// Capacity returns Limit.
func (q Quota) Capacity() float64 { return q.Limit }

// PeriodSeconds returns the period's nominal length (Period.Nominal).
func (q Quota) PeriodSeconds() float64 { return q.Period.Nominal() }

// Bounds returns the calendar period containing now (Unix seconds, >= 0
// and finite): its start and end, start <= now < end.
func (q Quota) Bounds(now float64) (start, end float64) {
	if c := q.cache; c != nil {
		if now >= c.start && now < c.end {
			return c.start, c.end
		}
		start, end = PeriodBounds(q.Period, q.Location, now)
		c.start, c.end = start, end
		return start, end
	}
	return PeriodBounds(q.Period, q.Location, now)
}

// PeriodBounds returns the calendar period of p in loc (nil: UTC) that
// contains now (Unix seconds): start <= now < end.
func PeriodBounds(p Period, loc *time.Location, now float64) (start, end float64) {
	if loc == nil {
		loc = time.UTC
	}
	if !isFinite(now) || now < 0 {
		now = 0
	}
	if now > maxUnix {
		now = maxUnix
	}
	sec := math.Floor(now)
	t := time.Unix(int64(sec), 0).In(loc)
	if p == PeriodHour {
		_, off := t.Zone()
		local := sec + float64(off)
		s := math.Floor(local/3600)*3600 - float64(off)
		return s, s + 3600
	}
	y, m, d := t.Date()
	var s, e time.Time
	switch p {
	case PeriodWeek:
		wd := (int(t.Weekday()) + 6) % 7 // Monday 0
		s = time.Date(y, m, d-wd, 0, 0, 0, 0, loc)
		e = time.Date(y, m, d-wd+7, 0, 0, 0, 0, loc)
	case PeriodMonth:
		s = time.Date(y, m, 1, 0, 0, 0, 0, loc)
		e = time.Date(y, m+1, 1, 0, 0, 0, 0, loc)
	case PeriodYear:
		s = time.Date(y, time.January, 1, 0, 0, 0, 0, loc)
		e = time.Date(y+1, time.January, 1, 0, 0, 0, 0, loc)
	default:
		s = time.Date(y, m, d, 0, 0, 0, 0, loc)
		e = time.Date(y, m, d+1, 0, 0, 0, 0, loc)
	}
	start, end = float64(s.Unix()), float64(e.Unix())
	if !(start <= now && now < end) {
		// A zone whose midnight does not exist on that day (a change at
		// 00:00) can make time.Date pick the hour before: keep the period
		// around now, never empty.
		start, end = min(start, sec), max(end, sec+1)
	}
	return start, end
}

// maxUnix bounds the time PeriodBounds computes with (year 9999), far
// beyond any real clock, so the calendar arithmetic never overflows.
const maxUnix = 253402300799

// Take implements Window; see Quota.
func (q Quota) Take(w *state.Window, exists bool, now, cost float64) Decision {
	return q.decide(w, exists, now, validCost(cost), false)
}

// Admit is the request phase of a rule charged from the response
// (Charge): the request is admitted while the period's use is below
// Limit, and nothing is counted yet. w is rotated to now like Take.
func (q Quota) Admit(w *state.Window, exists bool, now float64) Decision {
	return q.decide(w, exists, now, 0, true)
}

// AdmitCost is TokenBucket.AdmitCost for a quota: the request is admitted
// when cost still fits in the period's limit, and nothing is counted; the
// response decides whether Charge counts it. w is rotated to now.
func (q Quota) AdmitCost(w *state.Window, exists bool, now, cost float64) Decision {
	probe := *w
	if d := q.decide(&probe, exists, now, cost, false); !d.Allowed {
		*w = probe // rotated, nothing counted
		return d
	}
	return q.Admit(w, exists, now)
}

// decide rotates w to now and admits cost when it fits (admit: when
// something is left, counting nothing).
func (q Quota) decide(w *state.Window, exists bool, now, cost float64, admit bool) Decision {
	_, end := q.rotate(w, exists, &now)
	avail := max(q.Limit, 0) - w.Counts[0]
	var d Decision
	switch {
	case admit && avail > costEpsilon:
		d.Allowed = true
	case !admit && avail+costEpsilon >= cost:
		w.Counts[0] += cost
		avail -= cost
		d.Allowed = true
	default:
		d.Wait = max(finite(end-now), minWait)
	}
	d.Remaining = max(avail, 0)
	if w.Counts[0] > 0 {
		d.Reset = finite(end - now)
	}
	return d
}

// Charge adds cost to the use of the period containing now (a response's
// reported cost, charged after the request was admitted), letting the use
// exceed Limit by at most maxDebt: the rest is dropped and clamped reports
// it. The excess is a debt only within the period: the use resets at the
// next period like any other. A NaN or negative cost charges nothing.
func (q Quota) Charge(w *state.Window, exists bool, now, cost, maxDebt float64) (clamped bool) {
	cost = validCost(cost)
	q.rotate(w, exists, &now)
	ceiling := max(q.Limit, 0) + max(validCost(maxDebt), 0)
	used := w.Counts[0] + cost
	if used > ceiling {
		used, clamped = max(ceiling, w.Counts[0]), true
	}
	w.Counts[0] = used
	return clamped
}

// rotate brings w to the period containing now: a fresh count when the
// stored period is older (or the state is new or corrupt). It sanitizes
// *now like the other windows and returns the bounds of the period w now
// holds.
func (q Quota) rotate(w *state.Window, exists bool, now *float64) (start, end float64) {
	valid := exists && isFinite(w.Start) && w.Start >= 0 && w.N >= 1 && w.N <= state.MaxCounts
	t := *now
	if !isFinite(t) {
		t = 0
		if valid {
			t = w.Start
		}
	}
	t = max(t, 0)
	*now = t
	start, end = q.Bounds(t)
	switch {
	case !valid || w.Start < start:
		*w = state.Window{Start: start, N: 1}
	case w.Start > start: // a backwards clock: count in the stored, later period
		start, end = q.Bounds(w.Start)
		fallthrough
	default:
		if !(w.Counts[0] >= 0) || math.IsInf(w.Counts[0], 0) {
			w.Counts[0] = 0
		}
		if w.N > 1 {
			clear(w.Counts[1:])
			w.N = 1
		}
	}
	return start, end
}
