package limiter

import (
	"math"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/shared/state"
)

func mustZone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("LoadLocation(%q): %v", name, err)
	}
	return loc
}

// at parses a wall-clock time in loc ("2006-01-02 15:04:05", the first of
// two equal wall times across a fall-back change).
func at(t testing.TB, loc *time.Location, s string) float64 {
	t.Helper()
	tm, err := time.ParseInLocation(time.DateTime, s, loc)
	if err != nil {
		t.Fatal(err)
	}
	return float64(tm.Unix())
}

// TestPeriodBoundsFollowTheCalendar checks the period around a time in
// zones and across the changes the calendar makes: month ends, a leap day,
// both daylight-saving changes of Europe/Berlin and America/New_York, ISO
// weeks and a half-hour offset zone.
func TestPeriodBoundsFollowTheCalendar(t *testing.T) {
	berlin := mustZone(t, "Europe/Berlin")
	ny := mustZone(t, "America/New_York")
	kolkata := mustZone(t, "Asia/Kolkata")
	cases := []struct {
		name       string
		loc        *time.Location
		p          Period
		now        string // wall time in loc
		start, end string // wall times in loc
		hours      float64
	}{
		{"month of 31 days, last second", berlin, PeriodMonth, "2026-01-31 23:59:59", "2026-01-01 00:00:00", "2026-02-01 00:00:00", 31 * 24},
		{"next month's first second", berlin, PeriodMonth, "2026-02-01 00:00:00", "2026-02-01 00:00:00", "2026-03-01 00:00:00", 28 * 24},
		{"leap February has 29 days", time.UTC, PeriodMonth, "2028-02-29 12:00:00", "2028-02-01 00:00:00", "2028-03-01 00:00:00", 29 * 24},
		{"the leap day is a day", time.UTC, PeriodDay, "2028-02-29 23:59:59", "2028-02-29 00:00:00", "2028-03-01 00:00:00", 24},
		{"a 30-day month", ny, PeriodMonth, "2026-04-30 23:00:00", "2026-04-01 00:00:00", "2026-05-01 00:00:00", 30*24 - 0},
		// March 2026 in Berlin loses an hour on the 29th.
		{"Berlin month with the spring change", berlin, PeriodMonth, "2026-03-15 10:00:00", "2026-03-01 00:00:00", "2026-04-01 00:00:00", 31*24 - 1},
		{"a year in Berlin: 365 days, both changes", berlin, PeriodYear, "2026-07-01 12:00:00", "2026-01-01 00:00:00", "2027-01-01 00:00:00", 365 * 24},
		{"a leap year", time.UTC, PeriodYear, "2028-12-31 23:59:59", "2028-01-01 00:00:00", "2029-01-01 00:00:00", 366 * 24},
		{"New Year's first second", ny, PeriodYear, "2027-01-01 00:00:00", "2027-01-01 00:00:00", "2028-01-01 00:00:00", 365 * 24},
		{"Berlin spring-forward day has 23 hours", berlin, PeriodDay, "2026-03-29 12:00:00", "2026-03-29 00:00:00", "2026-03-30 00:00:00", 23},
		{"Berlin fall-back day has 25 hours", berlin, PeriodDay, "2026-10-25 23:30:00", "2026-10-25 00:00:00", "2026-10-26 00:00:00", 25},
		{"Berlin hour after spring forward", berlin, PeriodHour, "2026-03-29 03:10:00", "2026-03-29 03:00:00", "2026-03-29 04:00:00", 1},
		{"Berlin hour before spring forward", berlin, PeriodHour, "2026-03-29 01:59:59", "2026-03-29 01:00:00", "2026-03-29 03:00:00", 1},
		{"New York spring-forward day has 23 hours", ny, PeriodDay, "2026-03-08 05:00:00", "2026-03-08 00:00:00", "2026-03-09 00:00:00", 23},
		{"New York fall-back day has 25 hours", ny, PeriodDay, "2026-11-01 01:30:00", "2026-11-01 00:00:00", "2026-11-02 00:00:00", 25},
		{"week starts Monday (Sunday is its last day)", berlin, PeriodWeek, "2026-03-29 23:00:00", "2026-03-23 00:00:00", "2026-03-30 00:00:00", 7*24 - 1},
		{"week containing the fall-back change", berlin, PeriodWeek, "2026-10-26 00:00:00", "2026-10-26 00:00:00", "2026-11-02 00:00:00", 7 * 24},
		{"week across a year end", time.UTC, PeriodWeek, "2027-01-01 00:00:00", "2026-12-28 00:00:00", "2027-01-04 00:00:00", 7 * 24},
		{"half-hour offset hours start at local :00", kolkata, PeriodHour, "2026-05-05 10:59:59", "2026-05-05 10:00:00", "2026-05-05 11:00:00", 1},
		{"UTC day", nil, PeriodDay, "2026-05-05 10:59:59", "2026-05-05 00:00:00", "2026-05-06 00:00:00", 24},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			loc := c.loc
			if loc == nil {
				loc = time.UTC
			}
			now := at(t, loc, c.now)
			start, end := PeriodBounds(c.p, c.loc, now)
			if want := at(t, loc, c.start); start != want {
				t.Errorf("start %s, want %s", time.Unix(int64(start), 0).In(loc), c.start)
			}
			if want := at(t, loc, c.end); end != want {
				t.Errorf("end %s, want %s", time.Unix(int64(end), 0).In(loc), c.end)
			}
			if got := (end - start) / 3600; got != c.hours {
				t.Errorf("period of %v hours, want %v", got, c.hours)
			}
		})
	}
}

// TestPeriodBoundsFallBackHourRepeats: in the repeated hour of a fall-back
// change (Berlin 2026-10-25, 02:00 CEST then 02:00 CET) each occurrence is
// its own hour of 3600 s.
func TestPeriodBoundsFallBackHourRepeats(t *testing.T) {
	berlin := mustZone(t, "Europe/Berlin")
	first := at(t, berlin, "2026-10-25 02:30:00") // CEST, the first occurrence
	second := first + 3600                        // 02:30 CET
	s1, e1 := PeriodBounds(PeriodHour, berlin, first)
	s2, e2 := PeriodBounds(PeriodHour, berlin, second)
	if e1 != s2 || e1-s1 != 3600 || e2-s2 != 3600 || s1 > first || second >= e2 {
		t.Fatalf("hours [%v,%v) and [%v,%v) around the repeated 02:00", s1, e1, s2, e2)
	}
}

// TestQuotaResetsAtTheCalendarBoundary: a daily Berlin quota used up late
// on the 23-hour day refuses until local midnight, Retry (Wait) names the
// midnight, and the next day starts from zero.
func TestQuotaResetsAtTheCalendarBoundary(t *testing.T) {
	berlin := mustZone(t, "Europe/Berlin")
	q := NewQuota(3, PeriodDay, berlin)
	var w state.Window
	exists := false
	now := at(t, berlin, "2026-03-29 22:00:00")
	for i := 0; i < 3; i++ {
		if d := q.Take(&w, exists, now, 1); !d.Allowed || d.Remaining != float64(2-i) {
			t.Fatalf("request %d: %+v", i, d)
		}
		exists = true
	}
	d := q.Take(&w, exists, now, 1)
	midnight := at(t, berlin, "2026-03-30 00:00:00")
	if d.Allowed || d.Wait != midnight-now || d.Remaining != 0 {
		t.Fatalf("over the quota: %+v, want refused with wait %v", d, midnight-now)
	}
	if d := q.Take(&w, exists, midnight-1, 1); d.Allowed {
		t.Fatalf("a second before midnight: %+v", d)
	}
	if d := q.Take(&w, exists, midnight, 1); !d.Allowed || d.Remaining != 2 || d.Reset != 24*3600 {
		t.Fatalf("at midnight: %+v, want allowed with 2 left and reset in 24 h", d)
	}
}

// TestQuotaTakeTable covers the decisions of one period: costs, the limit,
// a backwards clock, corrupt and older states.
func TestQuotaTakeTable(t *testing.T) {
	jan := at(t, time.UTC, "2026-01-10 00:00:00")
	janStart := at(t, time.UTC, "2026-01-01 00:00:00")
	febStart := at(t, time.UTC, "2026-02-01 00:00:00")
	cases := []struct {
		name      string
		w         state.Window
		exists    bool
		now, cost float64
		allowed   bool
		used      float64 // Counts[0] after
		start     float64 // Start after
		wait      float64
	}{
		{"fresh state", state.Window{}, false, jan, 4, true, 4, janStart, 0},
		{"fits exactly", state.Window{Start: janStart, N: 1, Counts: [60]float64{6}}, true, jan, 4, true, 10, janStart, 0},
		{"over the limit", state.Window{Start: janStart, N: 1, Counts: [60]float64{7}}, true, jan, 4, false, 7, janStart, febStart - jan},
		{"cost above the limit never fits", state.Window{}, false, jan, 11, false, 0, janStart, febStart - jan},
		{"previous month forgotten", state.Window{Start: at(t, time.UTC, "2025-12-01 00:00:00"), N: 1, Counts: [60]float64{10}}, true, jan, 1, true, 1, janStart, 0},
		{"backwards clock counts in the stored period", state.Window{Start: febStart, N: 1, Counts: [60]float64{9}}, true, jan, 2, false, 9, febStart, at(t, time.UTC, "2026-03-01 00:00:00") - jan},
		{"corrupt count reads as 0", state.Window{Start: janStart, N: 1, Counts: [60]float64{math.NaN()}}, true, jan, 1, true, 1, janStart, 0},
		{"extra counts are dropped", state.Window{Start: janStart, N: 3, Counts: [60]float64{2, 5, 5}}, true, jan, 1, true, 3, janStart, 0},
		{"NaN clock reads as the stored start", state.Window{Start: janStart, N: 1, Counts: [60]float64{10}}, true, math.NaN(), 1, false, 10, janStart, febStart - janStart},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q := NewQuota(10, PeriodMonth, nil)
			w := c.w
			d := q.Take(&w, c.exists, c.now, c.cost)
			if d.Allowed != c.allowed || w.Counts[0] != c.used || w.Start != c.start || d.Wait != c.wait {
				t.Fatalf("got %+v, used %v, start %v; want allowed %v, used %v, start %v, wait %v",
					d, w.Counts[0], w.Start, c.allowed, c.used, c.start, c.wait)
			}
			if w.N != 1 || w.Counts[1] != 0 {
				t.Fatalf("state keeps %d counts", w.N)
			}
		})
	}
}

// TestQuotaCacheAgreesWithUncached: the cached bounds give the same
// decisions as a Quota without a cache over times that jump back and forth
// across periods.
func TestQuotaCacheAgreesWithUncached(t *testing.T) {
	ny := mustZone(t, "America/New_York")
	cached := NewQuota(5, PeriodDay, ny)
	plain := Quota{Limit: 5, Period: PeriodDay, Location: ny}
	base := at(t, ny, "2026-11-01 00:00:00")
	times := []float64{base, base + 3600, base - 10, base + 25*3600 - 1, base + 25*3600, base + 3600, base + 90000}
	for _, now := range times {
		s1, e1 := cached.Bounds(now)
		s2, e2 := plain.Bounds(now)
		if s1 != s2 || e1 != e2 {
			t.Fatalf("at %v: cached [%v,%v), uncached [%v,%v)", now, s1, e1, s2, e2)
		}
	}
}

// TestQuotaAdmitAndCharge: a response-charged quota admits while use is
// below the limit, and a charge may exceed it by max_debt only.
func TestQuotaAdmitAndCharge(t *testing.T) {
	q := NewQuota(100, PeriodHour, nil)
	now := at(t, time.UTC, "2026-06-01 10:30:00")
	var w state.Window
	if d := q.Admit(&w, false, now); !d.Allowed || d.Remaining != 100 {
		t.Fatalf("fresh: %+v", d)
	}
	if clamped := q.Charge(&w, true, now, 99, 50); clamped || w.Counts[0] != 99 {
		t.Fatalf("charge 99: use %v clamped %v", w.Counts[0], clamped)
	}
	if d := q.Admit(&w, true, now); !d.Allowed || d.Remaining != 1 {
		t.Fatalf("1 left: %+v", d)
	}
	if clamped := q.Charge(&w, true, now, 1e9, 50); !clamped || w.Counts[0] != 150 {
		t.Fatalf("huge charge: use %v clamped %v, want 150 and clamped", w.Counts[0], clamped)
	}
	d := q.Admit(&w, true, now)
	if d.Allowed || d.Wait != 1800 {
		t.Fatalf("in debt: %+v, want refused until the hour ends", d)
	}
	if d := q.Admit(&w, true, now+1800); !d.Allowed || d.Remaining != 100 {
		t.Fatalf("next hour: %+v", d)
	}
	if clamped := q.Charge(&w, true, now+1800, -5, 50); clamped || w.Counts[0] != 0 {
		t.Fatalf("negative charge changed the use to %v", w.Counts[0])
	}
}

// TestTokenBucketAdmitAndCharge: a response-charged bucket admits while it
// holds something, goes into debt down to -maxDebt, and refuses until the
// refill has paid the debt.
func TestTokenBucketAdmitAndCharge(t *testing.T) {
	tb := TokenBucket{Rate: 10, Burst: 100}
	b, d := tb.Admit(state.Bucket{}, false, 1000)
	if !d.Allowed || b.Tokens != 100 {
		t.Fatalf("fresh: %+v %+v", b, d)
	}
	b, clamped := tb.Charge(b, true, 1000, 130, 100)
	if clamped || b.Tokens != -30 {
		t.Fatalf("charge 130: %+v clamped %v", b, clamped)
	}
	if _, d := tb.Admit(b, true, 1002); d.Allowed || math.Abs(d.Wait-1) > 1e-9 {
		t.Fatalf("in debt of 10 after 2 s: %+v, want refused for 1 s", d)
	}
	if _, d := tb.Admit(b, true, 1003.5); !d.Allowed {
		t.Fatalf("debt paid: %+v", d)
	}
	b, clamped = tb.Charge(b, true, 1000, math.Inf(1), 100)
	if !clamped || b.Tokens != -100 {
		t.Fatalf("infinite charge: %+v clamped %v, want -100", b, clamped)
	}
	b2, _ := tb.Charge(b, true, 1000, math.NaN(), 100)
	if b2.Tokens != -100 {
		t.Fatalf("NaN charge changed the bucket: %+v", b2)
	}
	if _, d := tb.Admit(state.Bucket{Tokens: 0, LastRefill: 1000}, true, 1000); d.Allowed {
		t.Fatalf("an empty bucket admitted: %+v", d)
	}
}

// TestAdmitCostAdmitsWhileTheCostIsLeft: a rule charging a known cost
// for some responses admits while a whole cost is left (three failures of
// burst 3, then one per 1/rate), takes nothing, and tells a refused
// request to wait until the cost is there.
func TestAdmitCostAdmitsWhileTheCostIsLeft(t *testing.T) {
	tb := TokenBucket{Rate: 0.01, Burst: 3}
	b, d := tb.AdmitCost(state.Bucket{}, false, 1000, 1)
	if !d.Allowed || b.Tokens != 3 || d.Remaining != 3 {
		t.Fatalf("fresh: %+v %+v, want admitted with 3 left, nothing taken", b, d)
	}
	for range 3 {
		b, _ = tb.Charge(b, true, 1000, 1, 3)
	}
	b, d = tb.AdmitCost(b, true, 1001, 1)
	if d.Allowed || math.Abs(d.Wait-99) > 1e-6 {
		t.Fatalf("after three charges: %+v, want refused for 99 s", d)
	}
	if _, d := tb.Admit(b, true, 1001); !d.Allowed {
		t.Fatalf("Admit refused a bucket holding 0.01: %+v (the test no longer tells the two apart)", d)
	}
	if b2, d := tb.AdmitCost(b, true, 1100, 1); !d.Allowed || b2.Tokens != 1 {
		t.Fatalf("100 s on: %+v %+v, want admitted holding 1", b2, d)
	}
	b, _ = tb.Charge(state.Bucket{Tokens: 1, LastRefill: 1000}, true, 1000, 3, 5) // in debt: -2
	if _, d := tb.AdmitCost(b, true, 1000, 1); d.Allowed || math.Abs(d.Wait-300) > 1e-6 {
		t.Fatalf("in debt of 2: %+v, want refused for 300 s", d)
	}

	q := NewQuota(2, PeriodHour, nil)
	now := at(t, time.UTC, "2026-06-01 10:30:00")
	var w state.Window
	if d := q.AdmitCost(&w, false, now, 2); !d.Allowed || w.Counts[0] != 0 || d.Remaining != 2 {
		t.Fatalf("quota, fresh: %+v, use %v", d, w.Counts[0])
	}
	q.Charge(&w, true, now, 1, 0)
	if d := q.AdmitCost(&w, true, now, 2); d.Allowed || d.Wait != 1800 || w.Counts[0] != 1 {
		t.Fatalf("quota, 1 of 2 used, cost 2: %+v, use %v; want refused until the hour ends, nothing counted", d, w.Counts[0])
	}
	if d := q.AdmitCost(&w, true, now, 1); !d.Allowed || w.Counts[0] != 1 {
		t.Fatalf("quota, cost 1: %+v, use %v; want admitted, nothing counted", d, w.Counts[0])
	}
}

// TestParseReportedCost: what a response may report, and what falls back
// to the default cost.
func TestParseReportedCost(t *testing.T) {
	for _, c := range []struct {
		in   string
		want float64
		ok   bool
	}{
		{"1234", 1234, true},
		{" 0 ", 0, true},
		{"2.5", 2.5, true},
		{"1e12", MaxCost, true},
		{"1e400", MaxCost, true},
		{"-5", 0, false},
		{"-0.0001", 0, false},
		{"", 0, false},
		{"ten", 0, false},
		{"inf", 0, false},
		{"NaN", 0, false},
		{"0x10", 0, false},
		{"12 tokens", 0, false},
	} {
		got, ok := ParseReportedCost(c.in)
		if got != c.want || ok != c.ok {
			t.Errorf("ParseReportedCost(%q) = %v, %v; want %v, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

// BenchmarkQuotaVsFixedWindow decides one identity's requests 1 ms apart
// with a monthly Berlin quota (bounds cached) and with a fixed window: the
// algorithms alone, without the filter around them. Without the cache
// ("uncached") every request computes the calendar bounds.
func BenchmarkQuotaVsFixedWindow(b *testing.B) {
	now := at(b, time.UTC, "2026-10-20 12:00:00")
	for _, c := range []struct {
		name string
		l    Window
	}{
		{"fixed_window", FixedWindow{Limit: 1e12, Window: 3600}},
		{"quota", NewQuota(1e12, PeriodMonth, mustZone(b, "Europe/Berlin"))},
		{"quota-uncached", Quota{Limit: 1e12, Period: PeriodMonth, Location: mustZone(b, "Europe/Berlin")}},
	} {
		b.Run(c.name, func(b *testing.B) {
			var w state.Window
			exists := false
			for i := 0; i < b.N; i++ {
				if d := c.l.Take(&w, exists, now+float64(i)/1000, 1); !d.Allowed {
					b.Fatal("refused")
				}
				exists = true
			}
		})
	}
}

// TestQuotaLimitChangeKeepsThePeriodsCount is what an override change
// does to an identity: the state (the period's use) is kept, the new limit
// applies to it. A lowered limit below the use rejects until the reset; a
// raised one admits the difference.
func TestQuotaLimitChangeKeepsThePeriodsCount(t *testing.T) {
	berlin := mustZone(t, "Europe/Berlin")
	now := at(t, berlin, "2026-05-20 10:00:00")
	reset := at(t, berlin, "2026-06-01 00:00:00")
	var w state.Window
	big := NewQuota(100, PeriodMonth, berlin)
	for i := 0; i < 40; i++ {
		if d := big.Take(&w, i > 0, now, 1); !d.Allowed {
			t.Fatalf("request %d under the limit of 100: %+v", i, d)
		}
	}
	lowered := NewQuota(30, PeriodMonth, berlin)
	d := lowered.Take(&w, true, now+60, 1)
	if d.Allowed || d.Remaining != 0 || d.Wait != reset-(now+60) || w.Counts[0] != 40 {
		t.Fatalf("limit lowered to 30 after a use of 40: %+v (use %v), want refused until the reset", d, w.Counts[0])
	}
	if d := lowered.Take(&w, true, reset, 1); !d.Allowed || d.Remaining != 29 {
		t.Fatalf("at the reset: %+v, want allowed with 29 left", d)
	}
	w = state.Window{}
	for i := 0; i < 40; i++ {
		lowered.Take(&w, i > 0, now, 1) // 30 admitted, 10 refused
	}
	raised := NewQuota(35, PeriodMonth, berlin)
	if d := raised.Take(&w, true, now, 5); !d.Allowed || d.Remaining != 0 || w.Counts[0] != 35 {
		t.Fatalf("limit raised to 35 after a use of 30: %+v (use %v), want the 5 admitted", d, w.Counts[0])
	}
}
