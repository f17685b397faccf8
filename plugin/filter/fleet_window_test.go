package filter

import (
	"testing"
	"time"

	"github.com/sluice-rl/sluice/shared/limiter"
	"github.com/sluice-rl/sluice/shared/rls"
)

func TestWindowedLeaseEndsAtTheWindowsEndFromTheSendTime(t *testing.T) {
	fc := &compiledFleet{ttlMS: 10000}
	win := &ruleFleet{fc: fc, windowed: true, periodMS: 60000}
	bucket := &ruleFleet{fc: fc}
	reset := &rls.Status{HasReset: true, ResetSeconds: 30}
	cases := []struct {
		name      string
		rf        *ruleFleet
		st        *rls.Status
		now, sent int64
		want      int64
	}{
		{"a window's lease ends at send time + duration_until_reset", win, reset, 1050, 1000, 31000},
		{"a token bucket's at now + lease_ttl_ms", bucket, reset, 1050, 1000, 11050},
		{"no duration_until_reset: the lease TTL", win, &rls.Status{}, 1050, 1000, 11050},
		{"a send time after now (a bad clock): the lease TTL", win, reset, 1050, 2000, 11050},
	}
	for _, c := range cases {
		if got := c.rf.leaseUntil(c.st, c.now, c.sent); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}

func TestWindowStartAndOtherWindow(t *testing.T) {
	win := &ruleFleet{windowed: true, periodMS: 60000}
	end := time.Date(2026, 3, 1, 12, 1, 0, 0, time.UTC).UnixMilli()
	if got, want := win.windowStart(end), end-60000; got != want {
		t.Errorf("windowStart of a lease ending at 12:01 = %d, want 12:00 (%d)", got, want)
	}
	if win.otherWindow(end, end+20) {
		t.Error("two grants of one window 20 ms apart counted as two windows")
	}
	if !win.otherWindow(end, end+60000) {
		t.Error("grants of consecutive windows counted as one")
	}
	if (&ruleFleet{}).otherWindow(0, 1<<40) {
		t.Error("a token bucket's pool has windows")
	}
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	month := &ruleFleet{windowed: true, quota: limiter.Quota{Limit: 10, Period: limiter.PeriodMonth, Location: berlin}}
	// March 2026 in Berlin: from 1 March 00:00 CET to 1 April 00:00 CEST.
	marchEnd := time.Date(2026, 4, 1, 0, 0, 0, 0, berlin).UnixMilli()
	if got, want := month.windowStart(marchEnd), time.Date(2026, 3, 1, 0, 0, 0, 0, berlin).UnixMilli(); got != want {
		t.Errorf("windowStart of a lease ending with March in Berlin = %d, want 1 March 00:00 CET (%d)", got, want)
	}
	if month.otherWindow(marchEnd, marchEnd-5000) || !month.otherWindow(marchEnd, marchEnd+30*86400000) {
		t.Error("a month's grants: one window told apart, or two windows taken as one")
	}
}

func TestSlidingAndRollingWindowsLeaseShape(t *testing.T) {
	fc := &compiledFleet{syncMS: 100}
	shape := func(w limiter.Window) *ruleFleet {
		rf := &ruleFleet{fc: fc}
		rf.compileWindow(&compiledRule{win: w})
		return rf
	}
	// 100 per hour in 60 s sub-periods, at most 10 in one.
	roll := shape(limiter.RollingWindow{Limit: 100, Period: 60, Periods: 60, MaxPerPeriod: 10})
	if roll.periodMS != 60000 || roll.tb.Burst != 10 || roll.tb.Rate != 100.0/3600 || roll.sliding {
		t.Errorf("rolling: period %d ms, burst %v, rate %v, sliding %v; want the 60 s sub-period, the cap 10, 100 per hour",
			roll.periodMS, roll.tb.Burst, roll.tb.Rate, roll.sliding)
	}
	if got := roll.refusedWait(1000, 31000); got != 30000 {
		t.Errorf("a rolling window's refusal holds %d ms, want to the sub-period's end (30000)", got)
	}
	slide := shape(limiter.SlidingWindow{Limit: 50.5, Window: 10})
	if slide.periodMS != 10000 || slide.tb.Burst != 50 || slide.tb.Rate != 5 || !slide.sliding {
		t.Errorf("sliding: period %d ms, burst %v, rate %v, sliding %v; want the 10 s window, 50 whole requests, 5/s",
			slide.periodMS, slide.tb.Burst, slide.tb.Rate, slide.sliding)
	}
	if got := slide.refusedWait(1000, 31000); got != 100 {
		t.Errorf("a sliding window's refusal holds %d ms, want one sync interval (100): its estimate falls within the window", got)
	}
	if got := slide.refusedWait(1000, 1040); got != 40 {
		t.Errorf("a sliding window's refusal 40 ms before the window's end holds %d ms, want 40", got)
	}
}
