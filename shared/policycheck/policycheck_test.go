package policycheck_test

import (
	"encoding/json"
	"encoding/xml"
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/policycheck"
	"github.com/sluice-rl/sluice/shared/simulate"
)

func parseConfig(t *testing.T, doc string) *policy.Config {
	t.Helper()
	cfg, err := policy.Parse([]byte(doc))
	if err != nil {
		t.Fatalf("policy: %v", err)
	}
	return cfg
}

func parseSuite(t *testing.T, doc string) *policycheck.Suite {
	t.Helper()
	s, err := policycheck.Parse([]byte(doc))
	if err != nil {
		t.Fatalf("tests: %v", err)
	}
	return s
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	return readFileB(t, name)
}

func readFileB(tb testing.TB, name string) string {
	tb.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

func parseConfigB(doc string) (*policy.Config, error) { return policy.Parse([]byte(doc)) }

const demoConfig = "../../plugin/gateway/demo-config.json"
const demoTests = "../../plugin/gateway/demo-config.tests.yaml"

func TestTheDemoPolicyPassesItsTests(t *testing.T) {
	rep := policycheck.Run(parseConfig(t, readFile(t, demoConfig)), parseSuite(t, readFile(t, demoTests)), policycheck.Options{})
	if rep.Failed() != 0 || len(rep.Tests) < 7 {
		t.Fatalf("%d tests:\n%s", len(rep.Tests), rep.Text(true))
	}
}

// The same tests catch a change to the policy's numbers: a free burst of
// 6 lets the sixth request through, and the report says where.
func TestAChangedLimitFailsTheTestsThatPinIt(t *testing.T) {
	doc := strings.Replace(readFile(t, demoConfig), `"tokens_per_second": 1, "burst": 5`, `"tokens_per_second": 1, "burst": 6`, 1)
	rep := policycheck.Run(parseConfig(t, doc), parseSuite(t, readFile(t, demoTests)), policycheck.Options{})
	if rep.Failed() == 0 {
		t.Fatal("no test failed")
	}
	f := rep.Tests[0].Failure
	if f == nil || f.Step != "tests[0].steps[1]" || f.Request != 1 || f.Line != 11 {
		t.Fatalf("first test's failure %+v\n%s", f, rep.Text(false))
	}
	if len(f.Mismatches) != 3 || f.Mismatches[0] != "status: got 200, want 429" ||
		f.Mismatches[1] != `headers.retry-after: absent, want "1"` || f.Mismatches[2] != `headers.ratelimit-policy: got '"free";q=6;w=6', want '"free";q=5;w=5'` {
		t.Fatalf("mismatches %q", f.Mismatches) // the rule is "free", as expected
	}
	text := rep.Text(false)
	for _, want := range []string{"FAIL  a free key gets a burst of 5", "tests[0].steps[1] (line 11), request 1 of 1, at +0s:",
		`policy "tiers": rule "free" applies to header:x-api-key=free…`, "admits, 0 left", "FAIL: "} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q:\n%s", want, text)
		}
	}
}

const gatePolicy = `{
  "policies": [
    {"name": "gate", "rules": [
      {"name": "health", "action": "exempt", "match": {"path": "/healthz"}},
      {"name": "blocked", "action": "deny", "deny_status": 403, "match": {"header:x-api-key": "stolen"}},
      {"name": "bots", "action": "deny", "mode": "shadow", "match": {"header:user-agent": {"suffix": "bot"}}}
    ]},
    {"name": "keys", "rules": [
      {"name": "per-key", "limit_keys": ["header:x-api-key"], "algorithm": "fixed_window",
       "algorithm_config": {"limit": 2, "window_seconds": 10}},
      {"name": "search-watch", "mode": "shadow", "match": {"query:q": {"present": true}}, "limit_keys": ["ip:address"],
       "algorithm": "fixed_window", "algorithm_config": {"limit": 1, "window_seconds": 60}}
    ]},
    {"name": "daily", "rules": [
      {"name": "exports", "match": {"path_prefix": "/export"}, "limit_keys": ["jwt:sub"],
       "algorithm": "quota", "algorithm_config": {"limit": 2, "period": "day", "time_zone": "Europe/Berlin"}}
    ]}
  ]
}`

func TestExemptDenyAndShadowRulesAreChecked(t *testing.T) {
	suite := parseSuite(t, `
tests:
  - name: health checks are exempt from every limit
    request: {path: /healthz, headers: {x-api-key: k1}}
    repeat: 5
    expect: {status: 200, applies: {gate: health, keys: ""}, rule: ""}
  - name: a stolen key is denied
    request: {headers: {x-api-key: stolen}}
    expect: {status: 403, rule: blocked, headers: {x-ratelimit-reason: denied}}
  - name: bots are only marked, and a step can drop a header
    request: {headers: {x-api-key: k2, user-agent: crawlbot}}
    steps:
      - expect: {status: 200, shadow_rejected: [bots], upstream_headers: {x-sluice-shadow: bots}}
      - request: {headers: {user-agent: null}}
        expect: {status: 200, rule: per-key, shadow_rejected: [], upstream_headers: {x-sluice-shadow: null}}
      - expect: {status: 429, rule: per-key, shadow_rejected: [bots]}
  - name: searches without a key are watched per address, in shadow
    request: {path: "/search?q=shoes"}
    steps:
      - expect: {status: 200, shadow_rejected: [], applies: {keys: search-watch}}
      - expect: {status: 200, shadow_rejected: [search-watch], upstream_headers: {x-sluice-shadow: search-watch}}
`)
	rep := policycheck.Run(parseConfig(t, gatePolicy), suite, policycheck.Options{})
	if rep.Failed() != 0 {
		t.Fatal(rep.Text(true))
	}
}

func TestGRPCStatusAndBodyAreChecked(t *testing.T) {
	cfg := parseConfig(t, `{"reject_grpc_status": "unavailable", "rules": [
	  {"name": "blocked", "action": "deny", "deny_status": 403, "match": {"header:x-api-key": "stolen"}},
	  {"name": "per-key", "limit_keys": ["header:x-api-key"], "algorithm": "fixed_window", "algorithm_config": {"limit": 1, "window_seconds": 60},
	   "reject_body": "slow down"}]}`)
	suite := parseSuite(t, `
tests:
  - name: the second call is refused with the configured status and body
    request: {headers: {x-api-key: k, content-type: application/grpc}}
    steps:
      - expect: {grpc_status: ok, body: ""}
      - expect: {grpc_status: UNAVAILABLE, body: slow down, status: 429}
  - name: a denied call gets what Envoy maps 403 to
    request: {headers: {x-api-key: stolen}}
    expect: {grpc_status: 7}
`)
	rep := policycheck.Run(cfg, suite, policycheck.Options{})
	if rep.Failed() != 0 {
		t.Fatal(rep.Text(true))
	}
	wrong := parseSuite(t, "tests: [{name: w, request: {headers: {x-api-key: k}}, repeat: 2, expect: {grpc_status: resource_exhausted, body: x}}]")
	f := policycheck.Run(cfg, wrong, policycheck.Options{}).Tests[0].Failure
	if f == nil || strings.Join(f.Mismatches, "|") != `grpc_status: got ok, want resource_exhausted|body: got "", want "x"` {
		t.Fatalf("%+v", f)
	}
	if _, err := policycheck.Parse([]byte("tests: [{name: a, expect: {grpc_status: slow}}]")); err == nil || !strings.Contains(err.Error(), `tests[0].expect.grpc_status (line 1): "slow" is not a gRPC status`) {
		t.Fatal(err)
	}
}

func TestQuotaDaysEndInTheRulesTimeZone(t *testing.T) {
	suite := parseSuite(t, `
start: 2026-03-02T22:59:50Z   # 23:59:50 in Berlin
tests:
  - name: two exports a Berlin day
    request: {path: /export, claims: {sub: alice}}
    steps:
      - repeat: 2
        expect: {status: 200, rule: exports, identity: jwt:sub=alice}
      - expect: {status: 429, rule: exports, identity: "jwt:sub=…#65a03907"}  # as the dashboard shows it
      - wait: 10s
        expect: {status: 200, rule: exports}
  - name: the same, from a Berlin morning, waits for the next midnight
    start: 2026-03-02T08:00:00Z
    request: {path: /export, claims: {sub: alice}}
    steps:
      - repeat: 2
        expect: {status: 200}
      - wait: 10s
        expect: {status: 429}
`)
	rep := policycheck.Run(parseConfig(t, gatePolicy), suite, policycheck.Options{})
	if rep.Failed() != 0 {
		t.Fatal(rep.Text(true))
	}
}

func TestNamesThePolicyLacksFailTheTestBeforeAnyRequest(t *testing.T) {
	suite := parseSuite(t, `
tests:
  - name: typos
    steps:
      - expect: {status: 200}
      - expect: {rule: per-kye, applies: {gate: nope, kees: per-key}, shadow_rejected: [bot]}
`)
	rep := policycheck.Run(parseConfig(t, gatePolicy), suite, policycheck.Options{})
	f := rep.Tests[0].Failure
	if f == nil || f.Request != 0 || rep.Tests[0].Requests != 0 || f.Step != "tests[0].steps[1]" {
		t.Fatalf("%+v\n%s", f, rep.Text(false))
	}
	want := []string{`rule: no rule is named "per-kye"`, `applies.gate: policy "gate" has no rule named "nope"`,
		`applies: no policy is named "kees"`, `shadow_rejected: no rule is named "bot"`}
	if strings.Join(f.Mismatches, "|") != strings.Join(want, "|") {
		t.Fatalf("mismatches %q", f.Mismatches)
	}
}

func TestAFailureExplainsWhyAnExpectedRuleDoesNotApply(t *testing.T) {
	suite := parseSuite(t, `
tests:
  - name: health without its path
    request: {path: /health}
    expect: {applies: {gate: health}}
`)
	rep := policycheck.Run(parseConfig(t, gatePolicy), suite, policycheck.Options{})
	text := rep.Text(false)
	if rep.Failed() != 1 || !strings.Contains(text, `applies.gate: got none, want "health"`) || !strings.Contains(text, `rule "health" does not apply: `) {
		t.Fatal(text)
	}
}

func TestRequestsAreSpacedByEveryAndWait(t *testing.T) {
	// A window of 2 per 10 s: 3 requests 5 s apart cross a window
	// boundary and pass; 3 at once do not.
	suite := parseSuite(t, `
tests:
  - name: spaced
    request: {headers: {x-api-key: k}}
    repeat: 3
    every: 5s
    expect: {status: 200}
  - name: at once
    request: {headers: {x-api-key: k}}
    repeat: 3
    expect: {status: 200}
`)
	rep := policycheck.Run(parseConfig(t, gatePolicy), suite, policycheck.Options{})
	if rep.Tests[0].Failure != nil || rep.Tests[1].Failure == nil || rep.Tests[1].Failure.Request != 3 {
		t.Fatal(rep.Text(true))
	}
	if f := rep.Tests[1].Failure; f.Repeat != 3 || f.At != 0 {
		t.Fatalf("%+v", f)
	}
}

func TestObserveSeesEveryRequestAtItsTime(t *testing.T) {
	suite := parseSuite(t, `
start: 2026-01-01T00:00:10Z
tests:
  - name: a
    request: {headers: {x-api-key: k}}
    steps:
      - expect: {status: 200}
      - wait: 1500ms
        repeat: 2
        every: 1s
        expect: {rule: per-key}
`)
	var times []time.Time
	var statuses []int
	policycheck.Run(parseConfig(t, gatePolicy), suite, policycheck.Options{Observe: func(s policycheck.Sent) {
		if s.Test != 0 || s.Request.Headers["x-api-key"] != "k" || s.InFlight {
			t.Errorf("sent %+v", s)
		}
		times = append(times, s.At)
		statuses = append(statuses, s.Result.Status)
	}})
	if !slices.Equal(statuses, []int{0, 0, 429}) { // 2 a window of 10 s
		t.Errorf("statuses %v", statuses)
	}
	start := time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC)
	if want := []time.Time{start, start.Add(1500 * time.Millisecond), start.Add(2500 * time.Millisecond)}; !slices.Equal(times, want) {
		t.Fatalf("times %v, want %v", times, want)
	}
}

func TestParseErrorsNameTheFieldAndItsLine(t *testing.T) {
	for _, c := range []struct{ doc, want string }{
		{"", "the file: empty; a test file has a list of tests"},
		{"tests: [", "the file: not YAML: "},
		{"tests: []", "tests (line 1): required: a list of tests"},
		{"test: []", `test (line 1): unknown field; the fields here are start, tests`},
		{"start: yesterday\ntests: [{name: a, expect: {status: 200}}]", `start (line 1): "yesterday" is not a time like`},
		{"tests:\n- name: a\n  steps:\n  - expect: {status: abc}", `tests[0].steps[0].expect.status (line 4): "abc" is not a whole number from 100 to 599`},
		{"tests:\n- name: a\n  steps:\n  - expect: {}\n", `tests[0].steps[0].expect (line 4): empty; say what the request must get`},
		{"tests:\n- name: a\n  steps:\n  - wait: 1s", `tests[0].steps[0].expect (line 4): required: what the request must get`},
		{"tests:\n- name: a\n  expect: {status: 200}\n  steps: []", `tests[0] (line 2): give either steps, or expect`},
		{"tests:\n- name: a\n  request: {path: /x}", `tests[0].expect (line 2): required`},
		{"tests:\n- expect: {status: 200}", `tests[0].name (line 2): required: what the test checks`},
		{"tests:\n- {name: a, expect: {status: 200}}\n- {name: a, expect: {status: 200}}", `tests[1].name (line 3): "a" is also the name of tests[0]`},
		{"tests:\n- {name: a, repeat: 0, expect: {status: 200}}", `tests[0].repeat (line 2): "0" is not a whole number from 1 to 100000`},
		{"tests:\n- {name: a, every: -1s, expect: {status: 200}}", `tests[0].every (line 2): "-1s" is not a duration`},
		{"tests:\n- {name: a, request: {path: nope}, expect: {status: 200}}", `tests[0].request.path (line 2): "nope" must start with /`},
		{"tests:\n- name: a\n  request: {headers: {x: y}}\n  steps:\n  - request: {headers: {\"bad name\": v}}\n    expect: {status: 200}", `tests[0].steps[0].request.headers.bad name (line 5): not a valid header name`},
		{"tests:\n- {name: a, request: {client_address: 300.1.1.1}, expect: {status: 200}}", `tests[0].request.client_address (line 2): "300.1.1.1" is not an IP address`},
		{"tests:\n- {name: a, request: {jwt: x, claims: {sub: a}}, expect: {status: 200}}", `tests[0].request.jwt (line 2): give a token or claims, not both`},
		{"tests:\n- {name: a, request: {claims: [1]}, expect: {status: 200}}", `tests[0].request.claims (line 2): must be a mapping`},
		{"tests:\n- {name: a, request: {heders: {}}, expect: {status: 200}}", `tests[0].request.heders (line 2): unknown field; the fields here are method, path`},
		{"tests:\n- {name: a, expect: {headers: {ratelimit: [1]}}}", `tests[0].expect.headers.ratelimit (line 2): must be a single value`},
		{"tests:\n- {name: a, expect: {shadow_rejected: bots}}", `tests[0].expect.shadow_rejected (line 2): must be a list of rule names`},
		{"tests:\n- {name: a, expect: {applies: [gate]}}", `tests[0].expect.applies (line 2): must be a mapping of policy names`},
		{"tests:\n- {name: a, expect: {status: 200, status: 429}}", `tests[0].expect.status (line 2): given twice`},
		{"tests:\n- {name: a, repeat: 100000, expect: {status: 200}}\n- {name: b, repeat: 100000, expect: {status: 200}}\n" +
			strings.Repeat("- {name: c, repeat: 100000, expect: {status: 200}}\n", 0), ""},
	} {
		_, err := policycheck.Parse([]byte(c.doc))
		if c.want == "" {
			if err != nil {
				t.Errorf("%q: %v", c.doc, err)
			}
			continue
		}
		var es policycheck.Errors
		if !errors.As(err, &es) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q:\n got %v\nwant %s", c.doc, err, c.want)
		}
	}
}

func TestAFileSendsAtMostAMillionRequests(t *testing.T) {
	doc := "tests:\n" + strings.Repeat("- {name: n%d, repeat: 100000, expect: {status: 200}}\n", 11)
	for i := 0; i < 11; i++ {
		doc = strings.Replace(doc, "%d", string(rune('a'+i)), 1)
	}
	_, err := policycheck.Parse([]byte(doc))
	if err == nil || !strings.Contains(err.Error(), "tests[10].repeat (line 12): the file sends more than 1000000 requests") {
		t.Fatal(err)
	}
}

// Aliases cannot make a small file a huge one: a list of a step repeated
// by alias is counted step by step.
func TestAliasesCountTowardsTheStepLimit(t *testing.T) {
	var b strings.Builder
	b.WriteString("tests:\n  - {name: t0, steps: &l [&s {expect: {status: 200}}" + strings.Repeat(", *s", 999) + "]}\n")
	for i := 1; i <= 10; i++ {
		b.WriteString("  - {name: t" + strconv.Itoa(i) + ", steps: *l}\n")
	}
	_, err := policycheck.Parse([]byte(b.String()))
	var es policycheck.Errors
	if !errors.As(err, &es) || len(es) != 1 || es[0].Error() != "tests[10].steps[0] (line 2): the file has more than 10000 steps; split it" {
		t.Fatal(err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(readFileB(f, demoTests))
	f.Add("tests:\n- {name: a, request: {headers: {x: &v y}, query: {q: *v}}, expect: {status: 200}}")
	f.Add("tests: [{name: a, steps: [{request: {claims: {sub: 1}}, expect: {applies: {p: r}, headers: {h: null}}}]}]")
	f.Add("tests: *a")
	f.Fuzz(func(t *testing.T, doc string) {
		s, err := policycheck.Parse([]byte(doc))
		if err != nil {
			var es policycheck.Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("error %v is not a list of problems", err)
			}
			for _, e := range es {
				if e.Message == "" {
					t.Fatalf("an empty message in %v", es)
				}
			}
			return
		}
		if len(s.Tests) == 0 {
			t.Fatal("a suite without tests")
		}
		for _, tc := range s.Tests {
			if strings.TrimSpace(tc.Name) == "" || len(tc.Steps) == 0 {
				t.Fatalf("test %+v", tc)
			}
			for _, st := range tc.Steps {
				if st.Repeat < 1 || st.Request.Path == "" || st.Request.Path[0] != '/' {
					t.Fatalf("step %+v", st)
				}
			}
		}
	})
}

func TestJUnitHasATestcasePerTestAndTheFailure(t *testing.T) {
	doc := strings.Replace(readFile(t, demoConfig), `"tokens_per_second": 1, "burst": 5`, `"tokens_per_second": 1, "burst": 6`, 1)
	rep := policycheck.Run(parseConfig(t, doc), parseSuite(t, readFile(t, demoTests)), policycheck.Options{})
	var got struct {
		Suite struct {
			Name     string `xml:"name,attr"`
			Tests    int    `xml:"tests,attr"`
			Failures int    `xml:"failures,attr"`
			Cases    []struct {
				Name    string `xml:"name,attr"`
				Failure *struct {
					Message string `xml:"message,attr"`
					Text    string `xml:",chardata"`
				} `xml:"failure"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	out := rep.JUnit("demo-config.tests.yaml")
	if err := xml.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	s := got.Suite
	if s.Name != "demo-config.tests.yaml" || s.Tests != len(rep.Tests) || s.Failures != rep.Failed() || s.Failures == 0 || len(s.Cases) != s.Tests {
		t.Fatalf("suite %+v", s)
	}
	f := s.Cases[0].Failure
	if s.Cases[0].Name != rep.Tests[0].Name || f == nil || !strings.HasPrefix(f.Message, "status: got 200, want 429") ||
		!strings.Contains(f.Text, "tests[0].steps[1] (line 11), request 1 of 1, at +0s:") || !strings.Contains(f.Text, `policy "tiers": rule "free" applies`) {
		t.Fatalf("first case %+v", s.Cases[0])
	}
	for i, c := range s.Cases {
		if (c.Failure == nil) != (rep.Tests[i].Failure == nil) {
			t.Errorf("case %q: failure %v, report %v", c.Name, c.Failure != nil, rep.Tests[i].Failure != nil)
		}
	}
}

// A test written from a request runs, and passes, against the policy it
// was written from; its expectations fail against another.
func TestTestForWritesATestThatPasses(t *testing.T) {
	cfg := parseConfig(t, readFile(t, demoConfig))
	for _, spec := range []simulate.RequestSpec{
		{Path: "/v1/orders", Headers: map[string]string{"x-api-key": "free-1", "X-Request-Weight": "6"}},
		{Method: "POST", Path: "/v1/chat/completions", Headers: map[string]string{"x-api-key": "k"}, Query: map[string]string{"q": "200"},
			Claims: json.RawMessage(`{"sub":"alice","n":1}`), Response: &simulate.ResponseSpec{Status: 200, Body: `{"usage":{"total_tokens":7}}`}},
		{Path: "/ip/x", ClientAddress: "198.51.100.7"},
		{},
	} {
		doc, err := policycheck.TestFor(cfg, spec)
		if err != nil {
			t.Fatal(err)
		}
		suite := parseSuite(t, "tests:\n"+indent(doc))
		if rep := policycheck.Run(cfg, suite, policycheck.Options{}); rep.Failed() != 0 {
			t.Errorf("the test written for %+v fails:\n%s\n%s", spec, doc, rep.Text(false))
		}
	}
	doc, _ := policycheck.TestFor(cfg, simulate.RequestSpec{Path: "/v1/orders", Headers: map[string]string{"x-api-key": "free-1", "x-request-weight": "6"}})
	if !strings.Contains(doc, "expect: {status: 429, rule: free, applies: {tiers: free, per-ip: \"\", llm: \"\"}}") || !strings.Contains(doc, "name: GET /v1/orders gets 429 (rule free)") {
		t.Errorf("the weighted request's test:\n%s", doc)
	}
	other := strings.Replace(readFile(t, demoConfig), `"tokens_per_second": 1, "burst": 5`, `"tokens_per_second": 1, "burst": 10`, 1)
	if rep := policycheck.Run(parseConfig(t, other), parseSuite(t, "tests:\n"+indent(doc)), policycheck.Options{}); rep.Failed() != 1 {
		t.Errorf("against a burst of 10:\n%s", rep.Text(true))
	}
	if _, err := policycheck.TestFor(cfg, simulate.RequestSpec{Path: "nope"}); err == nil {
		t.Error("a bad request was written as a test")
	}
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimSuffix(s, "\n"), "\n", "\n  ") + "\n"
}

// Whatever a request holds, the test written from it reads back as the
// same request and passes.
func FuzzTestForRoundTrips(f *testing.F) {
	f.Add("GET", "/v1/orders", "x-api-key", "free-1", "q", "v", `{"sub":"a"}`, "")
	f.Add("POST", "/ip/x?a=b", "x-plan", "*alias: #not a comment", "n", "yes", `{"n":[1,{"k":null}]}`, `{"usage":{"total_tokens":3}}`)
	f.Add("DELETE", "/", "X-Request-Weight", "6", "", "", "", "'\"")
	cfg, err := parseConfigB(readFileB(f, demoConfig))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, method, path, hname, hval, qk, qv, claims, body string) {
		spec := simulate.RequestSpec{Method: method, Path: path, Headers: map[string]string{hname: hval}, Query: map[string]string{qk: qv},
			Claims: json.RawMessage(claims), Response: &simulate.ResponseSpec{Body: body}}
		doc, err := policycheck.TestFor(cfg, spec)
		if err != nil {
			return // a request the simulator refuses
		}
		suite, err := policycheck.Parse([]byte("tests:\n" + indent(doc)))
		if err != nil {
			t.Fatalf("the written test does not read back: %v\n%s", err, doc)
		}
		if rep := policycheck.Run(cfg, suite, policycheck.Options{}); rep.Failed() != 0 {
			t.Fatalf("the written test fails:\n%s\n%s", doc, rep.Text(false))
		}
	})
}

func TestRequestsInFlightHoldTheirConcurrencyPlaces(t *testing.T) {
	cfg := parseConfig(t, `{"rules": [{"name": "uploads", "limit_keys": ["header:x-api-key"], "algorithm": "concurrency",
	  "algorithm_config": {"limit": 3, "max_request_seconds": 30}}]}`)
	suite := parseSuite(t, `
tests:
  - name: three uploads at once, the fourth waits
    request: {headers: {x-api-key: k}}
    steps:
      - repeat: 3
        in_flight: true
        expect: {status: 200}
      - expect: {status: 429, rule: uploads, headers: {retry-after: "1"}}
      - request: {headers: {x-api-key: other}}
        expect: {status: 200}
      - wait: 60s # two leases: the places the filter never got back return
        expect: {status: 200}
  - name: requests that end give their place back
    request: {headers: {x-api-key: k}}
    repeat: 10
    expect: {status: 200}
`)
	if rep := policycheck.Run(cfg, suite, policycheck.Options{}); rep.Failed() != 0 {
		t.Fatal(rep.Text(true))
	}
	if _, err := policycheck.Parse([]byte("tests: [{name: a, in_flight: maybe, expect: {status: 200}}]")); err == nil || !strings.Contains(err.Error(), `tests[0].in_flight (line 1): "maybe" is not true or false`) {
		t.Fatal(err)
	}
}

// The report names the rules no request applied: what the tests leave
// uncovered.
func TestTheReportNamesTheRulesNoTestExercises(t *testing.T) {
	suite := parseSuite(t, `
tests:
  - name: a key
    request: {headers: {x-api-key: k}}
    expect: {status: 200}
  - name: health
    request: {path: /healthz}
    expect: {status: 200}
`)
	rep := policycheck.Run(parseConfig(t, gatePolicy), suite, policycheck.Options{})
	want := []string{"gate/blocked", "gate/bots", "keys/search-watch", "daily/exports"}
	if !slices.Equal(rep.Unexercised, want) {
		t.Fatalf("unexercised %q, want %q", rep.Unexercised, want)
	}
	if text := rep.Text(true); !strings.Contains(text, "not exercised: gate/blocked, gate/bots, keys/search-watch, daily/exports (no request of the tests applies them)\n") {
		t.Fatal(text)
	}
	if strings.Contains(rep.Text(false), "not exercised") {
		t.Error("the short report lists them")
	}
	if rep := policycheck.Run(parseConfig(t, readFile(t, demoConfig)), parseSuite(t, readFile(t, demoTests)), policycheck.Options{}); len(rep.Unexercised) != 0 {
		t.Errorf("the demo tests leave %q", rep.Unexercised)
	}
}

// A test's request names its upstream cluster, for rules keyed or matched
// on cluster: a step's cluster replaces the test's.
func TestRequestsNameTheirUpstreamCluster(t *testing.T) {
	cfg := parseConfig(t, `{"rules": [{"name": "payments", "match": {"cluster": {"suffix": "|payments.prod.svc.cluster.local"}},
	  "limit_keys": ["cluster"], "algorithm": "fixed_window", "algorithm_config": {"limit": 1, "window_seconds": 60}}]}`)
	suite := parseSuite(t, `
tests:
  - name: one call a minute to the payments service, whatever the route
    request: {cluster: "outbound|8080||payments.prod.svc.cluster.local", route: checkout}
    steps:
      - expect: {status: 200, rule: payments}
      - request: {route: refunds}
        expect: {status: 429, rule: payments}
      - request: {cluster: "outbound|80||web.prod.svc.cluster.local"}
        expect: {status: 200}
`)
	if rep := policycheck.Run(cfg, suite, policycheck.Options{}); rep.Failed() != 0 {
		t.Fatal(rep.Text(true))
	}
}

// A test's request names its connection, for rules keyed by connection: a
// step with another number is a request on another connection.
func TestRequestsNameTheirConnection(t *testing.T) {
	cfg := parseConfig(t, `{"rules": [{"name": "per-connection", "limit_keys": ["connection"],
	  "algorithm": "fixed_window", "algorithm_config": {"limit": 1, "window_seconds": 60}}]}`)
	suite := parseSuite(t, `
tests:
  - name: one request a minute on each connection
    request: {connection: 7}
    steps:
      - expect: {status: 200, rule: per-connection}
      - expect: {status: 429, rule: per-connection}
      - request: {connection: "8"}
        expect: {status: 200}
`)
	if rep := policycheck.Run(cfg, suite, policycheck.Options{}); rep.Failed() != 0 {
		t.Fatal(rep.Text(true))
	}
	_, err := policycheck.Parse([]byte(`
tests:
  - name: not a number
    request: {connection: seven}
    expect: {status: 200}
`))
	if err == nil || !strings.Contains(err.Error(), "tests[0].request.connection (line 3)") {
		t.Errorf("a connection that is not a number: %v", err)
	}
}

// A lockout carries from one step to the next: the refusal blocks the
// client, which stays refused past its next token, and is admitted once
// the block and a token's refill have passed.
func TestPolicyTestsCarryALockout(t *testing.T) {
	cfg := parseConfig(t, `{"rules": [{"name": "login", "limit_keys": ["ip:address"], "algorithm": "token_bucket",
	  "algorithm_config": {"rps": 1, "burst": 2, "block_seconds": 60}}]}`)
	suite := parseSuite(t, `
tests:
  - name: a client refused once stays out a minute
    request: {client_address: 203.0.113.7}
    steps:
      - repeat: 2
        expect: {status: 200}
      - expect: {status: 429, rule: login}
      - wait: 30s
        expect: {status: 429, rule: login}
      - wait: 31s
        expect: {status: 200}
`)
	if rep := policycheck.Run(cfg, suite, policycheck.Options{}); rep.Failed() != 0 {
		t.Fatal(rep.Text(true))
	}
	// Without the block, the client's next token comes a second later.
	cfg = parseConfig(t, `{"rules": [{"name": "login", "limit_keys": ["ip:address"], "algorithm": "token_bucket",
	  "algorithm_config": {"rps": 1, "burst": 2}}]}`)
	if rep := policycheck.Run(cfg, suite, policycheck.Options{}); rep.Failed() != 1 {
		t.Errorf("without block_seconds the test should fail at its 30 s step:\n%s", rep.Text(true))
	}
}
