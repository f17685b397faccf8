package scenario

// Match conditions: a rule applies when every condition of its match holds
// (exact string, prefix, suffix, RE2 regex, in a list, client address or
// header address in CIDR blocks, present or absent, negation). Each
// request below is counted by exactly the rule its conditions select, seen
// in RateLimit-Policy; a configuration with a bad regex or CIDR block is
// refused and the previous one stays in force.

import (
	"testing"
)

func init() {
	register(Case{Name: "MatchConditionsSelectTheRule", Run: matchConditionsSelectTheRule})
}

const matchConditionsConfig = `{"rules": [
  {"name": "users", "limit_keys": ["ip:address"],
   "match": {"path": {"regex": "^/users/[0-9]+$"}, "method": {"in": ["GET", "HEAD"]}},
   "algorithm": "token_bucket", "algorithm_config": {"rps": 1, "burst": 11}},
  {"name": "office", "limit_keys": ["ip:address"],
   "match": {"ip:address": {"cidr": ["192.168.0.0/16", "2001:db8::/32"]}, "header:x-debug": {"present": false}},
   "algorithm": "token_bucket", "algorithm_config": {"rps": 1, "burst": 12}},
  {"name": "forwarded", "limit_keys": ["header:x-real-ip"],
   "match": {"header:x-real-ip": {"cidr": ["10.0.0.0/8"]}},
   "algorithm": "token_bucket", "algorithm_config": {"rps": 1, "burst": 13}},
  {"name": "json", "limit_keys": ["ip:address"],
   "match": {"path": {"suffix": ".json"}, "host": {"not": {"prefix": "internal."}}},
   "algorithm": "token_bucket", "algorithm_config": {"rps": 1, "burst": 14}},
  {"name": "rest", "limit_keys": ["ip:address"],
   "algorithm": "token_bucket", "algorithm_config": {"rps": 1, "burst": 15}}]}`

func matchConditionsSelectTheRule(t *testing.T, start Starter) {
	h := startConfig(t, start, matchConditionsConfig)
	for _, c := range []struct {
		what string
		r    Request
		rule string
	}{
		{"regex and in", req(":path", "/users/42", ":method", "GET"), `"users";q=11;w=11`},
		{"regex, query ignored", req(":path", "/users/42?x=1", ":method", "HEAD"), `"users";q=11;w=11`},
		{"regex anchored at the end", req(":path", "/users/42/posts", ":method", "GET"), `"rest";q=15;w=15`},
		{"method not in the list", req(":path", "/users/42", ":method", "DELETE"), `"rest";q=15;w=15`},
		{"client in an IPv4 block", req("@ip", "192.168.7.9:5555"), `"office";q=12;w=12`},
		{"client in an IPv6 block", req("@ip", "[2001:db8::7]:5555"), `"office";q=12;w=12`},
		{"office, but x-debug present", req("@ip", "192.168.7.9:5555", "x-debug", "1"), `"rest";q=15;w=15`},
		{"office, x-debug empty counts as absent", req("@ip", "192.168.7.9:5555", "x-debug", ""), `"office";q=12;w=12`},
		{"client outside the blocks", req("@ip", "192.169.0.1:5555"), `"rest";q=15;w=15`},
		{"header address in a block", req("x-real-ip", "10.9.8.7"), `"forwarded";q=13;w=13`},
		{"header not an address", req("x-real-ip", "unknown"), `"rest";q=15;w=15`},
		{"suffix, public host", req(":path", "/a/b.json", ":authority", "API.example.com"), `"json";q=14;w=14`},
		{"suffix, internal host", req(":path", "/a/b.json", ":authority", "internal.example.com"), `"rest";q=15;w=15`},
		{"suffix, no host: the negation holds", req(":path", "/b.json"), `"json";q=14;w=14`},
	} {
		res := do(t, h, c.r)
		if res.Rejected {
			t.Fatalf("%s: rejected", c.what)
		}
		wantHeaders(t, c.what, res.ResponseHeaders, "ratelimit-policy", c.rule)
	}

	// A bad regex or CIDR block is refused; the configuration above stays.
	for _, bad := range []string{
		`{"rules": [{"name": "r", "limit_keys": ["path"], "match": {"path": {"regex": "^/users/([0-9]+$"}}, "algorithm": "token_bucket", "algorithm_config": {"rps": 1, "burst": 1}}]}`,
		`{"rules": [{"name": "r", "limit_keys": ["path"], "match": {"ip:address": {"cidr": ["10.0.0.0/33"]}}, "algorithm": "token_bucket", "algorithm_config": {"rps": 1, "burst": 1}}]}`,
		`{"rules": [{"name": "r", "limit_keys": ["path"], "match": {"path": {"glob": "/a/*"}}, "algorithm": "token_bucket", "algorithm_config": {"rps": 1, "burst": 1}}]}`,
	} {
		if err := h.Reconfigure([]byte(bad)); err == nil {
			t.Errorf("an invalid configuration was accepted: %s", bad)
		}
	}
	if n := logsContaining(h, `rules[0].match.path.regex: "^/users/([0-9]+$" is not a valid RE2 regular expression: missing closing )`); n == 0 {
		t.Errorf("the bad regex is not logged with its path; logs %q", h.Logs())
	}
	res := do(t, h, req(":path", "/users/1", ":method", "GET"))
	wantHeaders(t, "after the refusals", res.ResponseHeaders, "ratelimit-policy", `"users";q=11;w=11`)
	noRecoveredPanics(t, h)
}
