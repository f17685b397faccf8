package policy

import (
	"strconv"
	"strings"
	"time"
)

// This file parses a rule's "schedule": the days of the week and the time
// of day it applies, in a time zone (business hours, a nightly batch
// window, a weekly maintenance window).

// Schedule is when a rule applies, week after week: on each of Days
// (indexed by time.Weekday) from From until Until (minutes after local
// midnight), in Location. Until at or before From is a window that crosses
// midnight: it starts on a listed day and ends the next day. Outside its
// windows the rule is passed over like a rule whose match does not hold.
type Schedule struct {
	Days        [7]bool
	From, Until int // minutes: From 0..1439, Until 1..1440
	TimeZone    string
	Location    *time.Location
}

var (
	scheduleFields = []string{"days", "from", "until", "time_zone"}
	// weekdays are the names of "days", in the week's order from Monday,
	// as the normalized form writes them.
	weekdays   = []string{"mon", "tue", "wed", "thu", "fri", "sat", "sun"}
	weekdayOf  = map[string]time.Weekday{"mon": time.Monday, "tue": time.Tuesday, "wed": time.Wednesday, "thu": time.Thursday, "fri": time.Friday, "sat": time.Saturday, "sun": time.Sunday}
	scheduleEx = `{"days": ["mon", "tue", "wed", "thu", "fri"], "from": "09:00", "until": "18:00", "time_zone": "Europe/Berlin"}`
)

// overnight reports whether the window ends the day after it starts.
func (s *Schedule) overnight() bool { return s.Until <= s.From }

// Window returns the window that holds now (Unix nanoseconds), or, when
// none does, the next one to start: ok reports whether now is in it. A
// filter that caches the answer until the window's start or end, whichever
// comes first after now, reads the time zone once per window.
func (s *Schedule) Window(now int64) (start, end int64, ok bool) {
	t := time.Unix(0, now).In(s.Location)
	y, m, d := t.Date()
	// The window that started yesterday may run past midnight; the next
	// one starts within a week.
	for day := d - 1; day <= d+7; day++ {
		if !s.Days[time.Date(y, m, day, 12, 0, 0, 0, s.Location).Weekday()] {
			continue
		}
		endDay := day
		if s.overnight() {
			endDay++
		}
		start = time.Date(y, m, day, s.From/60, s.From%60, 0, 0, s.Location).UnixNano()
		end = time.Date(y, m, endDay, s.Until/60, s.Until%60, 0, 0, s.Location).UnixNano()
		switch {
		case now < start:
			return start, end, false
		case now < end:
			return start, end, true
		}
	}
	return 0, 0, false // no listed day: Parse refuses it
}

// ActiveAt reports whether the rule applies at now (Unix nanoseconds).
func (s *Schedule) ActiveAt(now int64) bool {
	_, _, ok := s.Window(now)
	return ok
}

// String puts the schedule in words: "mon-fri 09:00-18:00 Europe/Berlin".
func (s *Schedule) String() string {
	return s.daysText() + " " + clockText(s.From) + "-" + clockText(s.Until) + " " + s.TimeZone
}

// daysText lists the days, a run of three or more as "mon-fri".
func (s *Schedule) daysText() string {
	var parts []string
	for i := 0; i < 7; {
		if !s.Days[weekdayOf[weekdays[i]]] {
			i++
			continue
		}
		j := i
		for j+1 < 7 && s.Days[weekdayOf[weekdays[j+1]]] {
			j++
		}
		switch {
		case j-i >= 2:
			parts = append(parts, weekdays[i]+"-"+weekdays[j])
		case j > i:
			parts = append(parts, weekdays[i], weekdays[j])
		default:
			parts = append(parts, weekdays[i])
		}
		i = j + 1
	}
	if len(parts) == 1 && parts[0] == "mon-sun" {
		return "every day"
	}
	return strings.Join(parts, ",")
}

// dayNames lists the days in the week's order, for the normalized form.
func (s *Schedule) dayNames() []string {
	var out []string
	for _, n := range weekdays {
		if s.Days[weekdayOf[n]] {
			out = append(out, n)
		}
	}
	return out
}

// clockText writes minutes after midnight as "HH:MM" (1440 as "24:00").
func clockText(min int) string {
	h, m := strconv.Itoa(min/60), strconv.Itoa(min%60)
	if len(h) == 1 {
		h = "0" + h
	}
	if len(m) == 1 {
		m = "0" + m
	}
	return h + ":" + m
}

// schedule reads a rule's "schedule".
func (p *parser) schedule(path string, v *jvalue) *Schedule {
	if v.kind != jObject {
		p.errorf(path, "must be an object such as ", scheduleEx, ", got ", v.kind.String())
		return nil
	}
	if len(v.obj) == 0 {
		p.errorf(path, "is empty; give days, from, until or time_zone, e.g. ", scheduleEx)
		return nil
	}
	before := len(p.errs)
	f := p.object(path, v, scheduleFields)
	s := &Schedule{From: 0, Until: 24 * 60, TimeZone: "UTC", Location: time.UTC}
	s.Days = [7]bool{true, true, true, true, true, true, true}
	if dv := f["days"]; dv != nil {
		s.Days = p.scheduleDays(join(path, "days"), dv)
	}
	if tv := f["from"]; tv != nil {
		s.From, _ = p.clock(join(path, "from"), tv, false)
	}
	if tv := f["until"]; tv != nil {
		s.Until, _ = p.clock(join(path, "until"), tv, true)
		if s.Until == s.From && f["from"] != nil {
			p.errorf(join(path, "until"), "is from (", tv.s, "): the window would be empty; for the whole day leave both out")
		}
	}
	if zv := f["time_zone"]; zv != nil {
		zpath := join(path, "time_zone")
		switch {
		case zv.kind != jString:
			p.errorf(zpath, `must be an IANA time zone name such as "Europe/Berlin", got `, zv.kind.String())
		default:
			if loc, msg := loadZone(zv.s); msg != "" {
				p.errorf(zpath, msg)
			} else {
				s.TimeZone, s.Location = zv.s, loc
			}
		}
	}
	if len(p.errs) != before {
		return nil
	}
	return s
}

// scheduleDays reads "days": a non-empty list of weekday names.
func (p *parser) scheduleDays(path string, v *jvalue) (days [7]bool) {
	const want = `a list of days such as ["mon", "tue", "wed", "thu", "fri"] (mon, tue, wed, thu, fri, sat, sun)`
	if v.kind != jArray || len(v.arr) == 0 {
		p.errorf(path, "must be ", want)
		return days
	}
	for i, e := range v.arr {
		epath := index(path, i)
		wd, ok := weekdayOf[e.s] // lower case, as the schema's enum
		switch {
		case e.kind != jString || !ok:
			got := e.kind.String()
			if e.kind == jString {
				got = quoteShort(e.s)
			}
			p.errorf(epath, "must be one of ", quoteList(weekdays), "; got ", got)
		case days[wd]:
			p.errorf(epath, "duplicate day ", quoteShort(e.s))
		default:
			days[wd] = true
		}
	}
	return days
}

// clock reads "HH:MM" (24-hour; "24:00" only when end) as minutes after
// midnight.
func (p *parser) clock(path string, v *jvalue, end bool) (int, bool) {
	want := `a time of day "HH:MM" from "00:00" to "23:59"`
	if end {
		want = `a time of day "HH:MM" from "00:00" to "24:00"`
	}
	if v.kind != jString {
		p.errorf(path, "must be ", want, ", got ", v.kind.String())
		return 0, false
	}
	h, m, ok := strings.Cut(v.s, ":")
	hh, err1 := strconv.Atoi(h)
	mm, err2 := strconv.Atoi(m)
	min := hh*60 + mm
	switch {
	case !ok || len(h) != 2 || len(m) != 2 || err1 != nil || err2 != nil || mm > 59:
	case end && min <= 24*60:
		return min, true
	case !end && min < 24*60:
		return min, true
	}
	p.errorf(path, quoteShort(v.s), " is not ", want)
	return 0, false
}

// Timed reports whether the rule applies only at some times: it has
// bounds ("from", "until") or a schedule.
func (r *Rule) Timed() bool { return r.Bounded() || r.Schedule != nil }

// AppliesAt reports whether now (Unix nanoseconds) is within the rule's
// bounds and schedule.
func (r *Rule) AppliesAt(now int64) bool {
	return r.Bounds.ActiveAt(now) && (r.Schedule == nil || r.Schedule.ActiveAt(now))
}
