package scenario

// cookie:<name> keys and matches a request by one cookie of its Cookie
// header: the first of that name, wherever it is in the header, without
// the quotes around it. Cookie names are case-sensitive, and a request
// without the cookie (or with it empty) has no value, so a rule keyed by
// it does not apply.

import "testing"

func init() {
	register(Case{Name: "CookieKeysAndMatchesOneCookieOfTheHeader", Run: cookieSource})
}

const cookieConfig = `{"policies": [{"name": "sessions", "rules": [
  {"name": "beta", "match": {"cookie:ab": "beta"}, "limit_keys": ["cookie:sid"],
   "algorithm": "token_bucket", "algorithm_config": {"rps": 0.001, "burst": 1}},
  {"name": "per-session", "limit_keys": ["cookie:sid"], "algorithm": "token_bucket", "algorithm_config": {"rps": 0.001, "burst": 2}}]}]}`

func cookieSource(t *testing.T, start Starter) {
	h := startConfig(t, start, cookieConfig)
	allowed := func(what string, r Request) { t.Helper(); wantAdmitted(t, h, what, r) }

	// The beta group's rule, matched on one cookie, keyed on another.
	allowed("a beta session's first request", req("cookie", "sid=s-1; ab=beta"))
	wantRejection(t, "a beta session's second request", do(t, h, req("cookie", "ab=beta;sid=s-1")), 429, `{"error":"rate_limited","rule":"beta"...`,
		"ratelimit-policy", `"beta";q=1;w=1000`)

	// Another session: the same bucket whatever the cookie's place, quotes
	// and the spaces around it; the first of two cookies of that name.
	allowed("a session's first request", req("cookie", `theme=dark; sid="s-2"`))
	allowed("its second request, the cookie first", req("cookie", "sid=s-2 ;theme=light"))
	wantRejection(t, "its third request, the cookie twice", do(t, h, req("cookie", "sid=s-2; sid=s-9")), 429, `{"error":"rate_limited","rule":"per-session"...`)
	allowed("the session named second before", req("cookie", "sid=s-9"))

	// No such cookie: another name's case, an empty value, a longer name,
	// no Cookie header. No rule applies.
	for _, cookie := range []string{"Sid=s-3", "sid=", "xsid=s-3; sidx=s-3", ""} {
		for i := range 4 {
			r := req()
			if cookie != "" {
				r = req("cookie", cookie)
			}
			if res := do(t, h, r); res.Rejected {
				t.Fatalf("request %d with cookie %q was rejected", i, cookie)
			}
		}
	}
	noRecoveredPanics(t, h)
}
