package scenario

// Rules for a time ("from", "until"): a maintenance window that refuses
// writes and a stricter limit for a sale apply only in their time, read
// from the host's clock on each request; outside it the policy's next
// rule applies, with no push.

import "testing"

func init() {
	register(Case{Name: "TimedRulesApplyOnlyInTheirTime", Run: timedRulesApplyOnlyInTheirTime})
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
