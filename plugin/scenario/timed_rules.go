package scenario

// Rules for a time ("from", "until"): a maintenance window that refuses
// writes and a stricter limit for a sale apply only in their time, read
// from the host's clock on each request; outside it the policy's next
// rule applies, with no push.

import "testing"

func init() {
	register(
		Case{Name: "TimedRulesApplyOnlyInTheirTime", Run: timedRulesApplyOnlyInTheirTime},
		Case{Name: "ScheduledRulesApplyInTheirWeeklyWindows", Run: scheduledRulesApplyInTheirWeeklyWindows},
	)
}

func timedRulesApplyOnlyInTheirTime(t *testing.T, start Starter) {
	got := replayPolicyTests(t, start, []byte(`{"rules": [
	  {"name": "maintenance", "action": "deny", "deny_status": 503, "match": {"method": {"in": ["POST", "PUT"]}},
	   "from": "2026-12-24T02:00:00Z", "until": "2026-12-24T02:00:10.5Z"},
	  {"name": "sale", "limit_keys": ["ip:address"], "algorithm": "fixed_window", "algorithm_config": {"limit": 2, "window_seconds": 60},
	   "until": "2026-12-24T02:01:00Z"},
	  {"name": "api", "limit_keys": ["ip:address"], "algorithm": "fixed_window", "algorithm_config": {"limit": 5, "window_seconds": 60}}]}`), []byte(`
tests:
  - name: writes are refused from 02:00 until 02:00:10.5, requests limited by the sale until 02:01
    start: 2026-12-24T01:59:59.999Z
    request: {method: POST}
    steps:
      - expect: {status: 200}
      - wait: 1ms
        repeat: 3
        expect: {status: 503, rule: maintenance}
      - request: {method: GET}
        repeat: 2
        expect: {status: 200}
      - request: {method: GET}
        expect: {status: 429, rule: sale}
      - wait: 10.499s
        expect: {status: 503, rule: maintenance}
      - wait: 1ms
        expect: {status: 429, rule: sale}
      - wait: 49.5s
        repeat: 5
        expect: {status: 200}
      - expect: {status: 429, rule: api}
`))
	if got.requests != 15 || got.rejected != 7 {
		t.Fatalf("replayed %+v", got)
	}
}

// A weekly maintenance window (Sundays 23:00 to 01:00 in New York, across
// midnight) refuses writes, and office hours (weekdays 09:00 to 18:00 in
// Berlin) have a stricter limit; the filter reads each schedule once per
// window, and a window's bounds are exact to the millisecond.
func scheduledRulesApplyInTheirWeeklyWindows(t *testing.T, start Starter) {
	got := replayPolicyTests(t, start, []byte(`{"rules": [
	  {"name": "maintenance", "action": "deny", "deny_status": 503, "match": {"method": "POST"},
	   "schedule": {"days": ["sun"], "from": "23:00", "until": "01:00", "time_zone": "America/New_York"}},
	  {"name": "office", "limit_keys": ["ip:address"], "algorithm": "fixed_window", "algorithm_config": {"limit": 1, "window_seconds": 60},
	   "schedule": {"days": ["mon", "tue", "wed", "thu", "fri"], "from": "09:00", "until": "18:00", "time_zone": "Europe/Berlin"}},
	  {"name": "api", "limit_keys": ["ip:address"], "algorithm": "fixed_window", "algorithm_config": {"limit": 3, "window_seconds": 60}}]}`), []byte(`
tests:
  - name: the maintenance window crosses midnight in New York, ending at 01:00 (06:00 UTC)
    start: 2026-12-07T05:59:59.999Z
    request: {method: POST}
    steps:
      - expect: {status: 503, rule: maintenance}
      - wait: 1ms
        repeat: 3
        expect: {status: 200}
      - expect: {status: 429, rule: api}
  - name: office hours in Berlin, Monday 09:00 to 18:00 (08:00 to 17:00 UTC)
    start: 2026-12-07T07:59:59.999Z
    steps:
      - repeat: 3
        expect: {status: 200}
      - wait: 1ms
        expect: {status: 200}
      - expect: {status: 429, rule: office}
      - wait: 8h59m59.999s
        expect: {status: 200}
      - expect: {status: 429, rule: office}
      - wait: 1ms
        repeat: 3
        expect: {status: 200}
      - expect: {status: 429, rule: api}
`))
	if got.requests != 16 || got.rejected != 5 {
		t.Fatalf("replayed %+v", got)
	}
}
