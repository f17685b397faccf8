package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"unicode/utf8"
)

func loadSchema(t *testing.T) map[string]any {
	t.Helper()
	var s map[string]any
	if err := json.Unmarshal(JSONSchema(), &s); err != nil {
		t.Fatalf("the schema is not valid JSON: %v", err)
	}
	return s
}

func TestSchemaIsDraft202012(t *testing.T) {
	s := loadSchema(t)
	if s["$schema"] != "https://json-schema.org/draft/2020-12/schema" || s["$id"] != SchemaID {
		t.Errorf("$schema %v $id %v", s["$schema"], s["$id"])
	}
	if !bytes.Equal(JSONSchema(), JSONSchema()) {
		t.Error("the schema is not deterministic")
	}
	// Every pattern compiles (RE2 accepts the ECMA-262 subset we use).
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if p, ok := x["pattern"].(string); ok {
				if _, err := regexp.Compile(p); err != nil {
					t.Errorf("pattern %q: %v", p, err)
				}
			}
			for _, c := range x {
				walk(c)
			}
		case []any:
			for _, c := range x {
				walk(c)
			}
		}
	}
	walk(s)
}

// TestSchemaMatchesParserFields fails when a field is added to the parser
// but not to the schema, or the reverse.
func TestSchemaMatchesParserFields(t *testing.T) {
	s := loadSchema(t)
	defs := s["$defs"].(map[string]any)
	for name, fields := range schemaObjects() {
		var def map[string]any
		if name == "config" {
			def = s
		} else {
			def = defs[name].(map[string]any)
		}
		var got []string
		for k := range def["properties"].(map[string]any) {
			got = append(got, k)
		}
		want := slices.Clone(fields)
		sort.Strings(got)
		sort.Strings(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s: schema properties %v, parser fields %v", name, got, want)
		}
		if def["additionalProperties"] != false {
			t.Errorf("%s: the schema must be closed like the parser (additionalProperties false)", name)
		}
	}
	if !slices.Equal(defs["rule"].(map[string]any)["properties"].(map[string]any)["algorithm"].(map[string]any)["enum"].([]any)[0:1], []any{AlgorithmTokenBucket}) {
		t.Error("algorithm enum differs from the parser's algorithms")
	}
}

// TestDocsExamplesValidateAgainstSchema: every complete configuration of
// docs/configuration.md is valid under the schema.
func TestDocsExamplesValidateAgainstSchema(t *testing.T) {
	v := newValidator(t)
	n := 0
	for _, b := range docBlocks(t) {
		if b.lang != "json" || b.marker == "fragment" || b.marker == "invalid" {
			continue
		}
		if _, err := Parse([]byte(b.body)); err != nil {
			continue
		}
		n++
		if errs := v.validate([]byte(b.body)); len(errs) > 0 {
			t.Errorf("docs line %d: valid configuration refused by the schema: %v", b.line, errs)
		}
	}
	if n < 6 {
		t.Errorf("only %d examples checked", n)
	}
}

func TestSchemaAcceptsWhatParseAccepts(t *testing.T) {
	v := newValidator(t)
	for _, in := range []string{
		top(`"mode":"shadow","reject_status":503,"response_headers":false,"shadow_header":"X-Would","xff_trusted_hops":10`),
		top(`"reject_grpc_status":"unavailable"`),
		withTB(`{"tokens_per_second":0.5,"burst":1,"cost_source":"header:X-Weight","fixed_cost":1,"default_cost":0.5}`),
		withTB(`{"rps":1e3,"burst":1e12,"cost_source":"query:w"}`),
		withAlg("fixed_window", `{"limit":10,"window_seconds":60,"cost_source":"header:x-c","default_cost":2}`),
		withAlg("sliding_window", `{"limit":0.5,"window_seconds":1,"fixed_cost":0.5}`),
		withAlg("rolling_window", `{"limit":10000,"window_seconds":86400,"period_seconds":3600,"max_per_period":1000}`),
		withMatch(`{"path_prefix":"/a","path":"/a/b","header:X-Tier":"gold","jwt:plan":"x","query:v":"1","method":"GET","host":"h","ip:address":"1.2.3.4"}`),
		`{"rules":[{"name":"a.b-c_D","limit_keys":["ip:address","header:x","query:q","jwt:sub","path","method","host"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":1},"mode":"shadow"}]}`,
		`{"telemetry":{"cluster":"c","token_env":"_` + strings.Repeat("X", MaxEnvNameLen-1) + `"},"rules":[{"name":"r","limit_keys":["path"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":1}}]}`,
		`{"telemetry":{"cluster":"c","token":"t"},"rules":[{"name":"r","limit_keys":["path"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":1}}]}`,
		withMatch(`{"path":{"regex":"^/u/[0-9]+$"},"ip:address":{"cidr":["10.0.0.0/8"]},"jwt:plan":{"in":["a","b"]},"header:x":{"present":false},"host":{"not":{"suffix":".x"}},"method":{"exact":"GET"},"query:q":{"prefix":"1"}}`),
		rules(`{"name":"h","action":"exempt","match":{"path":"/healthz"}}`, `{"name":"d","action":"deny","deny_status":451,"limit_keys":["path"]}`, baseRule),
		overrideRule(`["path"]`, `[{"key":"/a","algorithm_config":{"burst":30}},{"key":"/b","algorithm_config":{"rps":1,"burst":2}}]`),
		withAlg("rolling_window", `{"limit":100,"window_seconds":60,"period_seconds":10},"overrides":[{"key":"1.2.3.4","algorithm_config":{"limit":50,"max_per_period":10}}]`),
	} {
		if _, err := Parse([]byte(in)); err != nil {
			t.Fatalf("test input does not parse: %v\n%s", err, in)
		}
		if errs := v.validate([]byte(in)); len(errs) > 0 {
			t.Errorf("schema refuses a valid configuration: %v\n%s", errs, in)
		}
	}
}

func TestSchemaRefusesInvalid(t *testing.T) {
	v := newValidator(t)
	for _, in := range []string{
		`{}`,
		`{"rules":[],"mode":"enforce"}`,
		top(`"mode":"audit"`),
		top(`"reject_status":600`),
		top(`"reject_status":429.5`),
		top(`"reject_grpc_status":"ok"`),
		top(`"reject_grpc_status":8`),
		top(`"xff_trusted_hops":11`),
		top(`"shadow_header":":path"`),
		top(`"extra":1`),
		`{"rules":[` + baseRule + `],"policies":[{"name":"p","rules":[` + baseRule + `]}]}`,
		`{"policies":[{"name":"bad name","rules":[` + baseRule + `]}]}`,
		`{"policies":[{"name":"p"}]}`,
		withTB(`{"rps":"5","burst":10}`),
		withTB(`{"rps":0,"burst":10}`),
		withTB(`{"rps":5}`),
		withTB(`{"rps":5,"tokens_per_second":5,"burst":10}`),
		withTB(`{"burst":10}`),
		withTB(`{"rps":5,"burst":10,"bursts":1}`),
		withTB(`{"rps":5,"burst":10,"cost_source":"cookie:x"}`),
		withTB(`{"rps":5,"burst":10,"fixed_cost":0}`),
		withTB(`{"rps":5,"burst":2e12}`),
		withAlg("fixed_window", `{"rps":5,"burst":10}`),
		withAlg("token_bucket", `{"limit":10,"window_seconds":60}`),
		withAlg("sliding_window", `{"limit":10,"window_seconds":60,"period_seconds":10}`),
		withAlg("rolling_window", `{"limit":10,"window_seconds":60}`),
		withAlg("fixed_window", `{"limit":10,"window_seconds":1.5}`),
		withAlg("fixed_window", `{"limit":0,"window_seconds":60}`),
		withMatch(`{"jwt:plan":1}`),
		withMatch(`{"form:x":"1"}`),
		withMatch(`{"path":""}`),
		withMatch(`{"path":{"prefix":"/a","suffix":"b"}}`),
		withMatch(`{"path":{"prefx":"/a"}}`),
		withMatch(`{"path":{}}`),
		withMatch(`{"jwt:plan":{"in":[]}}`),
		withMatch(`{"header:x":{"present":"yes"}}`),
		withMatch(`{"path_prefix":{"prefix":"/a"}}`),
		ruleWith(`"name":"x","action":"exempt","algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":1}`),
		ruleWith(`"name":"x","action":"exempt","deny_status":403`),
		ruleWith(`"name":"x","action":"block"`),
		ruleWith(`"name":"x","action":"limit"`),
		ruleWith(`"name":"x","action":"deny","deny_status":700`),
		ruleWith(`"name":"x","action":"exempt","reject_body":"no"`),
		ruleWith(`"name":"x","action":"deny","reject_content_type":"text/plain"`),
		ruleWith(`"name":"x","action":"deny","reject_body":"no","reject_content_type":"text"`),
		ruleWith(`"name":"x","action":"deny","reject_body":"no","reject_content_type":"text/plain\n"`),
		ruleWith(`"name":"x","action":"deny","reject_body":7`),
		ruleWith(`"name":"x","action":"deny","reject_body":"` + strings.Repeat("x", MaxRejectBody+1) + `"`),
		`{"reject_content_type":"text/plain","rules":[{"name":"r","limit_keys":["path"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":1}}]}`,
		overrideRule(`["path"]`, `[{"key":"a","algorithm_config":{}}]`),
		overrideRule(`["path"]`, `[{"key":"a","algorithm_config":{"cost_source":"fixed"}}]`),
		overrideRule(`["path"]`, `[{"algorithm_config":{"burst":30}}]`),
		`{"rules":[{"name":"r","limit_keys":["Header:x"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":1}}]}`,
		`{"rules":[{"name":"r","limit_keys":[],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":1}}]}`,
		`{"rules":[{"name":"r","limit_keys":["path","path"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":1}}]}`,
		`{"rules":[{"name":"r","limit_keys":["path"],"algorithm":"leaky_bucket","algorithm_config":{"rps":1,"burst":1}}]}`,
		`{"rules":[{"name":"r","limit_keys":["path"],"algorithm":"token_bucket"}]}`,
		`{"rules":[{"name":"` + strings.Repeat("n", 65) + `","limit_keys":["path"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":1}}]}`,
		`{"telemetry":{"cluster":"c","token":"t","token_env":"T"},"rules":[{"name":"r","limit_keys":["path"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":1}}]}`,
		`{"telemetry":{"cluster":"c"},"rules":[{"name":"r","limit_keys":["path"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":1}}]}`,
		`{"telemetry":{"cluster":"c","token_env":"1X"},"rules":[{"name":"r","limit_keys":["path"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":1}}]}`,
		`{"telemetry":{"cluster":"c","token_env":"` + strings.Repeat("X", MaxEnvNameLen+1) + `"},"rules":[{"name":"r","limit_keys":["path"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":1}}]}`,
	} {
		if _, err := Parse([]byte(in)); err == nil {
			t.Fatalf("test input parses: %s", in)
		}
		if errs := v.validate([]byte(in)); len(errs) == 0 {
			t.Errorf("schema accepts an invalid configuration:\n%s", in)
		}
	}
}

// validator is a small JSON Schema (2020-12) validator for the keywords
// JSONSchema uses; it fails the test on any keyword it does not know, so the
// schema cannot grow past what is checked here.
type validator struct {
	t    *testing.T
	root map[string]any
}

func newValidator(t *testing.T) *validator { return &validator{t: t, root: loadSchema(t)} }

func (v *validator) validate(doc []byte) []string {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var inst any
	if err := dec.Decode(&inst); err != nil {
		return []string{err.Error()}
	}
	return v.check(v.root, inst, "")
}

var knownKeywords = map[string]bool{
	"$schema": true, "$id": true, "$defs": true, "title": true, "description": true, "default": true, "examples": true,
	"$ref": true, "type": true, "enum": true, "properties": true, "additionalProperties": true, "required": true,
	"oneOf": true, "propertyNames": true, "pattern": true, "minLength": true, "minimum": true, "maximum": true,
	"exclusiveMinimum": true, "minItems": true, "maxItems": true, "uniqueItems": true, "items": true,
	"minProperties": true, "maxProperties": true, "not": true, "maxLength": true, "dependentRequired": true,
}

func (v *validator) check(s map[string]any, inst any, path string) []string {
	var errs []string
	fail := func(f string, args ...any) { errs = append(errs, path+": "+fmt.Sprintf(f, args...)) }
	for k := range s {
		if !knownKeywords[k] {
			v.t.Fatalf("schema keyword %q is not checked by the test validator", k)
		}
	}
	if ref, ok := s["$ref"].(string); ok {
		name := strings.TrimPrefix(ref, "#/$defs/")
		def, ok := v.root["$defs"].(map[string]any)[name].(map[string]any)
		if !ok {
			v.t.Fatalf("dangling $ref %q", ref)
		}
		errs = append(errs, v.check(def, inst, path)...)
	}
	num := func(x any) (float64, bool) {
		n, ok := x.(json.Number)
		if !ok {
			return 0, false
		}
		f, err := n.Float64()
		return f, err == nil
	}
	if typ, ok := s["type"].(string); ok {
		good := false
		switch typ {
		case "object":
			_, good = inst.(map[string]any)
		case "array":
			_, good = inst.([]any)
		case "string":
			_, good = inst.(string)
		case "boolean":
			_, good = inst.(bool)
		case "number":
			_, good = num(inst)
		case "integer":
			f, ok := num(inst)
			good = ok && f == math.Trunc(f)
		default:
			v.t.Fatalf("unknown type %q", typ)
		}
		if !good {
			fail("not of type %s", typ)
			return errs
		}
	}
	if enum, ok := s["enum"].([]any); ok && !slices.Contains(enum, inst) {
		fail("%v not in %v", inst, enum)
	}
	if f, ok := num(inst); ok {
		if m, ok := s["minimum"].(float64); ok && f < m {
			fail("%v < minimum %v", f, m)
		}
		if m, ok := s["maximum"].(float64); ok && f > m {
			fail("%v > maximum %v", f, m)
		}
		if m, ok := s["exclusiveMinimum"].(float64); ok && f <= m {
			fail("%v <= exclusiveMinimum %v", f, m)
		}
	}
	if str, ok := inst.(string); ok {
		if p, ok := s["pattern"].(string); ok && !regexp.MustCompile(p).MatchString(str) {
			fail("%q does not match %s", str, p)
		}
		if m, ok := s["minLength"].(float64); ok && float64(utf8.RuneCountInString(str)) < m {
			fail("%q shorter than %v", str, m)
		}
		if m, ok := s["maxLength"].(float64); ok && float64(utf8.RuneCountInString(str)) > m {
			fail("%.20q... longer than %v", str, m)
		}
	}
	if arr, ok := inst.([]any); ok {
		if m, ok := s["minItems"].(float64); ok && float64(len(arr)) < m {
			fail("fewer than %v items", m)
		}
		if m, ok := s["maxItems"].(float64); ok && float64(len(arr)) > m {
			fail("more than %v items", m)
		}
		if s["uniqueItems"] == true {
			seen := map[string]bool{}
			for _, it := range arr {
				k := fmt.Sprint(it)
				if seen[k] {
					fail("duplicate item %v", it)
				}
				seen[k] = true
			}
		}
		if items, ok := s["items"].(map[string]any); ok {
			for i, it := range arr {
				errs = append(errs, v.check(items, it, fmt.Sprintf("%s[%d]", path, i))...)
			}
		}
	}
	if o, ok := inst.(map[string]any); ok {
		props, _ := s["properties"].(map[string]any)
		for _, r := range asList(s["required"]) {
			if _, ok := o[r.(string)]; !ok {
				fail("missing required %q", r)
			}
		}
		deps, _ := s["dependentRequired"].(map[string]any)
		for k, need := range deps {
			if _, ok := o[k]; !ok {
				continue
			}
			for _, r := range asList(need) {
				if _, ok := o[r.(string)]; !ok {
					fail("%q needs %q", k, r)
				}
			}
		}
		for k, val := range o {
			if ps, ok := props[k].(map[string]any); ok {
				errs = append(errs, v.check(ps, val, path+"."+k)...)
				continue
			}
			switch ap := s["additionalProperties"].(type) {
			case bool:
				if !ap {
					fail("unknown property %q", k)
				}
			case map[string]any:
				errs = append(errs, v.check(ap, val, path+"."+k)...)
			}
			if pn, ok := s["propertyNames"].(map[string]any); ok {
				errs = append(errs, v.check(pn, k, path+"."+k)...)
			}
		}
	}
	if o, ok := inst.(map[string]any); ok {
		if m, ok := s["minProperties"].(float64); ok && float64(len(o)) < m {
			fail("fewer than %v properties", m)
		}
		if m, ok := s["maxProperties"].(float64); ok && float64(len(o)) > m {
			fail("more than %v properties", m)
		}
	}
	if not, ok := s["not"].(map[string]any); ok && len(v.check(not, inst, path)) == 0 {
		fail("matches a schema it must not match")
	}
	if one, ok := s["oneOf"].([]any); ok {
		matched := 0
		for _, sub := range one {
			if len(v.check(sub.(map[string]any), inst, path)) == 0 {
				matched++
			}
		}
		if matched != 1 {
			fail("matches %d of the oneOf alternatives, want exactly 1", matched)
		}
	}
	return errs
}

func asList(x any) []any {
	l, _ := x.([]any)
	return l
}
