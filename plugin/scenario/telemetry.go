package scenario

// Telemetry: with a telemetry block every VM reports once per interval_ms
// (on_tick) with a dispatch_http_call to the configured cluster: POST to the
// ingestion path, the bearer token (a literal token, or token_env read from
// the VM environment), a JSON body whose cumulative per-rule counters add up
// to the traffic sent and to the metrics, bucket identities masked unless
// the rule says clear. A 2xx answer is a delivered report; a failed call is
// counted as dropped (metric and the next report's reports_dropped). The
// token is never logged.

import (
	"fmt"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	telfmt "github.com/sluice-rl/sluice/shared/telemetry"
)

func init() {
	register(
		Case{Name: "TelemetryReportsMatchTraffic", Run: telemetryReportsMatchTraffic},
		Case{Name: "TelemetryTokenFromVMEnvironment", Run: telemetryTokenFromEnv},
		Case{Name: "TelemetryAfterAnUpdateReportsOnlyItsRules", Run: telemetryAfterAnUpdate},
		Case{Name: "TelemetryReportCancelledByAnUpdateCountsAsDropped", Run: telemetryReportCancelled},
		Case{Name: "TelemetryShowsConcurrencyPlacesGivenBack", Run: telemetryConcurrencyPlaces},
	)
}

// decodeReport checks a report call's request line and headers and decodes
// its body with the admin's strict decoder (shared/telemetry: an unknown or
// missing field fails).
func decodeReport(t testing.TB, c Call, cluster, path, token string) *telfmt.Report {
	t.Helper()
	if c.Cluster != cluster {
		t.Errorf("report to cluster %q, want %q", c.Cluster, cluster)
	}
	wantHeaders(t, fmt.Sprintf("report of VM %d", c.VM), c.Headers, ":method", "POST", ":path", path,
		":authority", "sluice-admin", "authorization", "Bearer "+token, "content-type", "application/json")
	r, err := telfmt.Decode(c.Body)
	if err != nil {
		t.Fatalf("the admin's decoder refuses the report body %s: %v", c.Body, err)
	}
	return r
}

// reportsByVM ticks after d and returns the pending calls by VM, failing if
// a VM has more than one in flight.
func reportsByVM(t testing.TB, h Host, d time.Duration) map[int]Call {
	t.Helper()
	step(t, h, d)
	byVM := map[int]Call{}
	for _, c := range pending(t, h) {
		if _, dup := byVM[c.VM]; dup {
			t.Fatalf("VM %d has two reports in flight", c.VM)
		}
		byVM[c.VM] = c
	}
	return byVM
}

// respond answers a call with a status and no body.
func respond(t testing.TB, h Host, c Call, status string) {
	t.Helper()
	if err := h.Respond(c.ID, []Header{{":status", status}}, nil); err != nil {
		t.Fatalf("answering call %d: %v", c.ID, err)
	}
}

// failCall delivers a call's failure.
func failCall(t testing.TB, h Host, c Call) {
	t.Helper()
	if err := h.FailCall(c.ID); err != nil {
		t.Fatalf("failing call %d: %v", c.ID, err)
	}
}

// sumCounts adds the per-rule counters of reports (overflow_identities:
// the largest).
func sumCounts(rs []*telfmt.Report) map[string]telfmt.RuleCounters {
	sum := map[string]telfmt.RuleCounters{}
	for _, r := range rs {
		for _, x := range r.Rules {
			s := sum[x.Rule]
			s.Rule = x.Rule
			s.Allowed += x.Allowed
			s.Rejected += x.Rejected
			s.ShadowRejected += x.ShadowRejected
			s.FailOpen += x.FailOpen
			s.Overflowed += x.Overflowed
			s.OverflowIdentities = max(s.OverflowIdentities, x.OverflowIdentities)
			s.Exempted += x.Exempted
			s.Denied += x.Denied
			s.Overridden += x.Overridden
			s.ResponseCharged += x.ResponseCharged
			s.ResponseDefault += x.ResponseDefault
			s.ResponseInvalid += x.ResponseInvalid
			s.KeyMissing += x.KeyMissing
			s.Blocked += x.Blocked
			sum[x.Rule] = s
		}
	}
	return sum
}

// wantCounts checks summed report counters against the expected traffic
// and against the plugin's metrics.
func wantCounts(t testing.TB, h Host, got map[string]telfmt.RuleCounters, want ...telfmt.RuleCounters) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("reports name rules %v, want %d rules", got, len(want))
	}
	for _, w := range want {
		if got[w.Rule] != w {
			t.Errorf("rule %s: reports sum to %+v, want %+v", w.Rule, got[w.Rule], w)
		}
		p := "sluice.rule." + w.Rule + "."
		m := telfmt.RuleCounters{Rule: w.Rule, Allowed: metric(h, p+"allowed"), Rejected: metric(h, p+"rejected"),
			ShadowRejected: metric(h, p+"shadow_rejected"), FailOpen: metric(h, p+"fail_open"), Overflowed: metric(h, p+"overflowed")}
		if m != w {
			t.Errorf("rule %s: metrics say %+v, want %+v", w.Rule, m, w)
		}
	}
}

const telemetryConfig = `{
  "telemetry": {"cluster": "sluice_admin", "token": "tel-s3cret", "interval_ms": 1000, "top_n": 10},
  "policies": [
    {"name": "keys", "rules": [{"name": "apikey", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
      "algorithm_config": {"tokens_per_second": 1, "burst": 3}}]},
    {"name": "users", "rules": [{"name": "user", "limit_keys": ["header:x-user", "ip:address"], "algorithm": "token_bucket",
      "algorithm_config": {"tokens_per_second": 1, "burst": 100}, "telemetry_identity": "clear"}]},
    {"name": "ips", "rules": [{"name": "perip", "limit_keys": ["ip:address"], "mode": "shadow", "algorithm": "token_bucket",
      "algorithm_config": {"tokens_per_second": 1, "burst": 4}}]}
  ]
}`

// telemetryReportsMatchTraffic: two VMs; key A sends 6 (3 pass, 3 are
// rejected by apikey and take nothing elsewhere), key B 3 (they pass; the
// shadow per-IP rule, burst 4, would have rejected the last 2).
func telemetryReportsMatchTraffic(t *testing.T, start Starter) {
	h := mustStart(t, start, Options{VMs: 2, NodeID: "envoy-7", Clusters: []string{"sluice_admin"},
		Config: []byte(telemetryConfig)})
	const keyA = "sk_live_abcdef123456"
	rejected := 0
	for i := 0; i < 9; i++ {
		key := keyA
		if i >= 6 {
			key = "sk_live_bbbbbb654321"
		}
		if doOn(t, h, i%2, req("x-api-key", key, "x-user", "alice")).Rejected {
			rejected++
		}
	}
	if rejected != 3 {
		t.Fatalf("%d of 9 rejected, want 3", rejected)
	}
	if calls := reportsByVM(t, h, 999*time.Millisecond); len(calls) != 0 {
		t.Fatalf("a report before the interval: %v", calls)
	}
	calls := reportsByVM(t, h, time.Millisecond)
	if len(calls) != 2 {
		t.Fatalf("%d reports at the interval, want one per VM", len(calls))
	}
	var reports []*telfmt.Report
	vmIDs := map[string]bool{}
	for vm, c := range calls {
		r := decodeReport(t, c, "sluice_admin", "/api/v1/telemetry", "tel-s3cret")
		if r.V != 1 || r.Node != "envoy-7" || r.Seq != 1 || r.IntervalMS != 1000 || r.ReportsDropped != 0 ||
			r.VMStartMS != DefaultStart.UnixMilli() || r.SentAtMS != DefaultStart.Add(time.Second).UnixMilli() ||
			r.ConfigHash != fnv64Hex(telemetryConfig) || r.VM == "" || vmIDs[r.VM] || r.Fleet != nil {
			t.Errorf("VM %d: report %+v", vm, r)
		}
		vmIDs[r.VM] = true
		for _, b := range r.Buckets {
			switch b.Rule {
			case "apikey":
				if !strings.HasPrefix(b.Identity, "header:x-api-key=sk_l…#") || strings.Contains(b.Identity, "abcdef") || b.Burst != 3 {
					t.Errorf("VM %d: apikey bucket %+v: not masked", vm, b)
				}
			case "user":
				if b.Identity != "header:x-user=alice|ip:address=10.0.0.1" || b.Burst != 100 {
					t.Errorf("VM %d: user bucket %+v", vm, b)
				}
			case "perip":
				if b.Identity != "ip:address=10.0.0.1" || b.Burst != 4 {
					t.Errorf("VM %d: perip bucket %+v", vm, b)
				}
			}
		}
		reports = append(reports, r)
	}
	wantCounts(t, h, sumCounts(reports),
		telfmt.RuleCounters{Rule: "apikey", Allowed: 6, Rejected: 3},
		telfmt.RuleCounters{Rule: "user", Allowed: 6},
		telfmt.RuleCounters{Rule: "perip", Allowed: 4, ShadowRejected: 2})
	rejects := uint64(0)
	masked := "header:x-api-key=sk_l…#" + fnv64Hex(keyA)[8:]
	for _, r := range reports {
		for _, b := range r.Buckets {
			if b.Rule == "apikey" && b.Identity == masked {
				rejects += b.Rejects
			}
		}
	}
	if rejects != 3 {
		t.Errorf("key A's buckets report %d rejects, want 3", rejects)
	}

	// VM 0's report is delivered, VM 1's call fails: counted as dropped.
	respond(t, h, calls[0], "200")
	failCall(t, h, calls[1])
	wantMetrics(t, h, map[string]uint64{"sluice.telemetry.dropped": 1, "sluice.telemetry.sent": 2})
	if res := doOn(t, h, 1, req("x-api-key", "k-new-0000001", "x-user", "bob")); res.Rejected {
		t.Fatal("traffic affected by the failed report")
	}
	calls = reportsByVM(t, h, time.Second)
	if len(calls) != 2 {
		t.Fatalf("%d reports in the second interval, want 2", len(calls))
	}
	reports = reports[:0]
	for vm, c := range calls {
		r := decodeReport(t, c, "sluice_admin", "/api/v1/telemetry", "tel-s3cret")
		if want := uint64(vm); r.Seq != 2 || r.ReportsDropped != want {
			t.Errorf("VM %d: seq %d reports_dropped %d, want 2 and %d", vm, r.Seq, r.ReportsDropped, want)
		}
		if n := len(r.Buckets); (vm == 1) != (n > 0) {
			t.Errorf("VM %d: %d buckets; only buckets touched since the last report are sent", vm, n)
		}
		reports = append(reports, r)
		respond(t, h, c, "204")
	}
	// Cumulative: the failed report lost no counts.
	wantCounts(t, h, sumCounts(reports),
		telfmt.RuleCounters{Rule: "apikey", Allowed: 7, Rejected: 3},
		telfmt.RuleCounters{Rule: "user", Allowed: 7},
		telfmt.RuleCounters{Rule: "perip", Allowed: 5, ShadowRejected: 2}) // a second refilled one token
	wantMetrics(t, h, map[string]uint64{"sluice.telemetry.dropped": 1, "sluice.telemetry.sent": 4})
	if n := logsContaining(h, "tel-s3cret"); n != 0 {
		t.Errorf("the token appears in %d log lines", n)
	}
	noRecoveredPanics(t, h)
}

// telemetryTokenFromEnv: token_env names a VM environment variable; its
// value is the bearer token (and a custom path is used). Without the
// variable the configuration is refused.
func telemetryTokenFromEnv(t *testing.T, start Starter) {
	cfg := []byte(`{"telemetry": {"cluster": "admin", "token_env": "SLUICE_TEL_TOKEN", "path": "/ingest/v9", "interval_ms": 500, "timeout_ms": 200},
	  "rules": [{"name": "r", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
	   "algorithm_config": {"tokens_per_second": 1, "burst": 2}}]}`)
	h := mustStart(t, start, Options{Config: cfg, Env: map[string]string{"SLUICE_TEL_TOKEN": "tel-from-env_0123"}})
	if h, err := start(t, Options{Config: cfg, Env: map[string]string{"OTHER": "x"}}); err == nil {
		_ = h.Close()
		t.Fatal("started with token_env naming a variable that is not set")
	}
	if got := admitted(t, h, 3, req("x-api-key", "k")); got != 2 {
		t.Fatalf("%d of 3 admitted", got)
	}
	calls := reportsByVM(t, h, 500*time.Millisecond)
	if len(calls) != 1 {
		t.Fatalf("%d reports, want 1", len(calls))
	}
	r := decodeReport(t, calls[0], "admin", "/ingest/v9", "tel-from-env_0123")
	wantCounts(t, h, sumCounts([]*telfmt.Report{r}), telfmt.RuleCounters{Rule: "r", Allowed: 2, Rejected: 1})
	respond(t, h, calls[0], "200")
	if n := metric(h, "sluice.telemetry.dropped"); n != 0 {
		t.Errorf("sluice.telemetry.dropped = %d after a 200", n)
	}
	if n := logsContaining(h, "tel-from-env_0123"); n != 0 {
		t.Errorf("the token appears in %d log lines", n)
	}
}

// telemetryAfterAnUpdate: a request waiting for a fleet lease when an
// update removes its rule is decided, on the answer, under the old rule;
// the next report lists the new configuration's rules only, and so leaves
// that bucket out, or the admin would refuse the whole report.
func telemetryAfterAnUpdate(t *testing.T, start Starter) {
	const tel = `{"telemetry": {"cluster": "sluice_admin", "token": "t0k", "interval_ms": 1000}, `
	old := strings.Replace(fleetConfig("deny"), "{", tel, 1)
	h := mustStart(t, start, Options{NodeID: "node-a", Config: []byte(old)})
	waiting := do(t, h, req("x-tenant", "acme"))
	if !waiting.Paused {
		t.Fatal("the request did not wait for a lease")
	}
	ask := onlyCall(t, h, "the ask")
	if err := h.Reconfigure([]byte(tel + `"rules": [{"name": "new", "limit_keys": ["header:x-api-key"],
	  "algorithm": "token_bucket", "algorithm_config": {"tokens_per_second": 10, "burst": 10}}]}`)); err != nil {
		t.Fatal(err)
	}
	answerRLS(t, h, ask, "1", &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: 50})
	if settled(t, "the waiting request", waiting).Rejected { // decided by rule g, which the update removed
		t.Fatal("the waiting request was rejected with its lease granted")
	}
	calls := reportsByVM(t, h, time.Second)
	if len(calls) != 1 {
		t.Fatalf("%d reports, want 1", len(calls))
	}
	r := decodeReport(t, calls[0], "sluice_admin", "/api/v1/telemetry", "t0k")
	if len(r.Rules) != 1 || r.Rules[0].Rule != "new" {
		t.Errorf("rules %+v, want the new configuration's only", r.Rules)
	}
	for _, b := range r.Buckets {
		if b.Rule != "new" {
			t.Errorf("a bucket of rule %q, which the new configuration does not have", b.Rule)
		}
	}
}

// telemetryReportCancelled: an update replaces a root context (with no
// stream, so at once) while its report is in flight; the host cancels the
// call. The report counts as dropped and the next interval reports again.
func telemetryReportCancelled(t *testing.T, start Starter) {
	h := mustStart(t, start, Options{Clusters: []string{"sluice_admin"}, Config: []byte(telemetryConfig)})
	if calls := reportsByVM(t, h, time.Second); len(calls) != 1 {
		t.Fatalf("%d reports after the first interval, want 1", len(calls))
	}
	if err := h.Reconfigure([]byte(telemetryConfig + " ")); err != nil {
		t.Fatal(err)
	}
	if n := len(pending(t, h)); n != 0 {
		t.Fatalf("%d calls pending once the replaced root context ended; its report is cancelled", n)
	}
	calls := reportsByVM(t, h, time.Second)
	if len(calls) != 1 {
		t.Fatalf("%d reports in the interval after the update, want 1", len(calls))
	}
	if r := decodeReport(t, calls[0], "sluice_admin", "/api/v1/telemetry", "tel-s3cret"); r.ReportsDropped != 1 {
		t.Errorf("reports_dropped %d, want the cancelled report", r.ReportsDropped)
	}
}

// telemetryConcurrencyPlaces: a concurrency rule's bucket in a report is
// its free places; a request that ends gives its place back in the next
// report too, though no request of the identity came since.
func telemetryConcurrencyPlaces(t *testing.T, start Starter) {
	h := mustStart(t, start, Options{VMs: 1, NodeID: "envoy-7", Clusters: []string{"sluice_admin"},
		Config: []byte(`{"telemetry": {"cluster": "sluice_admin", "token": "tel-s3cret", "interval_ms": 1000},
		  "rules": [{"name": "inflight", "limit_keys": ["header:x-api-key"], "algorithm": "concurrency",
		    "algorithm_config": {"limit": 3}, "telemetry_identity": "clear"}]}`)})
	held := []Stream{inFlight(t, h, 0, "k1"), inFlight(t, h, 0, "k1")}
	free := func(when string) float64 {
		t.Helper()
		c, ok := reportsByVM(t, h, time.Second)[0]
		if !ok {
			t.Fatalf("%s: no report", when)
		}
		r := decodeReport(t, c, "sluice_admin", "/api/v1/telemetry", "tel-s3cret")
		respond(t, h, c, "204")
		if len(r.Buckets) != 1 || r.Buckets[0].Rule != "inflight" || r.Buckets[0].Identity != "header:x-api-key=k1" || r.Buckets[0].Burst != 3 {
			t.Fatalf("%s: buckets %+v, want k1's places", when, r.Buckets)
		}
		return r.Buckets[0].Tokens
	}
	if got := free("two in flight"); got != 1 {
		t.Errorf("two in flight: %v places free, want 1", got)
	}
	for i, want := range []float64{2, 3} {
		if _, err := held[i].Complete(); err != nil {
			t.Fatal(err)
		}
		if got := free(fmt.Sprintf("after %d ended", i+1)); got != want {
			t.Errorf("after %d ended: %v places free, want %v", i+1, got, want)
		}
	}
}
