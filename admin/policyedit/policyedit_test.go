package policyedit

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/shared/policy"
)

const doc = `{"mode":"enforce","future_option":{"a":[1,2]},"policies":[{"name":"tiers","rules":[
 {"name":"premium","match":{"header:x-plan":"premium","path":{"regex":"^/v[0-9]+/"}},"limit_keys":["header:x-api-key"],"algorithm":"token_bucket","algorithm_config":{"rps":10,"burst":20,"cost_source":"header:x-cost"},"max_keys":100,"new_field":true},
 {"name":"free","limit_keys":["ip:address"],"algorithm":"fixed_window","algorithm_config":{"limit":100,"window_seconds":60}}]}]}`

func compact(t *testing.T, raw []byte) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("%v: %s", err, raw)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func TestUntouchedDocumentRoundTripsExactly(t *testing.T) {
	d, err := ParseDoc([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := compact(t, d.JSON()), compact(t, []byte(doc)); got != want {
		t.Fatalf("round trip changed the document:\n got %s\nwant %s", got, want)
	}
}

func TestSummaryOfAnAllKeyedRuleSaysItIsOneBucket(t *testing.T) {
	o, err := ParseObject([]byte(`{"name": "site", "limit_keys": ["all"], "algorithm": "token_bucket", "algorithm_config": {"rps": 100, "burst": 200}}`))
	if err != nil {
		t.Fatal(err)
	}
	if s := Summarize(o, ""); s.Keys != "one bucket for all its requests" {
		t.Errorf("keys %q", s.Keys)
	}
}

func TestSummaryInWords(t *testing.T) {
	d, _ := ParseDoc([]byte(doc))
	o, _ := d.Rule(Ref{0, 0})
	s := Summarize(o, "enforce")
	if s.Limit != "10/s, burst 20, cost from request header x-cost" || s.Keys != "per header:x-api-key" || s.Mode != "enforce (default)" {
		t.Errorf("%+v", s)
	}
	if !strings.Contains(s.Matches, "header:x-plan is premium") || !strings.Contains(s.Matches, `path matches ^/v[0-9]+/`) {
		t.Errorf("matches %q", s.Matches)
	}
	if s.Extra != "max_keys, new_field" {
		t.Errorf("extra %q", s.Extra)
	}
	o, _ = d.Rule(Ref{0, 1})
	if s := Summarize(o, ""); s.Limit != "100 per 60 s" {
		t.Errorf("window %q", s.Limit)
	}
}

func TestSummarySaysWhereACostComesFrom(t *testing.T) {
	for cfg, want := range map[string]string{
		`{"rps":0.01,"burst":3,"cost_source":"response_status:401,403"}`:                     "0.01/s, burst 3, counting responses 401,403",
		`{"rps":50,"burst":1000,"cost_source":"response_header:x-tokens-used"}`:              "50/s, burst 1000, charged from response header x-tokens-used",
		`{"rps":1,"burst":5,"cost_source":"header:x-cost"}`:                                  "1/s, burst 5, cost from request header x-cost",
		`{"rps":1,"burst":5,"cost_source":"metadata:envoy.filters.http.json_to_metadata:n"}`: "1/s, burst 5, cost from Envoy metadata envoy.filters.http.json_to_metadata:n",
		`{"rps":1,"burst":5,"cost_source":"response_grpc_status:unauthenticated"}`:           "1/s, burst 5, counting gRPC responses unauthenticated",
		`{"rps":1,"burst":5,"cost_source":"fixed","fixed_cost":2}`:                           "1/s, burst 5",
		`{"rps":0.02,"burst":3,"cost_source":"response_status:401","block_seconds":900}`:     "0.02/s, burst 3, a refused identity blocked 900 s, counting responses 401",
		`{"limit":9,"period":"day","cost_source":"response_trailer:x-rows"}`:                 "9 per day (UTC), charged from response trailer x-rows",
		`{"limit":9,"period":"day","cost_source":"response_json:usage.total_tokens"}`:        "9 per day (UTC), charged from response body usage.total_tokens",
		`{"limit":1e9,"period":"day","cost_source":"response_bytes"}`:                        "1e9 per day (UTC), charged the response body's bytes",
	} {
		alg := "token_bucket"
		if strings.Contains(cfg, "period") {
			alg = "quota"
		}
		o, err := ParseObject([]byte(`{"name":"r","limit_keys":["ip:address"],"algorithm":"` + alg + `","algorithm_config":` + cfg + `}`))
		if err != nil {
			t.Fatal(err)
		}
		if s := Summarize(o, ""); s.Limit != want {
			t.Errorf("%s: %q, want %q", cfg, s.Limit, want)
		}
	}
}

func TestSummarySaysWhatShareARuleIsEnforcedOn(t *testing.T) {
	for _, c := range []struct{ rule, defaultMode, want string }{
		{`{"name":"ramp","enforce_percent":25,"limit_keys":["ip:address"]}`, "", "enforce (default), on 25% of its identities"},
		{`{"name":"ramp","mode":"enforce","enforce_percent":2.5,"shadow_mark":false,"limit_keys":["ip:address"]}`, "", "enforce, on 2.5% of its identities, the others not marked upstream"},
		{`{"name":"full","enforce_percent":100,"limit_keys":["ip:address"]}`, "enforce", "enforce (default)"},
	} {
		o, err := ParseObject([]byte(c.rule))
		if err != nil {
			t.Fatal(err)
		}
		if s := Summarize(o, c.defaultMode); s.Mode != c.want || strings.Contains(s.Extra, "enforce_percent") {
			t.Errorf("%s: mode %q, extra %q; want mode %q (and the form edits enforce_percent)", c.rule, s.Mode, s.Extra, c.want)
		}
	}
}

func TestSummarySaysAShadowRuleDoesNotMark(t *testing.T) {
	o, err := ParseObject([]byte(`{"name":"quiet","mode":"shadow","shadow_mark":false,"limit_keys":["ip:address"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if s := Summarize(o, ""); s.Mode != "shadow, not marked upstream" || s.Extra != "shadow_mark" {
		t.Errorf("mode %q, extra %q", s.Mode, s.Extra)
	}
	o, _ = ParseObject([]byte(`{"name":"loud","shadow_mark":false,"limit_keys":["ip:address"]}`))
	if s := Summarize(o, "enforce"); s.Mode != "enforce (default)" {
		t.Errorf("an enforced rule's mode %q: shadow_mark has no effect there", s.Mode)
	}
	o, _ = ParseObject([]byte(`{"name":"loud","limit_keys":["ip:address"]}`))
	if s := Summarize(o, "shadow"); s.Mode != "shadow (default)" {
		t.Errorf("a marking shadow rule's mode %q", s.Mode)
	}
}

func TestFormEditKeepsWhatItDoesNotEdit(t *testing.T) {
	d, _ := ParseDoc([]byte(doc))
	ref := Ref{0, 0}
	o, _ := d.Rule(ref)
	f := FormOf(o)
	if f.Rate != "10" || f.Burst != "20" || len(f.Match) != 1 || len(f.Kept) != 1 {
		t.Fatalf("form %+v", f)
	}
	f.Rate = "25"
	n, errs := f.Apply(o)
	if errs != nil {
		t.Fatal(errs)
	}
	if err := d.SetRule(ref, n); err != nil {
		t.Fatal(err)
	}
	out := compact(t, d.JSON())
	for _, want := range []string{`"tokens_per_second":25`, `"cost_source":"header:x-cost"`, `"max_keys":100`, `"new_field":true`,
		`"path":{"regex":"^/v[0-9]+/"}`, `"future_option":{"a":[1,2]}`} {
		if !strings.Contains(out, want) {
			t.Errorf("%s lost from %s", want, out)
		}
	}
	if strings.Contains(out, `"rps"`) {
		t.Errorf("the rate's alias stayed next to the new rate: %s", out)
	}
	f.Burst = "lots"
	if _, errs := f.Apply(o); len(errs) != 1 || errs[0].Field != "burst" {
		t.Errorf("a non-number: %v", errs)
	}
}

func TestReorderDuplicateDelete(t *testing.T) {
	d, _ := ParseDoc([]byte(doc))
	names := func() []string {
		rs, _ := d.Rules(0)
		var out []string
		for _, r := range rs {
			o, _ := ParseObject(r)
			out = append(out, o.String("name"))
		}
		return out
	}
	if err := d.Move(Ref{0, 1}, -1); err != nil {
		t.Fatal(err)
	}
	if err := d.Move(Ref{0, 0}, -1); err == nil {
		t.Error("the first rule moved up")
	}
	if _, err := d.Duplicate(Ref{0, 0}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Duplicate(Ref{0, 0}); err != nil {
		t.Fatal(err)
	}
	if got := names(); !reflect.DeepEqual(got, []string{"free", "free-copy2", "free-copy", "premium"}) {
		t.Fatalf("names %v", got)
	}
	if err := d.Delete(Ref{0, 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.NewRule(0); err != nil {
		t.Fatal(err)
	}
	if got := names(); !reflect.DeepEqual(got, []string{"free", "free-copy2", "premium", "new-rule"}) {
		t.Fatalf("names %v", got)
	}
}

func TestShorthandRules(t *testing.T) {
	d, err := ParseDoc([]byte(`{"rules":[{"name":"a","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":1}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if d.Policies() != 1 || d.PolicyName(0) != "default" || d.RulePath(Ref{0, 0}) != "rules[0]" {
		t.Fatalf("%d %q %q", d.Policies(), d.PolicyName(0), d.RulePath(Ref{0, 0}))
	}
	if _, err := d.Duplicate(Ref{0, 0}); err != nil {
		t.Fatal(err)
	}
	if _, err := policy.Parse(d.JSON()); err != nil {
		t.Fatalf("the duplicate is invalid: %v", err)
	}
}

func TestLocatePutsParserErrorsOnFields(t *testing.T) {
	for _, c := range []struct{ path, field string }{
		{"policies[0].rules[1].algorithm_config.burst", "burst"},
		{"policies[0].rules[1].algorithm_config.rps", "rate"},
		{"policies[0].rules[1].limit_keys[0]", "keys"},
		{`policies[0].rules[1].match["header:x"]`, "match"},
		{"policies[0].rules[1].name", "name"},
		{"policies[0].rules[1].scope", "scope"},
		{"policies[0].rules[1]", ""},
	} {
		fe, ok := Locate(policy.FieldError{Path: c.path, Message: "m"}, "policies[0].rules[1]")
		if !ok || fe.Field != c.field {
			t.Errorf("%s: %+v %v, want %q", c.path, fe, ok, c.field)
		}
	}
	if _, ok := Locate(policy.FieldError{Path: "policies[0].rules[10].name"}, "policies[0].rules[1]"); ok {
		t.Error("rules[10] taken for rules[1]")
	}
}

func FuzzParseDoc(f *testing.F) {
	f.Add([]byte(doc))
	f.Add([]byte(`{"rules":[]}`))
	f.Add([]byte(`{"policies":[1]}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		d, err := ParseDoc(raw)
		if err != nil {
			return
		}
		for p := 0; p < d.Policies(); p++ {
			rs, err := d.Rules(p)
			if err != nil {
				continue
			}
			for i := range rs {
				if o, err := d.Rule(Ref{p, i}); err == nil {
					n, _ := FormOf(o).Apply(o)
					_ = d.SetRule(Ref{p, i}, n)
					_ = Summarize(n, "")
				}
			}
		}
		if !json.Valid(d.JSON()) {
			t.Fatalf("invalid JSON out of %q", raw)
		}
	})
}

// TestFormEditsAConcurrencyLimit: the form sets a concurrency rule's limit,
// keeps its max_request_seconds, and the list says it in words.
func TestFormEditsAConcurrencyLimit(t *testing.T) {
	o, err := ParseObject([]byte(`{"name":"inflight","limit_keys":["header:x-api-key"],"algorithm":"concurrency","algorithm_config":{"limit":4,"max_request_seconds":60}}`))
	if err != nil {
		t.Fatal(err)
	}
	f := FormOf(o)
	if f.Limit != "4" {
		t.Fatalf("form limit %q", f.Limit)
	}
	f.Limit = "8"
	out, errs := f.Apply(o)
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	cfg, _ := out.Get("algorithm_config")
	if got := compact(t, cfg); got != `{"limit":8,"max_request_seconds":60}` {
		t.Fatalf("algorithm_config %s", got)
	}
	if s := Summarize(out, ""); s.Limit != "8 in flight at once" {
		t.Fatalf("summary %q", s.Limit)
	}
}

func TestConditionsInWords(t *testing.T) {
	for raw, want := range map[string]string{
		`"premium"`:                         "is premium",
		`{"exact": "GET"}`:                  "is GET",
		`{"prefix": "/api/"}`:               "starts with /api/",
		`{"suffix": ".json"}`:               "ends with .json",
		`{"regex": "^/v[0-9]+/"}`:           "matches ^/v[0-9]+/",
		`{"in": ["gold", "platinum"]}`:      "is one of gold, platinum",
		`{"cidr": ["10.0.0.0/8"]}`:          "is in 10.0.0.0/8",
		`{"present": false}`:                "is absent",
		`{"not": {"in": ["a", "b"]}}`:       "is not one of a, b",
		`{"not": {"prefix": "/internal/"}}`: "does not start with /internal/",
		`{"not": {"present": true}}`:        "is absent",
		`{"not": {"not": "x"}}`:             "is x",
		`{"prefix": "/a", "suffix": "b"}`:   "",
		`{"between": [1, 2]}`:               "",
	} {
		got, ok := describeCondition([]byte(raw), false)
		if got != want || ok != (want != "") {
			t.Errorf("%s: %q, %v; want %q", raw, got, ok, want)
		}
	}
}

// TestFormSetsWhereARuleCounts: the form makes a limit rule global and
// back, keeps a "local" written out, drops the scope of a rule that limits
// nothing, and the list says "across the fleet".
func TestFormSetsWhereARuleCounts(t *testing.T) {
	rule := func(extra string) Object {
		o, err := ParseObject([]byte(`{"name":"t","limit_keys":["header:x-k"],"algorithm":"token_bucket",
		  "algorithm_config":{"tokens_per_second":10,"burst":20}` + extra + `}`))
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	o := rule("")
	f := FormOf(o)
	if f.Scope != "" {
		t.Fatalf("a rule without scope: form scope %q", f.Scope)
	}
	f.Scope = "global"
	g, errs := f.Apply(o)
	if errs != nil || g.String("scope") != "global" {
		t.Fatalf("made global: scope %q, %v", g.String("scope"), errs)
	}
	if s := Summarize(g, ""); !strings.HasSuffix(s.Limit, ", across the fleet") || s.Extra != "" {
		t.Errorf("summary of a global rule: limit %q, extra %q", s.Limit, s.Extra)
	}
	f = FormOf(g)
	f.Scope = ""
	if l, _ := f.Apply(g); l.String("scope") != "" {
		t.Errorf("made local again: scope %q", l.String("scope"))
	}
	written := rule(`,"scope":"local"`)
	if back, _ := FormOf(written).Apply(written); back.String("scope") != "local" {
		t.Errorf("a written local scope became %q", back.String("scope"))
	}
	f = FormOf(g)
	f.Action = "exempt"
	if e, _ := f.Apply(g); e.String("scope") != "" {
		t.Errorf("an exempt rule keeps scope %q", e.String("scope"))
	}
}

// The form sets, changes and removes a token bucket's block_seconds, and
// names the field of a value that is not a number.
func TestFormEditsABlock(t *testing.T) {
	o, err := ParseObject([]byte(`{"name":"login","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":3}}`))
	if err != nil {
		t.Fatal(err)
	}
	f := FormOf(o)
	if f.Block != "" {
		t.Fatalf("form block %q for a rule without one", f.Block)
	}
	f.Block = "900"
	out, errs := f.Apply(o)
	cfg, _ := out.Get("algorithm_config")
	if len(errs) != 0 || compact(t, cfg) != `{"block_seconds":900,"burst":3,"tokens_per_second":1}` {
		t.Fatalf("set: %v %s", errs, compact(t, cfg))
	}
	if f := FormOf(out); f.Block != "900" {
		t.Fatalf("read back: %q", f.Block)
	}
	f.Block = ""
	out, _ = f.Apply(out)
	if cfg, _ := out.Get("algorithm_config"); compact(t, cfg) != `{"burst":3,"tokens_per_second":1}` {
		t.Fatalf("removed: %s", compact(t, cfg))
	}
	f.Block = "ten minutes"
	if _, errs := f.Apply(o); len(errs) != 1 || errs[0].Field != "block" {
		t.Fatalf("not a number: %v", errs)
	}
}
