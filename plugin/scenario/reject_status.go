package scenario

// A limit rule's own rejection status (reject_status on the rule): its
// rejections carry it, the other limit rules keep the configuration's, a
// deny rule keeps its deny_status, and a gRPC call is refused with the
// gRPC status whatever the HTTP status.

import "testing"

func init() {
	register(Case{Name: "LimitRulesRejectWithTheirOwnStatus", Run: limitRulesRejectWithTheirOwnStatus})
}

const rejectStatusConfig = `{"reject_status": 503, "policies": [
  {"name": "p", "rules": [
    {"name": "banned", "action": "deny", "match": {"header:x-api-key": "banned"}},
    {"name": "search", "match": {"path": {"prefix": "/search"}}, "limit_keys": ["header:x-api-key"], "algorithm": "fixed_window",
     "algorithm_config": {"limit": 1, "window_seconds": 60}, "reject_status": 420},
    {"name": "api", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket", "algorithm_config": {"rps": 0.001, "burst": 1}}]}]}`

func limitRulesRejectWithTheirOwnStatus(t *testing.T, start Starter) {
	h := startConfig(t, start, rejectStatusConfig)
	status := func(what string, r Request, rejected bool, want int) {
		t.Helper()
		res := do(t, h, r)
		if res.Rejected != rejected || res.Status != want {
			t.Errorf("%s: rejected %v status %d, want %v %d", what, res.Rejected, res.Status, rejected, want)
		}
	}
	status("the rule's first request", req("x-api-key", "k1", ":path", "/search?q=a"), false, 200)
	status("the rule's own status", req("x-api-key", "k1", ":path", "/search?q=b"), true, 420)
	status("another rule's first request", req("x-api-key", "k2", ":path", "/v1"), false, 200)
	status("the configuration's status", req("x-api-key", "k2", ":path", "/v1"), true, 503)
	status("a deny rule", req("x-api-key", "banned"), true, 403)

	grpc := req("x-api-key", "k1", ":path", "/search.Svc/Find", "content-type", "application/grpc")
	res := do(t, h, grpc)
	if !res.Rejected || header(res.ResponseHeaders, "grpc-status") != "8" {
		t.Errorf("a gRPC call over the rule's limit: rejected %v, grpc-status %q, want 8 (resource_exhausted)", res.Rejected, header(res.ResponseHeaders, "grpc-status"))
	}
	noRecoveredPanics(t, h)
}
