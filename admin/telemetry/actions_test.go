package telemetry

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestActionCountsMergeLikeTheDecisions: exempted, denied, overridden,
// key_missing and blocked are cumulative per VM; the admin sums their deltas over VMs
// and keeps a total per rule, a restart counting from zero.
func TestActionCountsMergeLikeTheDecisions(t *testing.T) {
	s := NewState(Options{})
	start := t0.UnixMilli()
	at := func(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }
	acts := func(rule string, e, d, o, k, b uint64) RuleCounters {
		return RuleCounters{Rule: rule, Allowed: o, Exempted: e, Denied: d, Overridden: o, KeyMissing: k, Blocked: b}
	}
	steps := []struct {
		sec  int
		r    *Report
		want Actions
	}{
		{1, rep("n1", "vm1", start, 1, acts("r", 5, 1, 10, 2, 1)), Actions{5, 1, 10, 2, 1}},
		{1, rep("n1", "vm2", start, 1, acts("r", 2, 0, 3, 0, 0)), Actions{7, 1, 13, 2, 1}},
		{2, rep("n1", "vm1", start, 2, acts("r", 6, 4, 20, 7, 3)), Actions{8, 4, 23, 7, 3}},
		{3, rep("n1", "vm1", start+3000, 1, acts("r", 1, 1, 1, 1, 1)), Actions{9, 5, 24, 8, 4}},  // restarted
		{4, rep("n1", "vm1", start+3000, 2, acts("r", 1, 1, 1, 0, 2)), Actions{10, 6, 25, 8, 6}}, // key_missing alone went back: a restart, all from zero
		{5, rep("n1", "vm1", start+3000, 3, rc("r", 2, 0, 0, 0)), Actions{10, 6, 25, 8, 6}},      // fields absent: 0, a restart adding 0
	}
	for i, st := range steps {
		if res := s.Ingest(st.r, at(st.sec)); res != Accepted {
			t.Fatalf("step %d: %v", i, res)
		}
		if got := ruleView(t, s.Overview(at(st.sec), OverviewOptions{Window: time.Minute}), "r").Actions; got != st.want {
			t.Errorf("step %d: %+v, want %+v", i, got, st.want)
		}
	}
}

func TestDecodeActionCounts(t *testing.T) {
	in := `{"v":1,"node":"n","vm":"a","vm_start_ms":1763770000000,"seq":1,"sent_at_ms":1763770001000,"interval_ms":1000,"reports_dropped":0,"buckets":[],
	  "rules":[{"rule":"r","allowed":1,"rejected":0,"shadow_rejected":0,"fail_open":0,"exempted":2,"denied":3,"overridden":4,"key_missing":5,"blocked":6}]}`
	r, err := Decode([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if rc := r.Rules[0]; rc.Exempted != 2 || rc.Denied != 3 || rc.Overridden != 4 || rc.KeyMissing != 5 || rc.Blocked != 6 {
		t.Errorf("decoded %+v", rc)
	}
	_, err = Decode([]byte(strings.Replace(in, `"denied":3`, `"denied":-3`, 1)))
	if err == nil || !strings.Contains(err.Error(), "rules[0].denied") {
		t.Errorf("a negative count: %v", err)
	}
	b, _ := json.Marshal(r.Rules[0])
	if !strings.Contains(string(b), `"exempted":2,"denied":3,"overridden":4`) || !strings.Contains(string(b), `"key_missing":5`) {
		t.Errorf("encoded %s", b)
	}
}

// TestPrometheusActionSeries: per rule and node, the requests skipped for
// a missing key, decided by an override, exempted and denied, and the
// identities blocked, as counters
// summed over the node's VMs (a restart counting from zero); a rule that
// counted none of one has no series of it.
func TestPrometheusActionSeries(t *testing.T) {
	now := t0.Add(3 * time.Second)
	s := NewState(Options{Now: func() time.Time { return now }})
	m := NewMetrics(s)
	start := t0.UnixMilli()
	acts := func(rule string, e, d, o, k uint64) RuleCounters {
		return RuleCounters{Rule: rule, Allowed: o, Exempted: e, Denied: d, Overridden: o, KeyMissing: k}
	}
	s.Ingest(rep("edge-a", "vm1", start, 1, acts("plans", 0, 0, 10, 4), acts("health", 7, 0, 0, 0)), t0.Add(time.Second))
	s.Ingest(rep("edge-a", "vm2", start, 1, acts("plans", 0, 0, 3, 1)), t0.Add(time.Second))
	s.Ingest(rep("edge-a", "vm1", start, 2, acts("plans", 0, 0, 12, 6), acts("health", 9, 0, 0, 0)), t0.Add(2*time.Second))
	s.Ingest(rep("edge-a", "vm1", start+2000, 1, acts("plans", 0, 0, 1, 0), acts("health", 0, 0, 0, 0)), t0.Add(3*time.Second)) // restarted
	s.Ingest(rep("edge-b", "vm9", start, 1, acts("bots", 0, 5, 0, 0)), t0.Add(2*time.Second))
	s.Ingest(rep("edge-b", "vm8", start, 1, RuleCounters{Rule: "login", Rejected: 9, Blocked: 3}), t0.Add(2*time.Second))

	expected := `
# HELP sluice_rule_key_missing_total Requests the rule matched but skipped because one of its limit keys had no value (a header absent, metadata no filter wrote): a rule that never applies, or a client without its key. Per rule and node, counted by the admin from the reports since it first saw the node; only for rules that skipped something.
# TYPE sluice_rule_key_missing_total counter
sluice_rule_key_missing_total{node="edge-a",rule="plans"} 7
# HELP sluice_rule_overridden_total Requests the rule decided with an override's limits (also counted in sluice_requests_total), per rule and node, since the admin first saw the node; only for rules that did.
# TYPE sluice_rule_overridden_total counter
sluice_rule_overridden_total{node="edge-a",rule="plans"} 16
# HELP sluice_rule_exempted_total Requests an exempt rule let through, limited by no rule, per rule and node, since the admin first saw the node; only for rules that did.
# TYPE sluice_rule_exempted_total counter
sluice_rule_exempted_total{node="edge-a",rule="health"} 9
# HELP sluice_rule_denied_total Requests a deny rule rejected, per rule and node, since the admin first saw the node; only for rules that did.
# TYPE sluice_rule_denied_total counter
sluice_rule_denied_total{node="edge-b",rule="bots"} 5
# HELP sluice_rule_blocked_total Identities the rule's refusals blocked (block_seconds), per rule and node, since the admin first saw the node; only for rules that did.
# TYPE sluice_rule_blocked_total counter
sluice_rule_blocked_total{node="edge-b",rule="login"} 3
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(expected),
		"sluice_rule_key_missing_total", "sluice_rule_overridden_total", "sluice_rule_exempted_total", "sluice_rule_denied_total", "sluice_rule_blocked_total"); err != nil {
		t.Error(err)
	}
}
