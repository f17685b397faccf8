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
