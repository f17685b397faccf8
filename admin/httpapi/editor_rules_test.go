package httpapi

import (
	"context"
	"net/http"
	"net/url"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/admin/policyedit"
	"github.com/sluice-rl/sluice/shared/policy"
)

var draftRe = regexp.MustCompile(`(?s)<textarea id="policy" name="policy"[^>]*>(.*?)</textarea>`)

func draftOf(t *testing.T, body string) string {
	t.Helper()
	m := draftRe.FindStringSubmatch(body)
	if m == nil {
		t.Fatal("no draft on the page")
	}
	r := strings.NewReplacer("&#34;", `"`, "&amp;", "&", "&lt;", "<", "&gt;", ">", "&#39;", "'")
	return r.Replace(m[1])
}

func TestStructuredEditorRaisesATierAndSaves(t *testing.T) {
	e := newEnv(t, nil)
	c := login(t, e, "alice")
	// Start from the tiers policy, saved through the JSON form.
	tok := csrfOf(t, get(t, c, e.srv.URL+"/"))
	if resp, _ := post(t, c, e.srv.URL+"/policy", url.Values{"csrf": {tok}, "base_version": {"1"}, "policy": {tiersPolicy}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("save: %d", resp.StatusCode)
	}
	home := get(t, c, e.srv.URL+"/")
	if !strings.Contains(home, "10/s, burst 20, per header:x-api-key") || !strings.Contains(home, "header:x-plan is premium") {
		t.Fatalf("the list does not describe the premium tier in words")
	}
	form := url.Values{"csrf": {tok}, "base_version": {"2"}, "policy": {draftOf(t, home)}, "op": {"edit:0:0"}}
	resp, body := post(t, c, e.srv.URL+"/policy/rules", form)
	if resp.StatusCode != 200 || !strings.Contains(body, `id="rf_rate" name="rf_rate" value="10"`) {
		t.Fatalf("edit: %d, no rate field with 10", resp.StatusCode)
	}
	// An invalid burst: the filter's parser's error next to the burst field, the draft unchanged.
	apply := url.Values{"csrf": {tok}, "base_version": {"2"}, "policy": {draftOf(t, body)}, "op": {"apply:0:0"},
		"rf_name": {"premium"}, "rf_algorithm": {"token_bucket"}, "rf_rate": {"50"}, "rf_burst": {"20"},
		"rf_key_kind0": {"header"}, "rf_key_name0": {"x-api-key"}, "rf_match_src0": {"header:x-plan"}, "rf_match_val0": {"premium"}}
	resp, body = post(t, c, e.srv.URL+"/policy/rules", apply)
	if resp.StatusCode != http.StatusUnprocessableEntity || !regexp.MustCompile(`id="rf-err-burst"[^>]*>[^<]*below`).MatchString(body) {
		t.Fatalf("an invalid burst: %d, error not next to the burst field", resp.StatusCode)
	}
	if strings.Contains(draftOf(t, body), `"tokens_per_second": 50`) {
		t.Error("a refused rule changed the draft")
	}
	apply.Set("rf_burst", "100")
	resp, body = post(t, c, e.srv.URL+"/policy/rules", apply)
	if resp.StatusCode != 200 || !strings.Contains(body, "50/s, burst 100") {
		t.Fatalf("apply: %d", resp.StatusCode)
	}
	if cur, _ := e.svc.Current(context.Background()); cur.Number != 2 {
		t.Fatalf("applying saved v%d", cur.Number)
	}
	resp, _ = post(t, c, e.srv.URL+"/policy", url.Values{"csrf": {tok}, "base_version": {"2"}, "policy": {draftOf(t, body)}, "message": {"premium to 50/s"}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("save: %d", resp.StatusCode)
	}
	cur, _ := e.svc.Current(context.Background())
	if cur.Number != 3 || !strings.Contains(string(cur.JSON), `"tokens_per_second":50`) {
		t.Fatalf("saved v%d: %s", cur.Number, cur.JSON)
	}
}

func TestStructuredEditorReordersDuplicatesDeletes(t *testing.T) {
	e := newEnv(t, nil)
	c := login(t, e, "alice")
	tok := csrfOf(t, get(t, c, e.srv.URL+"/"))
	do := func(draft, op string) string {
		resp, body := post(t, c, e.srv.URL+"/policy/rules", url.Values{"csrf": {tok}, "base_version": {"1"}, "policy": {draft}, "op": {op}})
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d", op, resp.StatusCode)
		}
		return draftOf(t, body)
	}
	d := do(tiersPolicy, "down:0:0")
	if strings.Index(d, `"free"`) > strings.Index(d, `"premium"`) {
		t.Errorf("premium did not move below free:\n%s", d)
	}
	d = do(d, "duplicate:0:0")
	if !strings.Contains(d, `"free-copy"`) {
		t.Errorf("no copy:\n%s", d)
	}
	d = do(d, "delete:0:1")
	if strings.Contains(d, `"free-copy"`) {
		t.Errorf("the copy was not deleted:\n%s", d)
	}
	resp, _ := post(t, c, e.srv.URL+"/policy/rules", url.Values{"csrf": {tok}, "base_version": {"1"}, "policy": {d}, "op": {"delete:7:0"}})
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a rule that does not exist: %d", resp.StatusCode)
	}
}

// Exempt and deny rules are edited in the same form: their action and
// deny status are fields, and applying one keeps it free of limit keys and
// an algorithm (a browser sends those fields whatever the action). A limit
// rule turned into an exempt rule loses them.
func TestStructuredEditorEditsExemptAndDenyRules(t *testing.T) {
	e := newEnv(t, nil)
	c := login(t, e, "alice")
	tok := csrfOf(t, get(t, c, e.srv.URL+"/"))
	draft := `{"policies":[{"name":"gate","rules":[
	 {"name":"blocked","action":"deny","deny_status":451,"match":{"header:x-api-key":"stolen"}},
	 {"name":"health","action":"exempt","match":{"path":"/healthz"}},
	 {"name":"per-ip","limit_keys":["ip:address"],"algorithm":"quota","algorithm_config":{"limit":1000,"period":"day","time_zone":"Europe/Berlin"}}]}]}`
	resp, body := post(t, c, e.srv.URL+"/policy/rules", url.Values{"csrf": {tok}, "base_version": {"1"}, "policy": {draft}, "op": {"edit:0:0"}})
	if resp.StatusCode != 200 || !strings.Contains(body, `<option value="deny" selected`) || !strings.Contains(body, `name="rf_deny_status" value="451"`) {
		t.Fatalf("edit a deny rule: %d, the form does not show its action and status", resp.StatusCode)
	}
	for _, words := range []string{"denied with 451", "exempt: no rule limits it", "1000 per day (Europe/Berlin)"} {
		if !strings.Contains(body, words) {
			t.Errorf("the list does not say %q", words)
		}
	}
	hidden := url.Values{"rf_algorithm": {"token_bucket"}, "rf_rate": {"5"}, "rf_key_kind0": {"ip:address"}} // what a browser sends from hidden fields
	apply := func(draft, ref string, fields url.Values) (int, string) {
		t.Helper()
		return applyRuleForm(t, c, e, tok, draft, ref, hidden, fields)
	}
	status, body := apply(draft, "0:0", url.Values{"rf_name": {"blocked"}, "rf_action": {"deny"}, "rf_deny_status": {"403"},
		"rf_match_src0": {"header:x-api-key"}, "rf_match_val0": {"leaked"}})
	got := draftOf(t, body)
	if status != 200 || !strings.Contains(got, `"deny_status": 403`) || !strings.Contains(got, `"leaked"`) {
		t.Fatalf("apply the deny rule: %d\n%s", status, got)
	}
	if d := draftOf(t, body); strings.Contains(d[:strings.Index(d, `"health"`)], "algorithm") {
		t.Errorf("the deny rule took an algorithm from the form: %s", d)
	}
	status, body = apply(got, "0:2", url.Values{"rf_name": {"per-ip"}, "rf_action": {"exempt"}})
	got = draftOf(t, body)
	if status != 200 || strings.Contains(got, "quota") || strings.Contains(got, "limit_keys") {
		t.Fatalf("turn the quota rule into an exempt rule: %d\n%s", status, got)
	}
	status, body = apply(got, "0:0", url.Values{"rf_name": {"blocked"}, "rf_action": {"deny"}, "rf_deny_status": {"soon"}})
	if status != http.StatusUnprocessableEntity || !strings.Contains(body, `id="rf-err-deny_status"`) {
		t.Errorf("a deny status that is not a number: %d, no error next to the field", status)
	}
	status, body = apply(got, "0:0", url.Values{"rf_name": {"blocked"}, "rf_action": {"block"}})
	if status != http.StatusUnprocessableEntity || !strings.Contains(body, `id="rf-err-action"`) {
		t.Errorf("an unknown action: %d, no error next to the action", status)
	}
}

func TestStructuredEditorSetsARulesRejectionBody(t *testing.T) {
	e := newEnv(t, nil)
	c := login(t, e, "alice")
	tok := csrfOf(t, get(t, c, e.srv.URL+"/"))
	draft := `{"policies":[{"name":"p","rules":[
	 {"name":"api","limit_keys":["header:x-api-key"],"algorithm":"token_bucket","algorithm_config":{"rps":5,"burst":10},"reject_body":""},
	 {"name":"health","action":"exempt","match":{"path":"/healthz"}}]}]}`
	resp, body := post(t, c, e.srv.URL+"/policy/rules", url.Values{"csrf": {tok}, "base_version": {"1"}, "policy": {draft}, "op": {"edit:0:0"}})
	if resp.StatusCode != 200 || !strings.Contains(body, `name="rf_reject" value="1" checked`) {
		t.Fatalf("edit a rule with an empty reject_body: %d, its box is not ticked", resp.StatusCode)
	}
	apply := func(draft, ref string, fields url.Values) (int, string) {
		t.Helper()
		return applyRuleForm(t, c, e, tok, draft, ref, apiRuleForm, fields)
	}
	// A body typed in, with a browser's line ends, and its content type.
	status, body := apply(draft, "0:0", url.Values{"rf_reject_body": {"Too many requests.\r\nSee /limits"}, "rf_reject_content_type": {"text/plain"}})
	got := draftOf(t, body)
	if status != 200 || !strings.Contains(got, `"reject_body": "Too many requests.\nSee /limits"`) || !strings.Contains(got, `"reject_content_type": "text/plain"`) {
		t.Fatalf("set a rejection body: %d\n%s", status, got)
	}
	// Neither the box nor a body: the rule's own body goes.
	status, body = apply(got, "0:0", nil)
	if got = draftOf(t, body); status != 200 || strings.Contains(got, "reject_") {
		t.Fatalf("clear the rejection body: %d\n%s", status, got)
	}
	// A content type that is not one gets its error next to its field.
	status, body = apply(got, "0:0", url.Values{"rf_reject": {"1"}, "rf_reject_content_type": {"plain text"}})
	if status != http.StatusUnprocessableEntity || !strings.Contains(body, `id="rf-err-reject_content_type"`) {
		t.Errorf("a bad content type: %d, no error next to the field", status)
	}
}

func TestStructuredEditorSetsARulesRejectionHeaders(t *testing.T) {
	e := newEnv(t, nil)
	c := login(t, e, "alice")
	tok := csrfOf(t, get(t, c, e.srv.URL+"/"))
	draft := `{"reject_headers":{"x-local-rate-limit":"true"},"policies":[{"name":"p","rules":[
	 {"name":"api","limit_keys":["header:x-api-key"],"algorithm":"token_bucket","algorithm_config":{"rps":5,"burst":10},"reject_headers":{}}]}]}`
	resp, body := post(t, c, e.srv.URL+"/policy/rules", url.Values{"csrf": {tok}, "base_version": {"1"}, "policy": {draft}, "op": {"edit:0:0"}})
	if resp.StatusCode != 200 || !strings.Contains(body, `name="rf_own_headers" value="1" checked`) {
		t.Fatalf("edit a rule with an empty reject_headers: %d, its box is not ticked", resp.StatusCode)
	}
	apply := func(draft string, fields url.Values) (int, string) {
		t.Helper()
		return applyRuleForm(t, c, e, tok, draft, "0:0", apiRuleForm, fields)
	}
	// Lines typed in a browser, a value holding a colon, a blank line.
	status, body := apply(draft, url.Values{"rf_reject_headers": {"X-Limits-Doc: https://example.com/limits\r\n\r\nx-team:  payments "}})
	got := draftOf(t, body)
	cfg, err := policy.Parse([]byte(got))
	if status != 200 || err != nil {
		t.Fatalf("set rejection headers: %d %v\n%s", status, err, got)
	}
	want := []policy.RejectHeader{{Name: "x-limits-doc", Value: "https://example.com/limits"}, {Name: "x-team", Value: "payments"}}
	if r := cfg.RuleByName("api"); !reflect.DeepEqual(cfg.RejectHeadersOf(r), want) {
		t.Fatalf("reject headers %+v, want %+v\n%s", cfg.RejectHeadersOf(r), want, got)
	}
	// The form shows them as lines again.
	resp, body = post(t, c, e.srv.URL+"/policy/rules", url.Values{"csrf": {tok}, "base_version": {"1"}, "policy": {got}, "op": {"edit:0:0"}})
	if resp.StatusCode != 200 || !strings.Contains(body, "X-Limits-Doc: https://example.com/limits\nx-team: payments\n</textarea>") {
		t.Errorf("the form does not show the headers as lines: %d", resp.StatusCode)
	}
	// Neither the box nor a line: the rule takes the configuration's again.
	status, body = apply(got, nil)
	if got = draftOf(t, body); status != 200 || strings.Count(got, "reject_headers") != 1 {
		t.Fatalf("clear the rule's headers: %d\n%s", status, got)
	}
	// A line without a colon, and a header the filter sends itself, get
	// their errors next to the field.
	for _, lines := range []string{"x-local-rate-limit true", "retry-after: 5"} {
		status, body = apply(got, url.Values{"rf_reject_headers": {lines}})
		if status != http.StatusUnprocessableEntity || !strings.Contains(body, `id="rf-err-reject_headers"`) {
			t.Errorf("%q: %d, no error next to the field", lines, status)
		}
	}
}

func TestStructuredEditorSetsALimitRulesRejectionStatus(t *testing.T) {
	e := newEnv(t, nil)
	c := login(t, e, "alice")
	tok := csrfOf(t, get(t, c, e.srv.URL+"/"))
	draft := `{"reject_status":503,"policies":[{"name":"p","rules":[
	 {"name":"api","limit_keys":["header:x-api-key"],"algorithm":"token_bucket","algorithm_config":{"rps":5,"burst":10},"limit_headers":{"remaining":"x-left"}}]}]}`
	apply := func(draft string, fields url.Values) (int, string) {
		t.Helper()
		return applyRuleForm(t, c, e, tok, draft, "0:0", apiRuleForm, fields)
	}
	// The form shows the rule's own fields, as a browser posts them back.
	resp, page := post(t, c, e.srv.URL+"/policy/rules", url.Values{"csrf": {tok}, "base_version": {"1"}, "policy": {draft}, "op": {"edit:0:0"}})
	if resp.StatusCode != 200 || !strings.Contains(page, `name="rf_own_remaining" value="x-left"`) {
		t.Fatalf("edit a rule with limit_headers: %d, its remaining field is not shown", resp.StatusCode)
	}
	status, body := apply(draft, url.Values{"rf_reject_status": {" 420 "}, "rf_own_remaining": {"x-left"}, "rf_own_limit": {" X-Limit-Minute "}})
	got := draftOf(t, body)
	cfg, err := policy.Parse([]byte(got))
	if status != 200 || err != nil || cfg.RejectStatusOf(cfg.RuleByName("api")) != 420 {
		t.Fatalf("set the rule's status: %d %v\n%s", status, err, got)
	}
	if l := cfg.RuleByName("api").LimitHeaders; l == nil || *l != (policy.LimitHeaders{Limit: "x-limit-minute", Remaining: "x-left"}) {
		t.Fatalf("the rule's own fields: %+v\n%s", l, got)
	}
	if !strings.Contains(body, "rejected with 420") {
		t.Errorf("the rule list does not say the rule's own status")
	}
	// A deny rule has deny_status, not the limit rule's status.
	status, body = apply(got, url.Values{"rf_action": {"deny"}, "rf_reject_status": {"420"}, "rf_own_remaining": {"x-left"}})
	if got = draftOf(t, body); status != 200 || strings.Count(got, "reject_status") != 1 || strings.Contains(got, "limit_headers") {
		t.Fatalf("made a deny rule: %d, its reject_status or limit_headers is kept\n%s", status, got)
	}
	for _, bad := range []string{"abc", "302"} {
		status, body = apply(draft, url.Values{"rf_reject_status": {bad}})
		if status != http.StatusUnprocessableEntity || !strings.Contains(body, `id="rf-err-reject_status"`) {
			t.Errorf("%q: %d, no error next to the field", bad, status)
		}
	}
	// A field name the filter writes itself gets its error next to the
	// own fields; none at all removes limit_headers.
	status, body = apply(draft, url.Values{"rf_own_remaining": {"ratelimit"}})
	if status != http.StatusUnprocessableEntity || !strings.Contains(body, `id="rf-err-limit_headers"`) {
		t.Errorf("own field ratelimit: %d, no error next to the field", status)
	}
	status, body = apply(draft, nil)
	if got = draftOf(t, body); status != 200 || strings.Contains(got, "limit_headers") {
		t.Errorf("no own fields: %d, limit_headers kept\n%s", status, got)
	}
}

func TestStructuredEditorKeysARuleByTheClientCertificateAndRoute(t *testing.T) {
	e := newEnv(t, nil)
	c := login(t, e, "alice")
	tok := csrfOf(t, get(t, c, e.srv.URL+"/"))
	draft := `{"policies":[{"name":"mesh","rules":[{"name":"per-ip","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":5,"burst":10}}]}]}`
	resp, body := post(t, c, e.srv.URL+"/policy/rules", url.Values{"csrf": {tok}, "base_version": {"1"}, "policy": {draft}, "op": {"apply:0:0"},
		"rf_name": {"per-workload"}, "rf_algorithm": {"token_bucket"}, "rf_rate": {"5"}, "rf_burst": {"10"},
		"rf_key_kind0": {"peer:principal"}, "rf_key_name0": {""}, "rf_key_kind1": {"route"}, "rf_key_name1": {""},
		"rf_match_src0": {"peer:principal"}, "rf_match_val0": {"spiffe://cluster.local/ns/shop/sa/web"}})
	got := draftOf(t, body)
	cfg, err := policy.Parse([]byte(got))
	if resp.StatusCode != 200 || err != nil {
		t.Fatalf("apply: %d %v\n%s", resp.StatusCode, err, got)
	}
	if r := cfg.RuleByName("per-workload"); len(r.Keys) != 2 || r.Keys[0].Kind != policy.SourcePeer || r.Keys[1].Kind != policy.SourceRoute || len(r.Match) != 1 || r.Match[0].Source.Kind != policy.SourcePeer {
		t.Errorf("the rule's keys %v, match %v", r.Keys, r.Match)
	}
	if !strings.Contains(body, "per peer:principal + route") || !strings.Contains(body, "peer:principal is spiffe://cluster.local/ns/shop/sa/web") {
		t.Errorf("the list does not describe the rule in words")
	}
	resp, body = post(t, c, e.srv.URL+"/policy/rules", url.Values{"csrf": {tok}, "base_version": {"1"}, "policy": {got}, "op": {"edit:0:0"}})
	if resp.StatusCode != 200 || !strings.Contains(body, `<option value="peer:principal" selected`) || !strings.Contains(body, `<option value="route" selected`) {
		t.Fatalf("edit: %d, the key pickers do not show peer:principal and route", resp.StatusCode)
	}
}

func TestStructuredEditorKeysARuleByEnvoyMetadata(t *testing.T) {
	e := newEnv(t, nil)
	c := login(t, e, "alice")
	tok := csrfOf(t, get(t, c, e.srv.URL+"/"))
	draft := `{"policies":[{"name":"users","rules":[{"name":"per-ip","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":5,"burst":10}}]}]}`
	resp, body := post(t, c, e.srv.URL+"/policy/rules", url.Values{"csrf": {tok}, "base_version": {"1"}, "policy": {draft}, "op": {"apply:0:0"},
		"rf_name": {"per-user"}, "rf_algorithm": {"token_bucket"}, "rf_rate": {"5"}, "rf_burst": {"10"},
		"rf_key_kind0": {"metadata"}, "rf_key_name0": {"envoy.filters.http.jwt_authn:jwt_payload.sub"},
		"rf_match_src0": {"metadata:envoy.filters.http.json_to_metadata:model"}, "rf_match_val0": {"o1"}})
	got := draftOf(t, body)
	cfg, err := policy.Parse([]byte(got))
	if resp.StatusCode != 200 || err != nil {
		t.Fatalf("apply: %d %v\n%s", resp.StatusCode, err, got)
	}
	want := policy.KeySource{Kind: policy.SourceMetadata, Name: "envoy.filters.http.jwt_authn:jwt_payload.sub"}
	if r := cfg.RuleByName("per-user"); len(r.Keys) != 1 || r.Keys[0] != want || len(r.Match) != 1 || r.Match[0].Source.Kind != policy.SourceMetadata {
		t.Errorf("the rule's keys %v, match %v", r.Keys, r.Match)
	}
	resp, body = post(t, c, e.srv.URL+"/policy/rules", url.Values{"csrf": {tok}, "base_version": {"1"}, "policy": {got}, "op": {"edit:0:0"}})
	if resp.StatusCode != 200 || !strings.Contains(body, `<option value="metadata" selected`) || !strings.Contains(body, `value="envoy.filters.http.jwt_authn:jwt_payload.sub"`) {
		t.Fatalf("edit: %d, the key picker does not show the metadata source", resp.StatusCode)
	}
}

// A limit being rolled out: the form edits the share of identities the
// rule is enforced on, and each error is next to that field.
func TestStructuredEditorRollsALimitOutOnAShareOfClients(t *testing.T) {
	e := newEnv(t, nil)
	c := login(t, e, "alice")
	tok := csrfOf(t, get(t, c, e.srv.URL+"/"))
	draft := `{"policies":[{"name":"p","rules":[{"name":"api","enforce_percent":10,"limit_keys":["header:x-api-key"],"algorithm":"token_bucket","algorithm_config":{"rps":5,"burst":10}}]}]}`
	resp, body := post(t, c, e.srv.URL+"/policy/rules", url.Values{"csrf": {tok}, "base_version": {"1"}, "policy": {draft}, "op": {"edit:0:0"}})
	if resp.StatusCode != 200 || !strings.Contains(body, `name="rf_enforce_percent" value="10"`) {
		t.Fatalf("edit a rule with enforce_percent: %d, the form does not show it", resp.StatusCode)
	}
	if !strings.Contains(body, "on 10% of its identities") {
		t.Error("the list does not say the share")
	}
	apply := func(draft string, fields url.Values) (int, string) {
		t.Helper()
		return applyRuleForm(t, c, e, tok, draft, "0:0", apiRuleForm, fields)
	}
	status, body := apply(draft, url.Values{"rf_enforce_percent": {"25"}})
	got := draftOf(t, body)
	if status != 200 || !strings.Contains(got, `"enforce_percent": 25`) {
		t.Fatalf("raise the share to 25: %d\n%s", status, got)
	}
	for _, bad := range []url.Values{
		{"rf_enforce_percent": {"lots"}},
		{"rf_enforce_percent": {"120"}},
		{"rf_enforce_percent": {"50"}, "rf_mode": {"shadow"}},
	} {
		if status, body := apply(got, bad); status != http.StatusUnprocessableEntity || !strings.Contains(body, `id="rf-err-enforce_percent"`) {
			t.Errorf("%v: %d, no error next to the field", bad, status)
		}
	}
	// Emptied, the rule is enforced on every identity.
	status, body = apply(got, url.Values{"rf_enforce_percent": {""}})
	if got = draftOf(t, body); status != 200 || strings.Contains(got, "enforce_percent") {
		t.Fatalf("empty the share: %d\n%s", status, got)
	}
}

// apiRuleForm is the rule form of a token bucket rule "api" keyed by
// x-api-key, as a browser sends it.
var apiRuleForm = url.Values{"rf_name": {"api"}, "rf_algorithm": {"token_bucket"}, "rf_rate": {"5"}, "rf_burst": {"10"},
	"rf_key_kind0": {"header"}, "rf_key_name0": {"x-api-key"}}

// applyRuleForm posts the rule form of rule ref of draft: the fields of
// base, with those of fields instead; it returns the status and the page.
func applyRuleForm(t *testing.T, c *http.Client, e *env, tok, draft, ref string, base, fields url.Values) (int, string) {
	t.Helper()
	form := url.Values{"csrf": {tok}, "base_version": {"1"}, "policy": {draft}, "op": {"apply:" + ref}}
	for k, v := range base {
		form[k] = v
	}
	for k, v := range fields {
		form[k] = v
	}
	resp, body := post(t, c, e.srv.URL+"/policy/rules", form)
	return resp.StatusCode, body
}

// Keys by a cookie and by a client network keep their names through the
// form: opened and applied unchanged, the rule is as it was.
func TestStructuredEditorKeepsCookieAndNetworkKeys(t *testing.T) {
	e := newEnv(t, nil)
	c := login(t, e, "alice")
	tok := csrfOf(t, get(t, c, e.srv.URL+"/"))
	draft := `{"policies":[{"name":"p","rules":[{"name":"api","limit_keys":["cookie:sid","ip:network:16:48","ip:network"],"algorithm":"token_bucket","algorithm_config":{"rps":5,"burst":10}}]}]}`
	resp, body := post(t, c, e.srv.URL+"/policy/rules", url.Values{"csrf": {tok}, "base_version": {"1"}, "policy": {draft}, "op": {"edit:0:0"}})
	if resp.StatusCode != 200 {
		t.Fatalf("edit: %d", resp.StatusCode)
	}
	// What the browser sends back: the form's own fields.
	fields := url.Values{"rf_name": {"api"}, "rf_algorithm": {"token_bucket"}, "rf_rate": {"5"}, "rf_burst": {"10"}}
	for i, want := range [][2]string{{"cookie", "sid"}, {"ip:network", "16:48"}, {"ip:network", ""}} {
		n := strconv.Itoa(i)
		if !strings.Contains(body, `<option value="`+want[0]+`" selected`) && !strings.Contains(body, `value="`+want[0]+`" selected`) {
			t.Errorf("key %d: the form does not select %s", i, want[0])
		}
		if want[1] != "" && !strings.Contains(body, `name="rf_key_name`+n+`" value="`+want[1]+`"`) {
			t.Errorf("key %d: the form does not show %q", i, want[1])
		}
		fields["rf_key_kind"+n], fields["rf_key_name"+n] = []string{want[0]}, []string{want[1]}
	}
	status, body := applyRuleForm(t, c, e, tok, draft, "0:0", nil, fields)
	if got := draftOf(t, body); status != 200 || !strings.Contains(got, `"cookie:sid"`) || !strings.Contains(got, `"ip:network:16:48"`) || !strings.Contains(got, `"ip:network"`) {
		t.Fatalf("applied unchanged: %d\n%s", status, got)
	}
}

// A rule for a time: the form sets and clears its from and until, a time
// the filter would refuse is reported next to its field, and the list says
// when the rule applies and whether it does now.
func TestStructuredEditorSchedulesARule(t *testing.T) {
	e := newEnv(t, nil)
	c := login(t, e, "alice")
	tok := csrfOf(t, get(t, c, e.srv.URL+"/"))
	draft := `{"policies":[{"name":"p","rules":[{"name":"api","limit_keys":["header:x-api-key"],"algorithm":"token_bucket","algorithm_config":{"rps":5,"burst":10}},
	  {"name":"old","until":"2020-01-01T00:00:00Z","limit_keys":["all"],"algorithm":"token_bucket","algorithm_config":{"rps":5,"burst":10}}]}]}`
	apply := func(draft string, fields url.Values) (int, string) {
		t.Helper()
		return applyRuleForm(t, c, e, tok, draft, "0:0", apiRuleForm, fields)
	}
	status, body := apply(draft, url.Values{"rf_from": {"2199-12-24T02:00:00+01:00"}, "rf_until": {" 2199-12-24T03:00:00Z "}})
	got := draftOf(t, body)
	if status != 200 || !strings.Contains(got, `"from": "2199-12-24T02:00:00+01:00"`) || !strings.Contains(got, `"until": "2199-12-24T03:00:00Z"`) {
		t.Fatalf("schedule the rule: %d\n%s", status, got)
	}
	for _, want := range []string{
		`data-time-state="later"`, "from 2199-12-24 01:00:00 UTC until 2199-12-24 03:00:00 UTC", "not yet",
		`data-time-state="ended"`, "until 2020-01-01 00:00:00 UTC",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the rule list lacks %s", want)
		}
	}
	for _, bad := range []url.Values{
		{"rf_until": {"tomorrow"}},
		{"rf_from": {"2199-12-24T02:00:00+01:00"}, "rf_until": {"2199-12-24T00:00:00Z"}},
	} {
		if status, body := apply(got, bad); status != http.StatusUnprocessableEntity || !strings.Contains(body, `id="rf-err-until"`) {
			t.Errorf("%v: %d, no error next to the field", bad, status)
		}
	}
	// Emptied, the rule applies always again.
	status, body = apply(got, url.Values{"rf_from": {""}, "rf_until": {""}})
	if got = draftOf(t, body); status != 200 || strings.Count(got, `"until"`) != 1 || strings.Contains(got, `"from"`) {
		t.Fatalf("clear the time: %d\n%s", status, got)
	}
	if edit := post2(t, c, e, tok, got); !strings.Contains(edit, `name="rf_until" value="2020-01-01T00:00:00Z"`) {
		t.Error("the form of a rule for a time does not show its until")
	}
}

// A rule on a weekly schedule: the form shows, sets and clears its days,
// times and zone, a mistake is reported next to the schedule, and the list
// says the schedule in words.
func TestStructuredEditorSetsAWeeklySchedule(t *testing.T) {
	e := newEnv(t, nil)
	c := login(t, e, "alice")
	tok := csrfOf(t, get(t, c, e.srv.URL+"/"))
	draft := `{"policies":[{"name":"p","rules":[{"name":"api","schedule":{"days":["mon","fri"],"from":"09:00","time_zone":"Europe/Berlin"},
	  "limit_keys":["header:x-api-key"],"algorithm":"token_bucket","algorithm_config":{"rps":5,"burst":10}}]}]}`
	_, body := post(t, c, e.srv.URL+"/policy/rules", url.Values{"csrf": {tok}, "base_version": {"1"}, "policy": {draft}, "op": {"edit:0:0"}})
	for _, want := range []string{`name="rf_day" value="mon" checked`, `name="rf_day" value="fri" checked`, `name="rf_weekly_from" value="09:00"`, `name="rf_weekly_zone" value="Europe/Berlin"`} {
		if !strings.Contains(body, want) {
			t.Errorf("the form lacks %s", want)
		}
	}
	if strings.Contains(body, `name="rf_day" value="tue" checked`) {
		t.Error("the form ticks a day the schedule does not list")
	}
	form := url.Values{"rf_burst": {"20"}, "rf_day": {"mon", "fri"}, "rf_weekly_from": {"09:00"}, "rf_weekly_zone": {"Europe/Berlin"}}
	status, body := applyRuleForm(t, c, e, tok, draft, "0:0", apiRuleForm, form)
	got := draftOf(t, body)
	if status != 200 || !strings.Contains(got, `"schedule": {`) || !strings.Contains(got, `"burst": 20`) {
		t.Fatalf("apply the form: %d\n%s", status, got)
	}
	for _, want := range []string{`data-time-state="weekly"`, "weekly: mon, fri 09:00-24:00 Europe/Berlin", "on a schedule"} {
		if !strings.Contains(body, want) {
			t.Errorf("the rule list lacks %s", want)
		}
	}
	// Set from the form, checked by the filter's parser next to its field.
	status, body = applyRuleForm(t, c, e, tok, got, "0:0", apiRuleForm, url.Values{"rf_day": {"sat", "sun"}, "rf_weekly_from": {"22:00"}, "rf_weekly_until": {"06:00"}})
	if got := draftOf(t, body); status != 200 || !strings.Contains(got, `"days": [`) || !strings.Contains(got, `"until": "06:00"`) || strings.Contains(got, "Europe/Berlin") {
		t.Fatalf("a weekend night: %d\n%s", status, got)
	}
	for _, bad := range []url.Values{{"rf_day": {"someday"}}, {"rf_weekly_from": {"9am"}}, {"rf_weekly_zone": {"Mars/Olympus"}}} {
		if status, body := applyRuleForm(t, c, e, tok, got, "0:0", apiRuleForm, bad); status != http.StatusUnprocessableEntity || !strings.Contains(body, `id="rf-err-schedule"`) {
			t.Errorf("%v: %d, no error next to the schedule", bad, status)
		}
	}
	// Emptied, the rule applies every day again.
	status, body = applyRuleForm(t, c, e, tok, got, "0:0", apiRuleForm, nil)
	if got := draftOf(t, body); status != 200 || strings.Contains(got, "schedule") {
		t.Fatalf("clear the schedule: %d\n%s", status, got)
	}
}

// post2 opens the rule form of the second rule of draft's first policy.
func post2(t *testing.T, c *http.Client, e *env, tok, draft string) string {
	t.Helper()
	_, body := post(t, c, e.srv.URL+"/policy/rules", url.Values{"csrf": {tok}, "base_version": {"1"}, "policy": {draft}, "op": {"edit:0:1"}})
	return body
}

// A rule's bounds and schedule are said together, the state from the
// bounds; a schedule alone is "weekly".
func TestRuleTimeInWordsJoinsBoundsAndSchedule(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct{ rule, text, state string }{
		{`{"until":"2027-01-01T00:00:00Z","schedule":{"days":["mon"]}}`, "until 2027-01-01 00:00:00 UTC, weekly: mon 00:00-24:00 UTC", "now"},
		{`{"from":"2027-01-01T00:00:00Z"}`, "from 2027-01-01 00:00:00 UTC", "later"},
		{`{"schedule":{"from":"22:00","until":"06:00","time_zone":"Asia/Tokyo"}}`, "weekly: every day 22:00-06:00 Asia/Tokyo", "weekly"},
		{`{}`, "", ""},
	} {
		o, err := policyedit.ParseObject([]byte(c.rule))
		if err != nil {
			t.Fatal(err)
		}
		if text, state := ruleTimeOf(o, now); text != c.text || state != c.state {
			t.Errorf("%s: %q %q, want %q %q", c.rule, text, state, c.text, c.state)
		}
	}
}

// The form makes a rule count across the fleet; without a fleet block the
// parser's error stands next to the field, and the list says where the
// rule counts.
func TestStructuredEditorMakesARuleGlobal(t *testing.T) {
	e := newEnv(t, nil)
	c := login(t, e, "alice")
	tok := csrfOf(t, get(t, c, e.srv.URL+"/"))
	rules := `"policies":[{"name":"p","rules":[
	 {"name":"api","limit_keys":["header:x-api-key"],"algorithm":"token_bucket","algorithm_config":{"rps":5,"burst":10}}]}]}`
	apply := func(draft string, fields url.Values) (int, string) {
		t.Helper()
		return applyRuleForm(t, c, e, tok, draft, "0:0", apiRuleForm, fields)
	}
	status, body := apply(`{`+rules, url.Values{"rf_scope": {"global"}})
	if status != http.StatusUnprocessableEntity || !strings.Contains(body, `id="rf-err-scope"`) || !strings.Contains(body, "fleet") {
		t.Fatalf("global without a fleet block: %d, no error next to the field", status)
	}
	status, body = apply(`{"fleet":{"cluster":"sluice_rls"},`+rules, url.Values{"rf_scope": {"global"}})
	got := draftOf(t, body)
	cfg, err := policy.Parse([]byte(got))
	if status != 200 || err != nil || !cfg.RuleByName("api").Global {
		t.Fatalf("made global: %d %v\n%s", status, err, got)
	}
	if !strings.Contains(body, "across the fleet") {
		t.Error("the rule list does not say the rule counts across the fleet")
	}
	if status, body = apply(got, nil); status != 200 || strings.Contains(draftOf(t, body), "scope") {
		t.Errorf("made local again: %d\n%s", status, draftOf(t, body))
	}
}
