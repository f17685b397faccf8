package policy

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestShadowMarkFalseLeavesTheRuleUnmarkedAndRoundTrips(t *testing.T) {
	cfg, err := Parse([]byte(rules(
		`{"name":"quiet","mode":"shadow","shadow_mark":false,"limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":1}}`,
		`{"name":"loud","mode":"shadow","shadow_mark":true,"limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":1}}`,
		`{"name":"plain","mode":"shadow","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":1}}`)))
	if err != nil {
		t.Fatal(err)
	}
	rs := cfg.Policies[0].Rules
	if !rs[0].Unmarked || rs[1].Unmarked || rs[2].Unmarked {
		t.Fatalf("Unmarked: quiet %v, loud %v, plain %v; want true, false, false", rs[0].Unmarked, rs[1].Unmarked, rs[2].Unmarked)
	}
	out, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(out), `"shadow_mark":false`); n != 1 || strings.Contains(string(out), `"shadow_mark":true`) {
		t.Fatalf("normalized form should write shadow_mark only for the unmarked rule, got %s", out)
	}
	back, err := Parse(out)
	if err != nil {
		t.Fatalf("normalized %s: %v", out, err)
	}
	if !back.Policies[0].Rules[0].Unmarked || back.Policies[0].Rules[1].Unmarked {
		t.Fatalf("round trip lost shadow_mark: %s", out)
	}
}

func TestShadowMarkMustBeABoolean(t *testing.T) {
	for _, v := range []string{`"false"`, `0`, `null`, `{}`} {
		_, err := Parse([]byte(ruleWith(`"name":"r","mode":"shadow","shadow_mark":` + v + `,"limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":1}`)))
		es, ok := err.(Errors)
		if !ok || len(es) != 1 || es[0].Path != "rules[0].shadow_mark" || !strings.Contains(es[0].Message, "must be true") {
			t.Errorf("shadow_mark %s: got %v, want one error at rules[0].shadow_mark", v, err)
		}
	}
}
