package filter

// A rule for a time: its bounds ("from", "until") and its schedule's
// windows ("schedule"). The schedule is read in its time zone once per
// window: the answer is kept until the window starts or ends.

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
	if r.sched == nil {
		return true
	}
	c := &r.schedCache
	if now < c.from || now >= c.until { // a VM runs one callback at a time
		start, end, on := r.sched.Window(now)
		if on {
			*c = scheduleCache{from: start, until: end, on: true}
		} else {
			*c = scheduleCache{from: now, until: start}
		}
	}
	return c.on
}
