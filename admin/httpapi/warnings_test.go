package httpapi

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// catchAllPolicy is valid, but its second rule never applies.
const catchAllPolicy = `{"rules":[{"name":"per-ip","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":2}},
	{"name":"per-key","limit_keys":["header:x-api-key"],"algorithm":"token_bucket","algorithm_config":{"rps":5,"burst":10}}]}`

func TestValidateReturnsWarningsForAValidPolicy(t *testing.T) {
	e := newEnv(t, nil)
	resp, body := e.apiJSON(t, "POST", "/api/v1/policy/validate", `{"policy":`+catchAllPolicy+`}`)
	ws, _ := body["warnings"].([]any)
	if resp.StatusCode != 200 || body["valid"] != true || len(ws) != 1 {
		t.Fatalf("validate: %d %v", resp.StatusCode, body)
	}
	if w := ws[0].(map[string]any); w["rule"] != "per-key" || !strings.HasPrefix(w["message"].(string), `never applies: rule "per-ip" before it`) {
		t.Errorf("warning %v", w)
	}
	_, body = e.apiJSON(t, "POST", "/api/v1/policy/validate", `{"policy":`+tiersPolicy+`}`)
	if ws, ok := body["warnings"].([]any); !ok || len(ws) != 0 {
		t.Errorf("the tiers policy: warnings %v, want an empty list", body["warnings"])
	}
}

func TestThePolicyPageWarnsAboutTheCurrentVersion(t *testing.T) {
	e := newEnv(t, nil)
	c := login(t, e, "alice")
	tok := csrfOf(t, get(t, c, e.srv.URL+"/"))
	resp, _ := post(t, c, e.srv.URL+"/policy", url.Values{"csrf": {tok}, "base_version": {"1"}, "policy": {catchAllPolicy}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("a policy with a warning is saved: %d", resp.StatusCode)
	}
	home := get(t, c, e.srv.URL+"/?saved=2")
	if !strings.Contains(home, "Saved v2") || !strings.Contains(home, `v2, rule &#34;per-key&#34;: never applies: rule &#34;per-ip&#34; before it`) {
		t.Errorf("the page does not warn about the saved version")
	}
}

func TestTheStructuredEditorWarnsWhenAMoveMakesARuleUnreachable(t *testing.T) {
	e := newEnv(t, nil)
	c := login(t, e, "alice")
	tok := csrfOf(t, get(t, c, e.srv.URL+"/"))
	draft := `{"rules":[{"name":"per-key","limit_keys":["header:x-api-key"],"algorithm":"token_bucket","algorithm_config":{"rps":5,"burst":10}},
		{"name":"per-ip","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":2}}]}`
	op := func(draft, op string) string {
		resp, body := post(t, c, e.srv.URL+"/policy/rules", url.Values{"csrf": {tok}, "base_version": {"1"}, "policy": {draft}, "op": {op}})
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d", op, resp.StatusCode)
		}
		return body
	}
	if body := op(draft, "down:0:0"); !strings.Contains(body, `The draft&#39;s rule &#34;per-key&#34;: never applies`) {
		t.Errorf("moving the catch-all first gives no warning")
	} else if body := op(draftOf(t, body), "down:0:0"); strings.Contains(body, "never applies") {
		t.Errorf("moving it back still warns")
	}
}
