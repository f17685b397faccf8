package scenario

// Header reads: a configuration that reads several request headers reads
// the whole header map in one host call and answers every lookup from it
// once its recent requests carried several of those headers (up to 16
// headers; a larger map is read header by header). Either way a
// request is decided on the same values: the first value of a repeated
// header, names asked in any case, pseudo-headers for path, query, method
// and host, X-Forwarded-For for the client address, the bearer token for
// claims. Each request below is a browser-like request of 14 to 16
// headers, sent once as it is and once with 70 more headers.

import (
	"slices"
	"strconv"
	"testing"
)

func init() {
	register(Case{Name: "HeadersReadInOneCallDecideLikeSingleReads", Run: headersReadInOneCall})
}

const headerReadsConfig = `{"xff_trusted_hops": 1, "rules": [
  {"name": "blocked", "action": "deny", "match": {"jwt:sub": "mallory"}},
  {"name": "tier", "limit_keys": ["header:x-api-key"], "match": {"header:X-Tier": "gold"},
   "algorithm": "token_bucket", "algorithm_config": {"rps": 1, "burst": 5}},
  {"name": "gold", "limit_keys": ["header:X-Api-Key"], "match": {"header:X-Plan": "gold", "method": {"in": ["GET", "POST"]}},
   "algorithm": "token_bucket", "algorithm_config": {"rps": 1, "burst": 3}},
  {"name": "tagged", "limit_keys": ["header:X-Tag", "query:page", "ip:address"], "match": {"host": {"suffix": ".example"}},
   "algorithm": "token_bucket", "algorithm_config": {"rps": 1, "burst": 2}},
  {"name": "rest", "limit_keys": ["header:x-api-key"],
   "algorithm": "token_bucket", "algorithm_config": {"rps": 1, "burst": 4}}]}`

// BrowserHeaders are a request's headers as Envoy sees them from a browser
// or an API client: pseudo-headers first, then 9 common fields, a cookie of
// about 200 bytes among them. With authorization and x-api-key added it is
// the 15-header request the trial benchmarks send.
var BrowserHeaders = []Header{
	{":authority", "shop.test"}, {":path", "/api/v2/items?page=1"}, {":method", "GET"}, {":scheme", "https"},
	{"user-agent", "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36"},
	{"accept", "application/json, text/plain, */*"}, {"accept-encoding", "gzip, deflate, br, zstd"},
	{"x-forwarded-for", "198.51.100.1, 203.0.113.7"}, {"x-forwarded-proto", "https"},
	{"x-request-id", "5b0e6f0c-2a55-4d3b-9a57-0c1a3d6e9f11"}, {"x-envoy-expected-rq-timeout-ms", "15000"},
	{"content-type", "application/json"},
	{"cookie", "sid=eyJ1aWQiOjQyLCJleHAiOjE3NjQwMDAwMDB9.c2lnbmF0dXJl; theme=dark; lang=en-GB; " +
		"consent=analytics,ads,functional; _ga=GA1.2.1234567890.1700000000; _gid=GA1.2.987654321.1700000000; cart=3f9a"},
}

// browserRequest is BrowserHeaders with kv's headers: a name BrowserHeaders
// has takes kv's (first) value in place, any other is added (a name given
// twice is then a repeated header); huge adds 70 more headers.
func browserRequest(huge bool, kv ...string) Request {
	r := req()
	r.Headers = append([]Header(nil), BrowserHeaders...)
	replaced := map[string]bool{}
	for i := 0; i+1 < len(kv); i += 2 {
		name, v := kv[i], kv[i+1]
		if j := slices.IndexFunc(r.Headers, func(h Header) bool { return h[0] == name }); j >= 0 && !replaced[name] && j < len(BrowserHeaders) {
			r.Headers[j][1] = v
			replaced[name] = true
			continue
		}
		r.Headers = append(r.Headers, Header{name, v})
	}
	if huge {
		for i := range 70 {
			r.Headers = append(r.Headers, Header{"x-filler-" + strconv.Itoa(i), "v" + strconv.Itoa(i)})
		}
	}
	return r
}

func headersReadInOneCall(t *testing.T, start Starter) {
	h := startConfig(t, start, headerReadsConfig)
	for _, huge := range []bool{false, true} {
		suffix := "-small"
		if huge {
			suffix = "-huge"
		}
		for _, c := range []struct {
			what string
			kv   []string // the request's own headers; the key gets suffix
			rule string   // the rule that counts it ("" none), and its burst
			n    int
		}{
			{"key from one header, match on another", []string{"x-plan", "gold", "x-api-key", "k1"}, "gold", 3},
			{"value compared exactly", []string{"x-plan", "Gold", "x-api-key", "k2"}, "rest", 4},
			{"one exact header condition", []string{"x-tier", "gold", "x-api-key", "k6"}, "tier", 5},
			{"one exact condition, a value of its length", []string{"x-tier", "golf", "x-api-key", "k7"}, "rest", 4},
			{"one exact condition, a shorter value", []string{"x-tier", "gol", "x-api-key", "k8"}, "rest", 4},
			{"one exact condition, a value it starts", []string{"x-tier", "golden", "x-api-key", "k9"}, "rest", 4},
			{"method from :method", []string{"x-plan", "gold", "x-api-key", "k3", ":method", "DELETE"}, "rest", 4},
			{"repeated header: its first value", []string{"x-tag", "t1", "x-tag", "t2", ":authority", "api.example", ":path", "/items?page=2"}, "tagged", 2},
			{"no tag: a missing key part, the next rule", []string{":authority", "api.example", ":path", "/items?page=3", "x-api-key", "k4"}, "rest", 4},
			{"claim from the bearer token", []string{"authorization", bearer(`{"sub":"mallory"}`), "x-api-key", "k5"}, "", 0},
		} {
			what := c.what + suffix
			kv := append([]string(nil), c.kv...)
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i] == "x-api-key" || kv[i] == "x-tag" {
					kv[i+1] += suffix
				}
			}
			r := browserRequest(huge, kv...)
			got := admitted(t, h, c.n+2, r)
			if got != c.n {
				t.Errorf("%s: %d of %d admitted, want %d (rule %q)", what, got, c.n+2, c.n, c.rule)
			}
			if c.rule == "" {
				continue
			}
			// The same request once more: refused by the rule that counted it.
			res := do(t, h, r)
			if !res.Rejected {
				t.Errorf("%s: admitted beyond the burst", what)
			}
			wantHeaders(t, what, res.ResponseHeaders, "ratelimit-policy", `"`+c.rule+`";q=`+strconv.Itoa(c.n)+`;w=`+strconv.Itoa(c.n))
		}
		// The repeated header's second value alone is another identity.
		r := browserRequest(huge, "x-tag", "t2"+suffix, ":authority", "api.example", ":path", "/items?page=2")
		if got := admitted(t, h, 2, r); got != 2 {
			t.Errorf("second tag value%s: %d of 2 admitted", suffix, got)
		}
		// The client address comes from X-Forwarded-For: another address
		// with the same tag is another identity.
		r = browserRequest(huge, "x-tag", "t1"+suffix, ":authority", "api.example", ":path", "/items?page=2",
			"x-forwarded-for", "198.51.100.1, 203.0.113.8")
		if got := admitted(t, h, 2, r); got != 2 {
			t.Errorf("another forwarded address%s: %d of 2 admitted", suffix, got)
		}
	}
	noRecoveredPanics(t, h)
}
