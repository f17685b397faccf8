package telemetry

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestActionCountsMergeLikeTheDecisions: exempted, denied, overridden and
// key_missing are cumulative per VM; the admin sums their deltas over VMs
// and keeps a total per rule, a restart counting from zero.
func TestActionCountsMergeLikeTheDecisions(t *testing.T) {
	s := NewState(Options{})
	start := t0.UnixMilli()
	at := func(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }
	acts := func(rule string, e, d, o, k uint64) RuleCounters {
		return RuleCounters{Rule: rule, Allowed: o, Exempted: e, Denied: d, Overridden: o, KeyMissing: k}
	}
	steps := []struct {
		sec  int
		r    *Report
		want Actions
	}{
		{1, rep("n1", "vm1", start, 1, acts("r", 5, 1, 10, 2)), Actions{5, 1, 10, 2}},
		{1, rep("n1", "vm2", start, 1, acts("r", 2, 0, 3, 0)), Actions{7, 1, 13, 2}},
		{2, rep("n1", "vm1", start, 2, acts("r", 6, 4, 20, 7)), Actions{8, 4, 23, 7}},
		{3, rep("n1", "vm1", start+3000, 1, acts("r", 1, 1, 1, 1)), Actions{9, 5, 24, 8}},  // restarted
		{4, rep("n1", "vm1", start+3000, 2, acts("r", 1, 1, 1, 0)), Actions{10, 6, 25, 8}}, // key_missing alone went back: a restart, all from zero
		{5, rep("n1", "vm1", start+3000, 3, rc("r", 2, 0, 0, 0)), Actions{10, 6, 25, 8}},   // fields absent: 0, a restart adding 0
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
	  "rules":[{"rule":"r","allowed":1,"rejected":0,"shadow_rejected":0,"fail_open":0,"exempted":2,"denied":3,"overridden":4,"key_missing":5}]}`
	r, err := Decode([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if rc := r.Rules[0]; rc.Exempted != 2 || rc.Denied != 3 || rc.Overridden != 4 || rc.KeyMissing != 5 {
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
