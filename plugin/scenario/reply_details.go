package scenario

// The response code details of the filter's local replies: Envoy writes
// them where access logs read %RESPONSE_CODE_DETAILS% (Istio's default log
// line prints it). A limit's refusal passes sluice_rate_limited{<rule>}, a
// deny rule's sluice_denied{<rule>}, so a log line tells a Sluice 429 from
// an upstream's and names the rule. Requests the filter lets through have
// no local reply, and an upstream's own 429 none either.

import (
	"testing"
)

func init() {
	register(Case{Name: "LocalRepliesNameTheirRuleInResponseCodeDetails", Run: localRepliesNameTheirRule})
}

const replyDetailsConfig = `{"policies": [
  {"name": "access", "rules": [
    {"name": "blocked", "action": "deny", "match": {"header:x-api-key": {"in": ["stolen"]}}},
    {"name": "per-key", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
     "algorithm_config": {"rps": 0.001, "burst": 1}}]},
  {"name": "uploads", "rules": [
    {"name": "uploads.per-ip", "match": {"path": {"prefix": "/upload"}}, "limit_keys": ["ip:address"],
     "algorithm": "fixed_window", "algorithm_config": {"limit": 1, "window_seconds": 3600}}]}]}`

func localRepliesNameTheirRule(t *testing.T, start Starter) {
	h := startConfig(t, start, replyDetailsConfig)

	first := do(t, h, req("x-api-key", "k1"))
	if first.Rejected || first.LocalDetails != "" {
		t.Fatalf("an admitted request: rejected %v, details %q; want admitted, no details", first.Rejected, first.LocalDetails)
	}
	wantDetails(t, "the token bucket's refusal", do(t, h, req("x-api-key", "k1")), 429, "sluice_rate_limited{per-key}")
	wantDetails(t, "the deny rule", do(t, h, req("x-api-key", "stolen")), 403, "sluice_denied{blocked}")

	upload := req("x-api-key", "k2", ":path", "/upload")
	if res := do(t, h, upload); res.Rejected {
		t.Fatalf("the first upload was rejected (%s)", res.LocalDetails)
	}
	wantDetails(t, "the fixed window's refusal", do(t, h, upload), 429, "sluice_rate_limited{uploads.per-ip}")

	// The upstream's own 429 goes downstream as it came, with no details.
	upstream := req("x-api-key", "k3")
	upstream.ResponseHeaders = []Header{{":status", "429"}}
	res := do(t, h, upstream)
	if res.Rejected || res.Status != 429 || res.LocalDetails != "" {
		t.Fatalf("an upstream 429: rejected %v, status %d, details %q; want the upstream's 429, no details",
			res.Rejected, res.Status, res.LocalDetails)
	}
}

// wantDetails checks that res is the filter's local reply with status and
// response code details.
func wantDetails(t *testing.T, what string, res Response, status int, details string) {
	t.Helper()
	if !res.Rejected || res.Status != status || res.LocalDetails != details {
		t.Fatalf("%s: rejected %v, status %d, details %q; want %d with %q", what, res.Rejected, res.Status,
			res.LocalDetails, status, details)
	}
}
