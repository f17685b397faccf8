package policy

import (
	"encoding/json"
	"net/netip"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// overrideRule builds a per-key token_bucket rule (rate 10, burst 20) with
// the given overrides.
func overrideRule(keys, overrides string) string {
	return ruleWith(`"name":"plans","limit_keys":` + keys + `,"algorithm":"token_bucket","algorithm_config":{"tokens_per_second":10,"burst":20,"fixed_cost":2},"overrides":` + overrides)
}

func TestMatchConditionsHoldForTheValuesTheyDescribe(t *testing.T) {
	for _, c := range []struct {
		source, cond string
		holds        []string // values the condition holds for
		fails        []string // values it does not hold for ("" = missing)
	}{
		{"path", `"/health"`, []string{"/health"}, []string{"/health/", "/Health", ""}},
		{"path", `{"exact":"/health"}`, []string{"/health"}, []string{"/healthz", ""}},
		{"path", `{"prefix":"/api/"}`, []string{"/api/", "/api/v1"}, []string{"/ap", "/API/", ""}},
		{"path", `{"suffix":".json"}`, []string{"/a.json"}, []string{"/a.jsonx", ""}},
		{"path", `{"regex":"^/users/[0-9]+$"}`, []string{"/users/1", "/users/42"}, []string{"/users/", "/users/1/x", "x/users/1", ""}},
		{"path", `{"regex":"[0-9]"}`, []string{"/v1/x"}, []string{"/x"}}, // unanchored: anywhere
		{"jwt:plan", `{"in":["gold","platinum"]}`, []string{"gold", "platinum"}, []string{"Gold", "silver", ""}},
		{"ip:address", `{"cidr":["10.0.0.0/8","2001:db8::/32","192.168.1.7"]}`,
			[]string{"10.1.2.3", "10.255.0.1", "2001:db8::1", "::ffff:10.0.0.9", "192.168.1.7", "[2001:db8::5]:443", "10.0.0.1:8080"},
			[]string{"11.0.0.1", "2001:db9::1", "192.168.1.8", "not-an-ip", "fe80::1%eth0", ""}},
		{"header:x-real-ip", `{"cidr":["10.1.2.3/8"]}`, []string{"10.9.9.9", " 10.0.0.1 "}, []string{"10.0.0.1, 11.0.0.1", ""}},
		{"header:x-debug", `{"present":true}`, []string{"1", "no"}, []string{""}},
		{"header:x-debug", `{"present":false}`, []string{""}, []string{"1"}},
		{"path", `{"not":{"prefix":"/internal/"}}`, []string{"/api", ""}, []string{"/internal/x"}},
		{"header:x-tier", `{"not":{"present":true}}`, []string{""}, []string{"gold"}},
		{"header:x-tier", `{"not":{"not":"gold"}}`, []string{"gold"}, []string{"silver", ""}},
		{"host", `{"suffix":".EXAMPLE.com"}`, []string{"api.example.com"}, []string{"api.example.org"}}, // hosts compare lower-cased
	} {
		t.Run(c.source+" "+c.cond, func(t *testing.T) {
			cfg, err := Parse([]byte(withMatch(`{"` + c.source + `":` + c.cond + `}`)))
			if err != nil {
				t.Fatal(err)
			}
			cond := &cfg.Policies[0].Rules[0].Match[0].Cond
			for _, v := range c.holds {
				if !cond.Holds(v, v != "") {
					t.Errorf("does not hold for %q", v)
				}
			}
			for _, v := range c.fails {
				if cond.Holds(v, v != "") {
					t.Errorf("holds for %q", v)
				}
			}
		})
	}
}

func TestMatchConditionErrorsNameTheirPath(t *testing.T) {
	for _, c := range []struct{ match, path, msg string }{
		{`{"path":{"regex":"^/users/([0-9]+$"}}`, `rules[0].match.path.regex`, "not a valid RE2 regular expression: missing closing )"},
		{`{"path":{"regex":"(?=x)"}}`, `rules[0].match.path.regex`, "not a valid RE2"},
		{`{"ip:address":{"cidr":["10.0.0.0/33"]}}`, `rules[0].match["ip:address"].cidr[0]`, "is not a CIDR block"},
		{`{"ip:address":{"cidr":["10.0.0.0/8","office"]}}`, `rules[0].match["ip:address"].cidr[1]`, "is not an IP address or CIDR block"},
		{`{"ip:address":{"cidr":["fe80::/10%eth0"]}}`, `rules[0].match["ip:address"].cidr[0]`, "zone"},
		{`{"ip:address":{"cidr":[]}}`, `rules[0].match["ip:address"].cidr`, "is empty"},
		{`{"path":{"cidr":["10.0.0.0/8"]}}`, `rules[0].match.path.cidr`, "cidr compares IP addresses"},
		{`{"jwt:plan":{"in":[]}}`, `rules[0].match["jwt:plan"].in`, "is empty"},
		{`{"jwt:plan":{"in":["gold","gold"]}}`, `rules[0].match["jwt:plan"].in[1]`, "duplicate value"},
		{`{"jwt:plan":{"in":"gold"}}`, `rules[0].match["jwt:plan"].in`, "must be an array"},
		{`{"path":{"prefx":"/a"}}`, `rules[0].match.path.prefx`, `unknown operator "prefx" (did you mean "prefix"?)`},
		{`{"path":{"prefix":"/a","suffix":"b"}}`, `rules[0].match.path`, "has 2 operators"},
		{`{"path":{}}`, `rules[0].match.path`, "exactly one operator"},
		{`{"path":{"prefix":""}}`, `rules[0].match.path.prefix`, "is empty"},
		{`{"header:x":{"present":"yes"}}`, `rules[0].match["header:x"].present`, "must be true"},
		{`{"path":{"not":{"regex":"["}}}`, `rules[0].match.path.not.regex`, "not a valid RE2"},
		{`{"path_prefix":{"prefix":"/a"}}`, `rules[0].match.path_prefix`, "must be a string"},
	} {
		t.Run(c.match, func(t *testing.T) {
			wantError(t, withMatch(c.match), c.path, c.msg)
		})
	}
}

// wantError parses in and wants an error at path containing msg.
func wantError(t *testing.T, in, path, msg string) {
	t.Helper()
	_, err := Parse([]byte(in))
	es, _ := err.(Errors)
	for _, e := range es {
		if e.Path == path && strings.Contains(e.Message, msg) {
			return
		}
	}
	t.Errorf("want an error at %s containing %q, got %v", path, msg, err)
}

func TestExemptAndDenyRulesTakeNoAlgorithm(t *testing.T) {
	cfg, err := Parse([]byte(rules(
		`{"name":"health","action":"exempt","match":{"path":{"in":["/healthz","/readyz"]}}}`,
		`{"name":"bots","action":"deny","deny_status":451,"match":{"header:user-agent":{"regex":"(?i)badbot"}}}`,
		`{"name":"blocked","action":"deny","limit_keys":["header:x-api-key"],"match":{"header:x-api-key":{"in":["leaked"]}}}`,
		baseRule)))
	if err != nil {
		t.Fatal(err)
	}
	got := cfg.Policies[0].Rules
	if got[0].Action != ActionExempt || got[0].Algorithm != "" || got[0].DenyStatus != 0 || len(got[0].Keys) != 0 {
		t.Errorf("exempt rule = %+v", got[0])
	}
	if got[1].Action != ActionDeny || got[1].DenyStatus != 451 {
		t.Errorf("deny rule = %+v", got[1])
	}
	if got[2].DenyStatus != DefaultDenyStatus || len(got[2].Keys) != 1 {
		t.Errorf("deny rule without deny_status = %+v", got[2])
	}
	if got[3].Action != ActionLimit {
		t.Errorf("a rule without action is %q, want limit", got[3].Action)
	}
	for _, c := range []struct{ in, path, msg string }{
		{ruleWith(`"name":"x","action":"exempt","algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":1}`), "rules[0].algorithm", `does not apply to an "exempt" rule`},
		{ruleWith(`"name":"x","action":"deny","max_keys":5`), "rules[0].max_keys", `does not apply to an "deny" rule`},
		{ruleWith(`"name":"x","action":"block"`), "rules[0].action", `unknown action "block"`},
		{ruleWith(`"name":"x","action":"exempt","deny_status":403`), "rules[0].deny_status", `applies only to rules with "action": "deny"`},
		{ruleWith(`"name":"x","action":"deny","deny_status":700`), "rules[0].deny_status", "out of range"},
		{ruleWith(`"name":"x","action":"limit"`), "rules[0].limit_keys", "missing"},
	} {
		wantError(t, c.in, c.path, c.msg)
	}
}

func TestOverridesMergeTheirLimitsIntoTheRuleConfig(t *testing.T) {
	cfg, err := Parse([]byte(overrideRule(`["header:x-api-key"]`, `[
		{"key":"acme","algorithm_config":{"rps":100,"burst":200}},
		{"key":"small","algorithm_config":{"burst":15}},
		{"key":"a\\|b","algorithm_config":{"tokens_per_second":1,"burst":2}}]`)))
	if err != nil {
		t.Fatal(err)
	}
	ov := cfg.Policies[0].Rules[0].Overrides
	if len(ov) != 3 {
		t.Fatalf("overrides = %+v", ov)
	}
	if ov[0].Key != "acme" || *ov[0].TokenBucket != (TokenBucket{TokensPerSecond: 100, Burst: 200, FixedCost: 2, DefaultCost: 1}) {
		t.Errorf("acme = %+v %+v", ov[0], ov[0].TokenBucket)
	}
	if *ov[1].TokenBucket != (TokenBucket{TokensPerSecond: 10, Burst: 15, FixedCost: 2, DefaultCost: 1}) {
		t.Errorf("small keeps the rule's rate: %+v", ov[1].TokenBucket)
	}
	if ov[2].Key != `a\|b` {
		t.Errorf("escaped key = %q", ov[2].Key)
	}

	w, err := Parse([]byte(ruleWith(`"name":"daily","limit_keys":["jwt:sub"],"algorithm":"rolling_window",
		"algorithm_config":{"limit":1000,"window_seconds":86400,"period_seconds":3600},
		"overrides":[{"key":"u1","algorithm_config":{"limit":5000,"max_per_period":500}}]`)))
	if err != nil {
		t.Fatal(err)
	}
	if got := w.Policies[0].Rules[0].Overrides[0].Window; got.Limit != 5000 || got.MaxPerPeriod != 500 || got.PeriodSeconds != 3600 {
		t.Errorf("window override = %+v", got)
	}
}

func TestOverrideErrorsNameTheirPath(t *testing.T) {
	two := `["header:x-api-key","method"]`
	for _, c := range []struct{ in, path, msg string }{
		{overrideRule(two, `[{"key":"acme","algorithm_config":{"burst":30}}]`), "rules[0].overrides[0].key", "has 1 values joined by |, but the rule has 2 limit_keys"},
		{overrideRule(two, `[{"key":"acme|","algorithm_config":{"burst":30}}]`), "rules[0].overrides[0].key", "empty value"},
		{overrideRule(`["path"]`, `[{"key":"a\\b","algorithm_config":{"burst":30}}]`), "rules[0].overrides[0].key", "escapes nothing"},
		{overrideRule(`["path"]`, `[{"key":"a#b","algorithm_config":{"burst":30}}]`), "rules[0].overrides[0].key", `unescaped "#"`},
		{overrideRule(`["path"]`, `[{"key":"a","algorithm_config":{"burst":30}},{"key":"a","algorithm_config":{"burst":40}}]`), "rules[0].overrides[1].key", "duplicate key \"a\" (also at rules[0].overrides[0])"},
		{overrideRule(`["path"]`, `[{"key":"a","algorithm_config":{"cost_source":"header:x"}}]`), "rules[0].overrides[0].algorithm_config.cost_source", "allowed fields here: tokens_per_second, rps, burst"},
		{overrideRule(`["path"]`, `[{"key":"a","algorithm_config":{"burst":5}}]`), "rules[0].overrides[0].algorithm_config.burst", "5 is below tokens_per_second 10"},
		{overrideRule(`["path"]`, `[{"key":"a","algorithm_config":{"tokens_per_second":1,"burst":1}}]`), "rules[0].overrides[0].algorithm_config.fixed_cost", "exceeds burst 1"},
		{overrideRule(`["path"]`, `[{"key":"a","algorithm_config":{}}]`), "rules[0].overrides[0].algorithm_config", "is empty"},
		{overrideRule(`["path"]`, `[{"algorithm_config":{"burst":30}}]`), "rules[0].overrides[0].key", "missing"},
		{overrideRule(`["path"]`, `{"a":1}`), "rules[0].overrides", "must be an array"},
		{withAlg("fixed_window", `{"limit":10,"window_seconds":60},"overrides":[{"key":"1.2.3.4","algorithm_config":{"window_seconds":1}}]`),
			"rules[0].overrides[0].algorithm_config.window_seconds", "allowed fields here: limit"},
	} {
		wantError(t, c.in, c.path, c.msg)
	}
}

func TestNewFieldsRoundTripThroughTheNormalizedForm(t *testing.T) {
	in := rules(
		`{"name":"health","action":"exempt","match":{"path":{"in":["/healthz","/readyz"]},"ip:address":{"cidr":["10.1.2.3/8","::ffff:192.168.0.0/112"]}}}`,
		`{"name":"bots","action":"deny","deny_status":451,"match":{"header:user-agent":{"not":{"regex":"^curl/"}},"header:x-debug":{"present":false},"path":{"exact":"/x"}}}`,
		`{"name":"plans","limit_keys":["header:x-api-key"],"match":{"path":{"suffix":".json"}},"algorithm":"token_bucket","algorithm_config":{"rps":10,"burst":20},
		  "overrides":[{"key":"acme","algorithm_config":{"burst":40}}]}`)
	cfg, err := Parse([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	norm, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"cidr":["10.0.0.0/8","192.168.0.0/16"]`, `"path":"/x"`, `"action":"deny","deny_status":451`,
		`"overrides":[{"key":"acme","algorithm_config":{"tokens_per_second":10,"burst":40}}]`, `"not":{"regex":"^curl/"}`} {
		if !strings.Contains(string(norm), want) {
			t.Errorf("normalized form lacks %s:\n%s", want, norm)
		}
	}
	if strings.Contains(string(norm), `"name":"health","limit_keys"`) || strings.Contains(string(norm), `"max_keys":65536,"name":"bots"`) {
		t.Errorf("an exempt rule is written with limit fields:\n%s", norm)
	}
	again, err := Parse(norm)
	if err != nil {
		t.Fatalf("the normalized form does not parse: %v\n%s", err, norm)
	}
	norm2, _ := json.Marshal(again)
	if string(norm2) != string(norm) {
		t.Errorf("not a fixed point:\n%s\n%s", norm, norm2)
	}
}

func TestTenThousandOverridesParse(t *testing.T) {
	var b strings.Builder
	b.WriteString("[")
	for i := range 10000 {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`{"key":"customer-` + strconv.Itoa(i) + `","algorithm_config":{"tokens_per_second":` + strconv.Itoa(i%50+1) + `,"burst":100}}`)
	}
	b.WriteString("]")
	cfg, err := Parse([]byte(overrideRule(`["header:x-api-key"]`, b.String())))
	if err != nil {
		t.Fatal(err)
	}
	ov := cfg.Policies[0].Rules[0].Overrides
	if len(ov) != 10000 || ov[9999].Key != "customer-9999" || ov[9999].TokenBucket.TokensPerSecond != 50 {
		t.Errorf("got %d overrides, last %+v", len(ov), ov[len(ov)-1])
	}
}

// FuzzParseAddress: any value is either refused or read as a valid address
// without a zone, and every address netip reads (without a zone) is read
// the same.
func FuzzParseAddress(f *testing.F) {
	for _, s := range []string{"10.0.0.1", "10.0.0.1:443", "[2001:db8::1]:80", "::ffff:1.2.3.4", " 1.2.3.4 ", "fe80::1%eth0", "[", "1.2.3.4:", "::", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		a, ok := ParseAddress(v)
		if ok && (!a.IsValid() || a.Zone() != "" || a.Is4In6()) {
			t.Fatalf("%q read as %v", v, a)
		}
		if want, err := netip.ParseAddr(v); err == nil && want.Zone() == "" && (!ok || a != want.Unmap()) {
			t.Fatalf("%q read as %v, %v; netip reads %v", v, a, ok, want)
		}
	})
}

// overrideFuzzRules are the rule configurations the override fuzz target
// reads its entries against, per algorithm; the fuzzer picks one by index.
// Token bucket and quota rules include a cost read from the response with
// max_debt left at its default and given explicitly.
var overrideFuzzRules = map[string][]string{
	"token_bucket": {
		`{"rps":5,"burst":10,"fixed_cost":2}`,
		`{"rps":5,"burst":10,"cost_source":"response_header:x-cost","default_cost":3}`,
		`{"rps":5,"burst":10,"cost_source":"response_trailer:x-cost","max_debt":7}`,
		`{"rps":5,"burst":10,"cost_source":"response_header:x-cost","max_debt":0}`,
	},
	"fixed_window":   {`{"limit":10,"window_seconds":60,"fixed_cost":2}`},
	"sliding_window": {`{"limit":10,"window_seconds":60,"fixed_cost":2}`},
	"rolling_window": {`{"limit":100,"window_seconds":60,"period_seconds":10,"max_per_period":20}`},
	"quota": {
		`{"limit":100,"period":"day","fixed_cost":2}`,
		`{"limit":100,"period":"day","cost_source":"response_header:x-cost","default_cost":3}`,
		`{"limit":100,"period":"week","cost_source":"response_trailer:x-cost","max_debt":7}`,
	},
}

// FuzzFastOverrideAgreesWithTheFullChecks: the fast reading of an override
// accepts only what the full checks accept, with the same result.
func FuzzFastOverrideAgreesWithTheFullChecks(f *testing.F) {
	f.Add("token_bucket", uint8(0), "acme", "burst", "30", "rps", "5")
	f.Add("token_bucket", uint8(0), "a|b", "tokens_per_second", "25", "burst", "20")
	f.Add("token_bucket", uint8(1), "acme", "burst", "30", "rps", "5")
	f.Add("token_bucket", uint8(1), "acme", "tokens_per_second", "2", "burst", "4")
	f.Add("token_bucket", uint8(2), "acme", "burst", "30", "rps", "5")
	f.Add("token_bucket", uint8(3), "acme", "burst", "300", "rps", "5")
	f.Add("token_bucket", uint8(1), "acme", "burst", "30", "max_debt", "5")
	f.Add("rolling_window", uint8(0), "k", "limit", "50", "max_per_period", "60")
	f.Add("fixed_window", uint8(0), "k", "limit", "1e13", "max_per_period", "1")
	f.Add("sliding_window", uint8(0), "k\\#", "limit", "0.5", "limit", "2")
	f.Add("quota", uint8(0), "k", "limit", "50", "period", `"month"`)
	f.Add("quota", uint8(0), "k", "limit", "1", "burst", "3")
	f.Add("quota", uint8(1), "k", "limit", "50", "limit", "60")
	f.Add("quota", uint8(1), "k", "limit", "5000", "max_debt", "1")
	f.Add("quota", uint8(2), "k", "limit", "50", "period", `"day"`)
	f.Fuzz(func(t *testing.T, alg string, variant uint8, key, f1, v1, f2, v2 string) {
		cfgs, ok := overrideFuzzRules[alg]
		if !ok {
			alg, cfgs = "token_bucket", overrideFuzzRules["token_bucket"]
		}
		ruleCfg := cfgs[int(variant)%len(cfgs)]
		k, _ := json.Marshal(key)
		n1, _ := json.Marshal(f1)
		n2, _ := json.Marshal(f2)
		entry := `{"key":` + string(k) + `,"algorithm_config":{` + string(n1) + `:` + v1 + `,` + string(n2) + `:` + v2 + `}}`
		root, jerr := decodeJSON([]byte(ruleWith(`"name":"r","limit_keys":["path"],"algorithm":"` + alg + `","algorithm_config":` + ruleCfg)))
		ov, oerr := decodeJSON([]byte(entry))
		if jerr != nil || oerr != nil {
			return
		}
		p := &parser{rulePaths: map[string]string{}, policyPaths: map[string]string{}}
		cfg := p.config(root)
		if len(p.errs) > 0 {
			t.Fatal(p.errs)
		}
		r := &cfg.Policies[0].Rules[0]
		ruleJSON := root.obj[0].val.arr[0].obj[3].val
		full, fullOK := p.override("overrides", 0, ov, r, ruleJSON, overrideFieldsFor(alg), map[string]int{})
		fast, fastOK := fastOverride(ov, r, 1)
		if fastOK && (!fullOK || !reflect.DeepEqual(fast, full)) {
			t.Fatalf("%s on %s: fast %+v %+v %+v, full %v %+v %+v %+v (%v)", entry, ruleCfg, fast.TokenBucket, fast.Window, fast.Quota,
				fullOK, full.TokenBucket, full.Window, full.Quota, p.errs)
		}
	})
}

// An override that changes the burst of a rule charged from the response
// keeps the rule's max_debt, also when the rule leaves it at its default
// (the rule's burst): on the fast path, in the full checks, and after the
// normalized form is parsed back.
func TestTokenBucketOverrideKeepsTheRulesMaxDebt(t *testing.T) {
	for _, tc := range []struct {
		rule string
		debt float64
	}{
		{`{"tokens_per_second":5,"burst":10,"cost_source":"response_header:x-cost"}`, 10},
		{`{"tokens_per_second":5,"burst":10,"cost_source":"response_trailer:x-cost","max_debt":7}`, 7},
		{`{"tokens_per_second":5,"burst":10,"cost_source":"response_header:x-cost","max_debt":0}`, 0},
	} {
		for _, ov := range []string{`{"burst":30}`, `{"tokens_per_second":2,"burst":4}`} {
			entry := `{"key":"1.2.3.4","algorithm_config":` + ov + `}`
			in := withAlg("token_bucket", tc.rule+`,"overrides":[`+entry+`]`)
			cfg, err := Parse([]byte(in))
			if err != nil {
				t.Fatal(err)
			}
			r := &cfg.Policies[0].Rules[0]
			if got := r.Overrides[0].TokenBucket; got.MaxDebt != tc.debt || got.Burst == r.TokenBucket.Burst {
				t.Errorf("%s with %s: parsed burst %v max_debt %v, want the rule's max_debt %v", tc.rule, ov, got.Burst, got.MaxDebt, tc.debt)
			}

			rcfg, _ := decodeJSON([]byte(tc.rule))
			v, _ := decodeJSON([]byte(entry))
			p := &parser{}
			full, ok := p.override("overrides", 0, v, r, rcfg, tokenBucketOverrideFields, map[string]int{})
			if !ok || full.TokenBucket == nil || full.TokenBucket.MaxDebt != tc.debt {
				t.Errorf("%s with %s: full checks %v (%v) give %+v, want max_debt %v", tc.rule, ov, ok, p.errs, full.TokenBucket, tc.debt)
			}

			norm, err := json.Marshal(cfg)
			if err != nil {
				t.Fatal(err)
			}
			back, err := Parse(norm)
			if err != nil {
				t.Fatalf("%s: normalized form %s: %v", tc.rule, norm, err)
			}
			if got := back.Policies[0].Rules[0].Overrides[0].TokenBucket; !reflect.DeepEqual(got, r.Overrides[0].TokenBucket) {
				t.Errorf("%s with %s: parsed back as %+v, want %+v", tc.rule, ov, got, r.Overrides[0].TokenBucket)
			}
		}
	}
}

// BenchmarkParseTenThousandOverrides: a contract table is parsed on every
// worker VM at each configuration push.
func BenchmarkParseTenThousandOverrides(b *testing.B) {
	var sb strings.Builder
	sb.WriteString("[")
	for i := range 10000 {
		if i > 0 {
			sb.WriteString(",")
		}
		sb.WriteString(`{"key":"customer-` + strconv.Itoa(i) + `","algorithm_config":{"burst":` + strconv.Itoa(10+i%7) + `}}`)
	}
	sb.WriteString("]")
	in := []byte(overrideRule(`["header:x-api-key"]`, sb.String()))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(in); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzRegexAutomatonAgreesWithRegexp: on ASCII values the automaton built
// at configuration time answers exactly as regexp does.
func FuzzRegexAutomatonAgreesWithRegexp(f *testing.F) {
	for _, c := range [][2]string{
		{"^/users/[0-9]+$", "/users/42"}, {"[0-9]", "/v1/x"}, {"(?i)badbot", "Mozilla BADBOT/1"},
		{"^a|b$", "xab"}, {"^$", ""}, {"a*", "bbb"}, {"^/api/.*\\.json$", "/api/x/y.json"},
		{"(foo|bar)+baz", "foobarbaz"}, {"\\bword\\b", "a word"}, {"(?m)^x$", "a\nx"}, {"[^/]+$", "/a/b"},
		{"x{2,5}y", "xxxxxxy"}, {"^\\x{17F}$", "s"}, {"(?i)k", "\u212a"}, {"$^", ""}, {"a*$^", ""}, {"(?:$^)|b", "b"},
	} {
		f.Add(c[0], c[1])
	}
	f.Fuzz(func(t *testing.T, pattern, v string) {
		re, err := regexp.Compile(pattern)
		if err != nil {
			return
		}
		d := buildDFA(pattern)
		if d == nil {
			return
		}
		got, ok := d.match(v)
		ascii := true
		for i := 0; i < len(v); i++ {
			ascii = ascii && v[i] < 0x80
		}
		if !ok && ascii { // a non-ASCII value may still be answered by a match before its first non-ASCII byte
			t.Fatalf("%q on %q: no answer for an ASCII value", pattern, v)
		}
		if ok && got != re.MatchString(v) {
			t.Fatalf("%q on %q: automaton %v, regexp %v", pattern, v, got, !got)
		}
	})
}

// FuzzDottedQuadAgreesWithParseAddress: the IPv4 fast path reads what
// ParseAddress reads.
func FuzzDottedQuadAgreesWithParseAddress(f *testing.F) {
	for _, s := range []string{"10.0.0.1", "10.0.0.1:443", "255.255.255.255", "01.2.3.4", "1.2.3", "1.2.3.4.5", "256.1.1.1", "1.2.3.4:", "0.0.0.0:x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		ip, ok := parseDottedQuad(v)
		if !ok {
			return
		}
		a, aok := ParseAddress(v)
		if !aok || !a.Is4() || a.As4() != [4]byte{byte(ip >> 24), byte(ip >> 16), byte(ip >> 8), byte(ip)} {
			t.Fatalf("%q: fast path %08x, ParseAddress %v %v", v, ip, a, aok)
		}
	})
}
