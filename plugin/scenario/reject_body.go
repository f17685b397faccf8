package scenario

// Custom rejection replies (reject_body, reject_content_type): a rejection
// carries the configured body, with its content type (JSON for a JSON body,
// text otherwise, or the one given; none for an empty body), instead of the
// filter's JSON. A rule's own body wins over the configuration's; a deny
// rule keeps its JSON unless it has a body of its own. The RateLimit fields
// and Retry-After are sent as always.

import "testing"

func init() {
	register(Case{Name: "CustomRejectBodiesAndContentTypes", Run: customRejectBodies})
}

const rejectBodyConfig = `{"reject_body": "{\"message\":\"API rate limit exceeded\"}", "policies": [
  {"name": "p", "rules": [
    {"name": "banned", "action": "deny", "match": {"header:x-api-key": "banned"}},
    {"name": "gone", "action": "deny", "deny_status": 410, "match": {"header:x-api-key": "gone"}, "reject_body": ""},
    {"name": "pages", "match": {"path": {"prefix": "/pages/"}}, "limit_keys": ["header:x-api-key"], "algorithm": "fixed_window",
     "algorithm_config": {"limit": 1, "window_seconds": 60}, "reject_body": "<h1>Slow down</h1>", "reject_content_type": "text/html; charset=utf-8"},
    {"name": "api", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket", "algorithm_config": {"rps": 0.001, "burst": 1}}]}]}`

func customRejectBodies(t *testing.T, start Starter) {
	h := startConfig(t, start, rejectBodyConfig)
	reject := func(what string, r Request, status int, body string, kv ...string) {
		t.Helper()
		wantRejection(t, what, do(t, h, r), status, body, kv...)
	}

	// The configuration's body, for a limit rule without one of its own.
	if res := do(t, h, req("x-api-key", "k1", ":path", "/v1")); res.Rejected {
		t.Fatal("the first request was rejected")
	}
	reject("the configuration's body", req("x-api-key", "k1", ":path", "/v1"), 429, `{"message":"API rate limit exceeded"}`,
		"content-type", "application/json", "x-ratelimit-reason", "token_bucket_exceeded", "ratelimit-policy", `"api";q=1;w=1000`)
	if ra := atoi(t, "retry-after", header(do(t, h, req("x-api-key", "k1", ":path", "/v1")).ResponseHeaders, "retry-after")); ra < 1 {
		t.Errorf("Retry-After %d with a custom body", ra)
	}

	// A rule's own body and content type win.
	if res := do(t, h, req("x-api-key", "k2", ":path", "/pages/1")); res.Rejected {
		t.Fatal("the first page was rejected")
	}
	reject("the rule's body", req("x-api-key", "k2", ":path", "/pages/2"), 429, "<h1>Slow down</h1>",
		"content-type", "text/html; charset=utf-8", "x-ratelimit-reason", "fixed_window_exceeded")

	// A deny rule keeps its JSON; one with an empty body sends no content type.
	reject("a deny rule", req("x-api-key", "banned"), 403, `{"error":"denied","rule":"banned"}`,
		"content-type", "application/json", "x-ratelimit-reason", "denied")
	reject("a deny rule with an empty body", req("x-api-key", "gone"), 410, "",
		"content-type", "-", "x-ratelimit-reason", "denied")
	noRecoveredPanics(t, h)
}
