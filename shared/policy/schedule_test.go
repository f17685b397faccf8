package policy

import (
	"strings"
	"testing"
	"time"
)

func scheduleOf(t *testing.T, schedule string) *Schedule {
	t.Helper()
	cfg, err := Parse([]byte(`{"rules": [{"name": "r", "limit_keys": ["ip:address"], "algorithm": "token_bucket",
	  "algorithm_config": {"rps": 1, "burst": 2}, "schedule": ` + schedule + `}]}`))
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Policies[0].Rules[0].Schedule
}

// A schedule applies on its days from from (inclusive) until until
// (exclusive), in its time zone; until at or before from ends the next
// day; the answer says when the window starts and ends.
func TestScheduleAppliesInItsWindows(t *testing.T) {
	berlin, _ := time.LoadLocation("Europe/Berlin")
	at := func(loc *time.Location, y int, m time.Month, d, hh, mm int) int64 {
		return time.Date(y, m, d, hh, mm, 0, 0, loc).UnixNano()
	}
	office := scheduleOf(t, `{"days": ["mon", "tue", "wed", "thu", "fri"], "from": "09:00", "until": "18:00", "time_zone": "Europe/Berlin"}`)
	night := scheduleOf(t, `{"days": ["sun"], "from": "22:00", "until": "02:00"}`)
	for _, c := range []struct {
		name string
		s    *Schedule
		now  int64
		want bool
		next int64 // the window's start when outside it, its end inside
	}{
		{"Friday 08:59 Berlin", office, at(berlin, 2026, 12, 4, 8, 59), false, at(berlin, 2026, 12, 4, 9, 0)},
		{"Friday 09:00 Berlin", office, at(berlin, 2026, 12, 4, 9, 0), true, at(berlin, 2026, 12, 4, 18, 0)},
		{"Friday 17:59:59 Berlin", office, at(berlin, 2026, 12, 4, 18, 0) - 1, true, at(berlin, 2026, 12, 4, 18, 0)},
		{"Friday 18:00 Berlin", office, at(berlin, 2026, 12, 4, 18, 0), false, at(berlin, 2026, 12, 7, 9, 0)},
		{"Saturday noon UTC", office, at(time.UTC, 2026, 12, 5, 12, 0), false, at(berlin, 2026, 12, 7, 9, 0)},
		{"Monday 08:30 UTC is 09:30 in Berlin", office, at(time.UTC, 2026, 12, 7, 8, 30), true, at(berlin, 2026, 12, 7, 18, 0)},
		{"the Monday after summer time began", office, at(berlin, 2026, 3, 30, 9, 0), true, at(berlin, 2026, 3, 30, 18, 0)},
		{"Sunday 21:59", night, at(time.UTC, 2026, 12, 6, 21, 59), false, at(time.UTC, 2026, 12, 6, 22, 0)},
		{"Sunday 23:00", night, at(time.UTC, 2026, 12, 6, 23, 0), true, at(time.UTC, 2026, 12, 7, 2, 0)},
		{"Monday 01:59 in Sunday's window", night, at(time.UTC, 2026, 12, 7, 1, 59), true, at(time.UTC, 2026, 12, 7, 2, 0)},
		{"Monday 02:00", night, at(time.UTC, 2026, 12, 7, 2, 0), false, at(time.UTC, 2026, 12, 13, 22, 0)},
	} {
		start, end, ok := c.s.Window(c.now)
		next := start
		if ok {
			next = end
		}
		if ok != c.want || next != c.next || c.s.ActiveAt(c.now) != c.want {
			t.Errorf("%s: active %v until %s, want %v until %s", c.name, ok, time.Unix(0, next).UTC(), c.want, time.Unix(0, c.next).UTC())
		}
	}
	if got := office.String(); got != "mon-fri 09:00-18:00 Europe/Berlin" {
		t.Errorf("in words: %q", got)
	}
	if got := scheduleOf(t, `{"days": ["sat", "mon", "sun", "wed"]}`).String(); got != "mon,wed,sat,sun 00:00-24:00 UTC" {
		t.Errorf("in words: %q", got)
	}
}

// The normalized form writes every field, the days in the week's order,
// and reads back the same schedule.
func TestScheduleNormalizedForm(t *testing.T) {
	cfg, err := Parse([]byte(`{"rules": [{"name": "batch", "action": "exempt", "schedule": {"until": "06:00", "days": ["sun", "sat"]}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	norm, _ := cfg.MarshalJSON()
	if want := `"schedule":{"days":["sat","sun"],"from":"00:00","until":"06:00","time_zone":"UTC"}`; !strings.Contains(string(norm), want) {
		t.Errorf("normalized: %s, want %s", norm, want)
	}
	back, err := Parse(norm)
	if err != nil || *back.Policies[0].Rules[0].Schedule != *cfg.Policies[0].Rules[0].Schedule {
		t.Errorf("read back: %v %+v", err, back.Policies[0].Rules[0].Schedule)
	}
}

func TestScheduleMistakesAreRefusedNamingTheField(t *testing.T) {
	for _, c := range []struct{ schedule, want string }{
		{`"weekdays"`, `rules[0].schedule: must be an object such as {"days"`},
		{`{}`, `rules[0].schedule: is empty`},
		{`{"days": []}`, `rules[0].schedule.days: must be a list of days`},
		{`{"days": ["monday"]}`, `rules[0].schedule.days[0]: must be one of "mon", "tue"`},
		{`{"days": ["mon", "mon"]}`, `rules[0].schedule.days[1]: duplicate day "mon"`},
		{`{"days": ["Mon"]}`, `rules[0].schedule.days[0]: must be one of "mon", "tue"`},
		{`{"from": "9:00"}`, `rules[0].schedule.from: "9:00" is not a time of day "HH:MM" from "00:00" to "23:59"`},
		{`{"from": "24:00"}`, `rules[0].schedule.from: "24:00" is not a time of day`},
		{`{"until": "24:01"}`, `rules[0].schedule.until: "24:01" is not a time of day "HH:MM" from "00:00" to "24:00"`},
		{`{"from": "09:00", "until": "09:00"}`, `rules[0].schedule.until: is from (09:00): the window would be empty`},
		{`{"time_zone": "Berlin"}`, `rules[0].schedule.time_zone: "Berlin" is not a known IANA time zone`},
		{`{"timezone": "UTC"}`, `rules[0].schedule.timezone: unknown field`},
	} {
		_, err := Parse([]byte(`{"rules": [{"name": "r", "action": "deny", "schedule": ` + c.schedule + `}]}`))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.schedule, err, c.want)
		}
	}
}
