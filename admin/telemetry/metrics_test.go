package telemetry

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestPrometheusSeries(t *testing.T) {
	idx := NewVersionIndex(nil, nil)
	idx.Add(7, []byte(`{"v":7}`))
	now := t0.Add(3 * time.Second)
	s := NewState(Options{Versions: idx, Now: func() time.Time { return now }})
	m := NewMetrics(s)
	start := t0.UnixMilli()

	a := rep("edge-a", "vm1", start, 1, rc("free", 10, 2, 0, 1), rc("paid", 5, 0, 3, 0))
	a.ConfigHash = ConfigHash([]byte(`{"v":7}`))
	s.Ingest(a, t0.Add(time.Second))
	b := rep("edge-a", "vm1", start, 2, rc("free", 12, 4, 0, 1), rc("paid", 5, 0, 3, 0))
	b.ConfigHash = a.ConfigHash
	b.ReportsDropped = 3
	s.Ingest(b, t0.Add(2*time.Second))
	c := rep("edge-b", "vm9", start, 1, rc("free", 1, 0, 0, 0))
	c.ConfigHash = "00000000000000ff"
	c.Buckets = []Bucket{{Rule: "free", Identity: "secret-identity", Tokens: 0, Burst: 5, LastRefill: 1, Rejects: 9}}
	s.Ingest(c, t0.Add(2500*time.Millisecond))
	m.Report(ResultAccepted)
	m.Report(ResultAccepted)
	m.Report(ResultInvalid)
	m.Report(ResultUnauthorized)

	expected := `
# HELP sluice_requests_total Requests seen by the plugin, per rule, node and decision (allowed, rejected, shadow_rejected, fail_open), counted by the admin from the reports since it first saw the node.
# TYPE sluice_requests_total counter
sluice_requests_total{decision="allowed",node="edge-a",rule="free"} 12
sluice_requests_total{decision="rejected",node="edge-a",rule="free"} 4
sluice_requests_total{decision="shadow_rejected",node="edge-a",rule="free"} 0
sluice_requests_total{decision="fail_open",node="edge-a",rule="free"} 1
sluice_requests_total{decision="allowed",node="edge-a",rule="paid"} 5
sluice_requests_total{decision="rejected",node="edge-a",rule="paid"} 0
sluice_requests_total{decision="shadow_rejected",node="edge-a",rule="paid"} 3
sluice_requests_total{decision="fail_open",node="edge-a",rule="paid"} 0
sluice_requests_total{decision="allowed",node="edge-b",rule="free"} 1
sluice_requests_total{decision="rejected",node="edge-b",rule="free"} 0
sluice_requests_total{decision="shadow_rejected",node="edge-b",rule="free"} 0
sluice_requests_total{decision="fail_open",node="edge-b",rule="free"} 0
# HELP sluice_telemetry_reports_total Telemetry reports received by the admin, by result: accepted, duplicate (seq already seen), invalid (400), unauthorized (401), too_large (413), unsupported (415 media type), refused (a new node or VM beyond the telemetry bounds).
# TYPE sluice_telemetry_reports_total counter
sluice_telemetry_reports_total{result="accepted"} 2
sluice_telemetry_reports_total{result="duplicate"} 0
sluice_telemetry_reports_total{result="invalid"} 1
sluice_telemetry_reports_total{result="refused"} 0
sluice_telemetry_reports_total{result="too_large"} 0
sluice_telemetry_reports_total{result="unauthorized"} 1
sluice_telemetry_reports_total{result="unsupported"} 0
# HELP sluice_node_last_report_timestamp_seconds When the admin last received a report from the node (unix seconds).
# TYPE sluice_node_last_report_timestamp_seconds gauge
sluice_node_last_report_timestamp_seconds{node="edge-a"} 1.763770002e+09
sluice_node_last_report_timestamp_seconds{node="edge-b"} 1.7637700025e+09
# HELP sluice_telemetry_reports_dropped_total Reports the node's plugin failed to deliver (non-2xx, timeout, dispatch error), as the plugin counts them.
# TYPE sluice_telemetry_reports_dropped_total counter
sluice_telemetry_reports_dropped_total{node="edge-a"} 3
sluice_telemetry_reports_dropped_total{node="edge-b"} 0
# HELP sluice_node_vms Worker VMs of the node that reported within three intervals.
# TYPE sluice_node_vms gauge
sluice_node_vms{node="edge-a"} 1
sluice_node_vms{node="edge-b"} 1
# HELP sluice_node_config_info The configuration the node runs: its hash, and the policy version with that hash ("" if none).
# TYPE sluice_node_config_info gauge
sluice_node_config_info{config_hash="00000000000000ff",node="edge-b",version=""} 1
sluice_node_config_info{config_hash="` + a.ConfigHash + `",node="edge-a",version="7"} 1
# HELP sluice_telemetry_buckets Bucket states the admin holds (bounded).
# TYPE sluice_telemetry_buckets gauge
sluice_telemetry_buckets 1
`
	names := []string{"sluice_requests_total", "sluice_telemetry_reports_total", "sluice_node_last_report_timestamp_seconds",
		"sluice_telemetry_reports_dropped_total", "sluice_node_vms", "sluice_node_config_info", "sluice_telemetry_buckets"}
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(expected), names...); err != nil {
		t.Error(err)
	}

	// Over HTTP: no per-identity series, ever; the runtime metrics are there.
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	if strings.Contains(string(body), "secret-identity") {
		t.Error("an identity leaked into the metrics")
	}
	for _, want := range []string{"go_goroutines", "process_", "sluice_telemetry_ingest_seconds_bucket", "sluice_telemetry_nodes 2"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if n, err := testutil.GatherAndCount(m.Registry(), "sluice_requests_total"); err != nil || n != 12 {
		t.Errorf("%d request series, %v", n, err)
	}

	// A forgotten node's series disappear.
	s.Sweep(t0.Add(time.Hour))
	if n, _ := testutil.GatherAndCount(m.Registry(), "sluice_requests_total"); n != 0 {
		t.Errorf("%d series after the nodes expired", n)
	}
}

// TestPrometheusOverflowSeries: per rule and node, the requests decided by
// an overflow limit (a counter) and the identities sharing one (a gauge,
// the largest of the node's running VMs; 0 where none overflows).
func TestPrometheusOverflowSeries(t *testing.T) {
	now := t0.Add(3 * time.Second)
	s := NewState(Options{Now: func() time.Time { return now }})
	m := NewMetrics(s)
	start := t0.UnixMilli()
	s.Ingest(rep("edge-a", "vm1", start, 1, orc("free", 10, 4, 30), rc("paid", 5, 0, 0, 0)), t0.Add(time.Second))
	s.Ingest(rep("edge-a", "vm2", start, 1, orc("free", 7, 3, 120)), t0.Add(time.Second))
	s.Ingest(rep("edge-a", "vm1", start, 2, orc("free", 12, 6, 25), rc("paid", 5, 0, 0, 0)), t0.Add(2*time.Second))
	s.Ingest(rep("edge-b", "vm9", start, 1, orc("free", 1, 0, 0)), t0.Add(2*time.Second))

	expected := `
# HELP sluice_rule_overflowed_total Requests of the rule decided by a group's overflow limit (their identity found no place in the plugin's bounded table; each is also counted in sluice_requests_total), per rule and node, counted by the admin from the reports since it first saw the node.
# TYPE sluice_rule_overflowed_total counter
sluice_rule_overflowed_total{node="edge-a",rule="free"} 9
sluice_rule_overflowed_total{node="edge-a",rule="paid"} 0
sluice_rule_overflowed_total{node="edge-b",rule="free"} 0
# HELP sluice_rule_overflow_identities Estimated distinct identities sharing one overflow limit of the rule: the most any running VM of the node saw in its last report (0: none). Above 0, the rule's max_keys is too small for its active identities.
# TYPE sluice_rule_overflow_identities gauge
sluice_rule_overflow_identities{node="edge-a",rule="free"} 120
sluice_rule_overflow_identities{node="edge-a",rule="paid"} 0
sluice_rule_overflow_identities{node="edge-b",rule="free"} 0
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(expected), "sluice_rule_overflowed_total", "sluice_rule_overflow_identities"); err != nil {
		t.Error(err)
	}

	// vm2 silent for three intervals (5 s at least): only vm1's estimate is left.
	now = t0.Add(7 * time.Second)
	if got := overflowGauge(t, m, "edge-a", "free"); got != 25 {
		t.Errorf("after vm2 went silent: %v, want 25", got)
	}
}

// overflowGauge returns the value of sluice_rule_overflow_identities for
// (node, rule).
func overflowGauge(t *testing.T, m *Metrics, node, rule string) float64 {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sluice_rule_overflow_identities" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range mt.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["node"] == node && labels["rule"] == rule {
				return mt.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("no series for %s %s", node, rule)
	return 0
}

// TestResponseCostSeries: per rule and node, the charges of a rule charged
// from the response by outcome, from the VMs' cumulative counters (a
// restarted VM counts from zero again); rules that charged nothing have
// no series. The overview sums them per rule.
func TestResponseCostSeries(t *testing.T) {
	now := t0.Add(3 * time.Second)
	s := NewState(Options{Now: func() time.Time { return now }})
	m := NewMetrics(s)
	start := t0.UnixMilli()
	charged := func(allowed, c, d, inv uint64) RuleCounters {
		r := rc("llm", allowed, 0, 0, 0)
		r.ResponseCharged, r.ResponseDefault, r.ResponseInvalid = c, d, inv
		return r
	}
	s.Ingest(rep("edge-a", "vm1", start, 1, charged(10, 10, 2, 1), rc("paid", 5, 0, 0, 0)), t0.Add(time.Second))
	s.Ingest(rep("edge-a", "vm1", start, 2, charged(30, 28, 5, 1), rc("paid", 6, 0, 0, 0)), t0.Add(2*time.Second))
	s.Ingest(rep("edge-a", "vm2", start, 1, charged(4, 4, 4, 0)), t0.Add(2*time.Second))
	// vm1 restarted: its counters start from zero again.
	s.Ingest(rep("edge-a", "vm1", start+5000, 1, charged(3, 3, 1, 1)), t0.Add(2*time.Second))

	expected := `
# HELP sluice_response_costs_total Charges of rules whose cost comes from the response, per rule, node and outcome: charged (every charge), default (charged default_cost: the response reported no cost, or the stream ended first), invalid (the reported value was not a cost; also counted in default). Counted by the admin from the reports since it first saw the node; only for rules that charged something.
# TYPE sluice_response_costs_total counter
sluice_response_costs_total{node="edge-a",outcome="charged",rule="llm"} 35
sluice_response_costs_total{node="edge-a",outcome="default",rule="llm"} 10
sluice_response_costs_total{node="edge-a",outcome="invalid",rule="llm"} 2
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(expected), "sluice_response_costs_total"); err != nil {
		t.Error(err)
	}
	ov := s.Overview(now, OverviewOptions{})
	if got := ruleView(t, ov, "llm").ResponseCosts; got != (ResponseCosts{Charged: 35, Default: 10, Invalid: 2}) {
		t.Errorf("overview: %+v", got)
	}
	if got := ruleView(t, ov, "paid").ResponseCosts; got != (ResponseCosts{}) {
		t.Errorf("a rule charged per request: %+v", got)
	}
}
