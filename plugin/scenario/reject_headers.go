package scenario

// Fields of your own on rejections (reject_headers): a rejection carries
// them besides the filter's own, by name in lower case. A rule's own fields
// win over the configuration's (an empty object sends none); a deny rule
// sends only its own. Allowed responses never carry them, and a gRPC call's
// rejection carries them too.

import "testing"

func init() {
	register(Case{Name: "RejectionsCarryHeadersOfYourOwn", Run: rejectHeadersOfYourOwn})
}

const rejectHeadersConfig = `{"reject_headers": {"X-Local-Rate-Limit": "true", "x-team": "payments"}, "policies": [
  {"name": "p", "rules": [
    {"name": "banned", "action": "deny", "match": {"header:x-api-key": "banned"}},
    {"name": "gone", "action": "deny", "deny_status": 410, "match": {"header:x-api-key": "gone"}, "reject_body": "",
     "reject_headers": {"x-gone-since": "2026-01-01"}},
    {"name": "pages", "match": {"path": {"prefix": "/pages/"}}, "limit_keys": ["header:x-api-key"], "algorithm": "fixed_window",
     "algorithm_config": {"limit": 1, "window_seconds": 60}, "reject_headers": {}},
    {"name": "reports", "match": {"path": {"prefix": "/reports/"}}, "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
     "algorithm_config": {"rps": 0.001, "burst": 1}, "reject_headers": {"x-limit-help": "https://docs.example.com/limits#reports"}},
    {"name": "api", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket", "algorithm_config": {"rps": 0.001, "burst": 1}}]}]}`

func rejectHeadersOfYourOwn(t *testing.T, start Starter) {
	h := startConfig(t, start, rejectHeadersConfig)
	mine := []string{"x-local-rate-limit", "x-team", "x-limit-help", "x-gone-since"}
	// expect checks the response has exactly the fields of your own in kv,
	// each once.
	expect := func(what string, res Response, rejected bool, kv ...string) {
		t.Helper()
		if res.Rejected != rejected {
			t.Fatalf("%s: rejected %v, want %v", what, res.Rejected, rejected)
		}
		want := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			want[kv[i]] = kv[i+1]
		}
		for _, name := range mine {
			v, ok := want[name]
			if !ok {
				v = "-"
			}
			wantHeaders(t, what, res.ResponseHeaders, name, v)
		}
	}

	expect("allowed", do(t, h, req("x-api-key", "k1", ":path", "/v1")), false)
	res := do(t, h, req("x-api-key", "k1", ":path", "/v1"))
	expect("the configuration's fields", res, true, "x-local-rate-limit", "true", "x-team", "payments")
	wantHeaders(t, "the configuration's fields", res.ResponseHeaders, "x-ratelimit-reason", "token_bucket_exceeded", "content-type", "application/json")

	do(t, h, req("x-api-key", "k2", ":path", "/reports/1"))
	expect("a rule's own fields", do(t, h, req("x-api-key", "k2", ":path", "/reports/2")), true,
		"x-limit-help", "https://docs.example.com/limits#reports")

	do(t, h, req("x-api-key", "k3", ":path", "/pages/1"))
	expect("a rule with none", do(t, h, req("x-api-key", "k3", ":path", "/pages/2")), true)

	expect("a deny rule", do(t, h, req("x-api-key", "banned")), true)
	res = do(t, h, req("x-api-key", "gone"))
	expect("a deny rule's own fields", res, true, "x-gone-since", "2026-01-01")
	wantHeaders(t, "a deny rule's own fields", res.ResponseHeaders, "content-type", "-", "x-ratelimit-reason", "denied")

	grpc := req("x-api-key", "k1", ":path", "/pkg.Svc/Call", "content-type", "application/grpc")
	res = do(t, h, grpc)
	expect("a gRPC call", res, true, "x-local-rate-limit", "true", "x-team", "payments")
	noRecoveredPanics(t, h)
}
