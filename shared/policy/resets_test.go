package policy

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

// resetRules are rules a reset may or may not name.
const resetRules = `"policies":[{"name":"p","rules":[
  {"name":"per-key","limit_keys":["header:x-api-key","method"],"algorithm":"token_bucket","algorithm_config":{"tokens_per_second":1,"burst":5}},
  {"name":"daily","limit_keys":["header:x-api-key"],"algorithm":"quota","algorithm_config":{"limit":100,"period":"day"}},
  {"name":"in-flight","limit_keys":["header:x-api-key"],"algorithm":"concurrency","algorithm_config":{"limit":3}},
  {"name":"fleet","limit_keys":["header:x-api-key"],"algorithm":"token_bucket","scope":"global","algorithm_config":{"tokens_per_second":1,"burst":5}},
  {"name":"office","limit_keys":["ip:address"],"action":"exempt"},
  {"name":"exact","limit_keys":["header:x-api-key"],"algorithm":"token_bucket","max_keys":0,"algorithm_config":{"tokens_per_second":1,"burst":5}}]}],
  "fleet":{"cluster":"rls"}`

func TestResetsAreParsedAndNormalized(t *testing.T) {
	doc := `{` + resetRules + `,"resets":[{"id":"a1","rule":"per-key","key":"acme\\|x|GET"},{"id":"b.2","rule":"daily","key":"acme"},{"id":"c","rule":"fleet","key":"acme"}]}`
	c, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	want := []Reset{{ID: "a1", Rule: "per-key", Key: `acme\|x|GET`}, {ID: "b.2", Rule: "daily", Key: "acme"}}
	if len(c.Resets) != 3 || c.Resets[0] != want[0] || c.Resets[1] != want[1] || c.Resets[2].Rule != "fleet" {
		t.Fatalf("resets = %+v, want %+v", c.Resets, want)
	}
	norm, err := c.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var back struct{ Resets []map[string]string }
	if err := json.Unmarshal(norm, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Resets) != 3 || back.Resets[1]["id"] != "b.2" || back.Resets[0]["key"] != `acme\|x|GET` {
		t.Fatalf("normalized resets = %v", back.Resets)
	}
}

// "all": true resets every identity of a rule of bounded storage, local
// or global; its normalized form has no key.
func TestAResetOfEveryIdentityOfARule(t *testing.T) {
	doc := `{` + resetRules + `,"resets":[{"id":"a","rule":"daily","all":true},{"id":"b","rule":"fleet","all":true},{"id":"c","rule":"exact","key":"k"}]}`
	c, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Resets) != 3 || !c.Resets[0].All || c.Resets[0].Key != "" || !c.Resets[1].All || c.Resets[2].All {
		t.Fatalf("resets = %+v", c.Resets)
	}
	norm, _ := c.MarshalJSON()
	if !strings.Contains(string(norm), `{"id":"a","rule":"daily","all":true}`) || !strings.Contains(string(norm), `{"id":"c","rule":"exact","key":"k"}`) {
		t.Fatalf("normalized: %s", norm)
	}
	if _, err := Parse(norm); err != nil {
		t.Fatalf("the normalized form does not parse: %v", err)
	}
}

func TestAConfigurationWithoutResetsNormalizesWithoutThem(t *testing.T) {
	c, err := Parse([]byte(`{` + resetRules + `}`))
	if err != nil {
		t.Fatal(err)
	}
	norm, _ := c.MarshalJSON()
	if strings.Contains(string(norm), "resets") {
		t.Fatalf("normalized form mentions resets: %s", norm)
	}
}

func TestResetErrorsNameTheField(t *testing.T) {
	many := make([]string, MaxResets+1)
	for i := range many {
		many[i] = `{"id":"r` + strconv.Itoa(i) + `","rule":"daily","key":"k"}`
	}
	cases := []struct{ resets, path, msg string }{
		{`{}`, "resets", "must be an array"},
		{`["x"]`, "resets[0]", "must be an object"},
		{`[{"rule":"daily","key":"k"}]`, "resets[0].id", "missing"},
		{`[{"id":"a b","rule":"daily","key":"k"}]`, "resets[0].id", "contains"},
		{`[{"id":"","rule":"daily","key":"k"}]`, "resets[0].id", "is empty; a reset id is"},
		{`[{"id":"a","rule":"daily","key":"k"},{"id":"a","rule":"daily","key":"j"}]`, "resets[1].id", "also the id of resets[0]"},
		{`[{"id":"a","key":"k"}]`, "resets[0].rule", "missing"},
		{`[{"id":"a","rule":"daily"}]`, "resets[0].key", "missing"},
		{`[{"id":"a","rule":"daily","key":7}]`, "resets[0].key", "must be a string"},
		{`[{"id":"a","rule":"nope","key":"k"}]`, "resets[0].rule", "not a rule of this configuration"},
		{`[{"id":"a","rule":"in-flight","key":"k"}]`, "resets[0].rule", "requests in flight"},
		{`[{"id":"a","rule":"office","key":"10.0.0.1"}]`, "resets[0].rule", `"action": "exempt"`},
		{`[{"id":"a","rule":"per-key","key":"acme"}]`, "resets[0].key", "has 1 values joined by |, but the rule has 2"},
		{`[{"id":"a","rule":"daily","key":""}]`, "resets[0].key", "is empty"},
		{`[{"id":"a","rule":"daily","key":"k","when":1}]`, "resets[0].when", "unknown"},
		{`[{"id":"a","rule":"daily","all":false}]`, "resets[0].all", "must be true (every identity of the rule starts over) or left out, got false"},
		{`[{"id":"a","rule":"daily","all":"yes"}]`, "resets[0].all", "must be true"},
		{`[{"id":"a","rule":"daily","all":true,"key":"k"}]`, "resets[0].key", `must be left out with "all": true`},
		{`[{"id":"a","rule":"exact","all":true}]`, "resets[0].all", `keeps exact storage ("max_keys": 0)`},
		{`[{"id":"a","rule":"in-flight","all":true}]`, "resets[0].rule", "requests in flight"},
		{`[` + strings.Join(many, ",") + `]`, "resets", "at most 256"},
	}
	for _, c := range cases {
		wantError(t, `{`+resetRules+`,"resets":`+c.resets+`}`, c.path, c.msg)
	}
}
