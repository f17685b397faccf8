package filter

import "github.com/sluice-rl/sluice/shared/policy"

// A rule (or an override) for a time: its bounds ("from", "until") and its
// schedule's windows ("schedule"). The schedule is read in its time zone
// once per window: the answer is kept until the window starts or ends.

// scheduleCache is a schedule's last answer: on from from (inclusive)
// until until (exclusive). The zero value holds for no time.
type scheduleCache struct {
	from, until int64
	on          bool
}

// activeAt reports whether the rule applies at now (Unix nanoseconds).
func (r *compiledRule) activeAt(now int64) bool {
	if !r.during.ActiveAt(now) {
		return false
	}
	return r.sched == nil || r.schedCache.in(r.sched, now)
}

// in reports whether now is in one of s's windows, from the cached answer
// while it holds (a VM runs one callback at a time).
func (c *scheduleCache) in(s *policy.Schedule, now int64) bool {
	if now < c.from || now >= c.until {
		start, end, on := s.Window(now)
		if on {
			*c = scheduleCache{from: start, until: end, on: true}
		} else {
			*c = scheduleCache{from: now, until: start}
		}
	}
	return c.on
}
