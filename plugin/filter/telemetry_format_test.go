package filter_test

import (
	"slices"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/plugin/wasmhost"
	telfmt "github.com/sluice-rl/sluice/shared/telemetry"
)

// sharedDecode decodes a report body the plugin sent with the admin's
// strict decoder (shared/telemetry), failing the test on any problem.
func sharedDecode(t testing.TB, body []byte) *telfmt.Report {
	t.Helper()
	r, err := telfmt.Decode(body)
	if err != nil {
		t.Fatalf("the shared decoder refuses the plugin's report: %v\n%s", err, body)
	}
	return r
}

// actionsTelemetryConfig has a rule of each kind whose counters a report
// carries: exempt, deny, overrides, a window and a bounded rule.
const actionsTelemetryConfig = `{"telemetry": {"cluster": "sluice_admin", "token": "t", "interval_ms": 1000, "top_n": 50},
  "policies": [
    {"name": "gate", "rules": [
      {"name": "health", "action": "exempt", "match": {"path": {"in": ["/healthz"]}}},
      {"name": "blocked", "action": "deny", "match": {"header:user-agent": {"regex": "(?i)badbot"}}}]},
    {"name": "ids", "rules": [{"name": "small", "max_keys": 4, "limit_keys": ["header:x-id"], "algorithm": "token_bucket",
      "algorithm_config": {"tokens_per_second": 0.001, "burst": 10}}]},
    {"name": "keys", "rules": [{"name": "per-key", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
      "algorithm_config": {"tokens_per_second": 1, "burst": 2, "block_seconds": 60}, "telemetry_identity": "clear",
      "overrides": [{"key": "gold", "algorithm_config": {"burst": 5}}]}]},
    {"name": "users", "rules": [
      {"name": "teams", "limit_keys": ["header:x-team"], "algorithm": "token_bucket", "algorithm_config": {"tokens_per_second": 1, "burst": 2}},
      {"name": "fw", "limit_keys": ["header:x-user"], "algorithm": "fixed_window",
      "algorithm_config": {"limit": 100, "window_seconds": 60}, "telemetry_identity": "clear"}]}]}`

// TestTelemetryReportDecodesToThePluginsCounters: a report the plugin
// encodes, with every rule counter in use, decodes with the shared decoder
// to the counters the plugin also exports as metrics, and its buckets to
// the rules' states.
func TestTelemetryReportDecodesToThePluginsCounters(t *testing.T) {
	f := startTelemetry(t, actionsTelemetryConfig, 1)
	f.clock.Set(aligned.Add(10 * time.Second))
	for i := range 12 {
		kv := []string{":path", "/api", "x-api-key", "k" + strconv.Itoa(i%2), "x-user", "u1", "x-id", "id-" + strconv.Itoa(i)}
		switch {
		case i%6 == 0:
			kv[1] = "/healthz"
		case i%6 == 1:
			kv = append(kv, "user-agent", "BadBot/1")
		case i%3 == 2:
			kv[3] = "gold"
		}
		f.do(kv...)
	}
	for range 4 { // a request one rule rejects is counted by that rule only
		f.do(":path", "/api", "x-api-key", "k0", "x-user", "u1", "x-id", "id-2")
	}
	calls := f.tick(time.Second)
	if calls[0] == nil {
		t.Fatal("no report")
	}
	r := sharedDecode(t, calls[0].Body)
	if len(r.Rules) != 6 || len(r.Buckets) == 0 {
		t.Fatalf("rules %+v buckets %+v", r.Rules, r.Buckets)
	}
	nonzero := map[string]bool{}
	for _, rc := range r.Rules {
		for name, got := range map[string]uint64{
			"allowed": rc.Allowed, "rejected": rc.Rejected, "shadow_rejected": rc.ShadowRejected, "fail_open": rc.FailOpen,
			"exempted": rc.Exempted, "denied": rc.Denied, "overridden": rc.Overridden, "overflowed": rc.Overflowed,
			"key_missing": rc.KeyMissing, "blocked": rc.Blocked,
		} {
			if want := f.metric("sluice.rule." + rc.Rule + "." + name); got != want {
				t.Errorf("rule %s: %s %d in the report, %d in the metrics", rc.Rule, name, got, want)
			}
			if got > 0 {
				nonzero[name] = true
			}
		}
	}
	for _, name := range []string{"allowed", "rejected", "exempted", "denied", "overridden", "overflowed", "key_missing", "blocked"} {
		if !nonzero[name] {
			t.Errorf("no rule has %s above 0: the traffic does not exercise it\n%s", name, calls[0].Body)
		}
	}
	byRule := map[string]telfmt.Bucket{}
	for _, b := range r.Buckets {
		byRule[b.Rule] = b
	}
	if b := byRule["fw"]; b.Identity != "header:x-user=u1" || b.Algorithm != "fixed_window" || b.Burst != 100 ||
		b.Tokens != float64(100-f.metric("sluice.rule.fw.allowed")) || b.LastRefill != float64(aligned.Unix()) {
		t.Errorf("window bucket %+v", b)
	}
	if b := byRule["per-key"]; b.Algorithm != "" || (b.Burst != 2 && b.Burst != 5) {
		t.Errorf("token bucket %+v", b)
	}
}

// TestTelemetryDecoderFieldsAreTheEncoders: every field the shared decoder
// accepts is one the plugin writes (the reports above, and a fleet-mode
// report for the fleet object), and the plugin writes no other.
func TestTelemetryDecoderFieldsAreTheEncoders(t *testing.T) {
	f := startTelemetry(t, actionsTelemetryConfig, 1)
	f.clock.Set(aligned.Add(10 * time.Second))
	for i := range 12 {
		kv := []string{":path", "/api", "x-api-key", "gold", "x-user", "u1", "x-id", "id-" + strconv.Itoa(i)}
		if i == 0 {
			kv[1] = "/healthz"
		}
		if i == 1 {
			kv = append(kv, "user-agent", "badbot")
		}
		f.do(kv...)
	}
	calls := f.tick(time.Second)
	if calls[0] == nil {
		t.Fatal("no report")
	}
	written := map[string]bool{}
	fleet := fleetTelemetryReport(t)
	sharedDecode(t, fleet)
	charged := responseCostTelemetryReport(t)
	sharedDecode(t, charged)
	for _, body := range [][]byte{calls[0].Body, fleet, charged} {
		paths, err := telfmt.FieldPaths(body)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range paths {
			written[p] = true
		}
	}
	var got []string
	for p := range written {
		got = append(got, p)
	}
	sort.Strings(got)
	want := telfmt.KnownFields()
	sort.Strings(want)
	if !slices.Equal(got, want) {
		t.Fatalf("the plugin writes\n%v\nthe shared decoder accepts\n%v", got, want)
	}
}

// responseCostTelemetryReport is a report of a rule charged from the
// response body that charged default_cost for a value that was not a cost.
func responseCostTelemetryReport(t *testing.T) []byte {
	f := startTelemetry(t, `{"telemetry": {"cluster": "sluice_admin", "token": "t", "interval_ms": 1000},
	  "rules": [{"name": "llm", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
	    "algorithm_config": {"rps": 10, "burst": 1000, "cost_source": "response_json:usage.total_tokens"}}]}`, 1)
	r := rq("x-api-key", "k")
	r.ResponseHeaders = []wasmhost.Header{{":status", "200"}, {"content-type", "application/json"}}
	r.ResponseBody = [][]byte{[]byte(`{"usage": {"total_tokens": "many"}}`)}
	f.doOn(0, r)
	calls := f.tick(time.Second)
	if calls[0] == nil {
		t.Fatal("no report")
	}
	return calls[0].Body
}
