package httpapi

import (
	"context"
	"errors"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/admin/auth"
	"github.com/sluice-rl/sluice/admin/policies"
	"github.com/sluice-rl/sluice/admin/store"
	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/request"
)

// resetTeams is twoTeams with a rule no reset applies to (in flight) and
// one whose identities are addresses, shown in clear.
const resetTeams = `{"policies":[
 {"name":"payments-api","rules":[
  {"name":"pay","limit_keys":["header:x-api-key"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":5}},
  {"name":"pay-ip","limit_keys":["ip:address"],"algorithm":"fixed_window","algorithm_config":{"limit":10,"window_seconds":60}},
  {"name":"pay-exact","limit_keys":["header:x-api-key"],"algorithm":"token_bucket","max_keys":0,"algorithm_config":{"rps":1,"burst":5}}]},
 {"name":"search","rules":[
  {"name":"find","limit_keys":["header:x-api-key"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":5}},
  {"name":"in-flight","limit_keys":["header:x-api-key"],"algorithm":"concurrency","algorithm_config":{"limit":3}}]}]}`

const secretKey = "sk-live-0123456789abcdef"

func resetEnv(t *testing.T) *env {
	t.Helper()
	e := newEnv(t, nil)
	if resp, m := e.apiJSON(t, "POST", "/api/v1/policy", saveRequestBody(1, resetTeams)); resp.StatusCode != http.StatusCreated {
		t.Fatalf("saving the policy: %d %v", resp.StatusCode, m)
	}
	return e
}

// maskedSecret is how the dashboard shows secretKey under a rule keyed
// by header:x-api-key.
func maskedSecret() string {
	return request.DisplayIdentity([]policy.KeySource{{Kind: policy.SourceHeader, Name: "x-api-key"}}, false, secretKey)
}

func TestAPIResetAnswersWithTheKeyMaskedAndAudits(t *testing.T) {
	e := resetEnv(t)
	resp, m := e.apiJSON(t, "POST", "/api/v1/resets", `{"rule":"pay","key":"`+secretKey+`"}`)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("reset: %d %v", resp.StatusCode, m)
	}
	if m["rule"] != "pay" || m["key"] != maskedSecret() || m["author"] != "api" || m["id"] == "" || m["created"] == "" {
		t.Errorf("answer %v, want the rule, the key masked as %q, the author", m, maskedSecret())
	}
	if resp, m := e.apiJSON(t, "POST", "/api/v1/resets", `{"rule":"pay-ip","key":"10.0.0.7"}`); resp.StatusCode != http.StatusCreated || m["key"] != "ip:address=10.0.0.7" {
		t.Errorf("an address key: %d %v, want it in clear as the dashboard shows it", resp.StatusCode, m)
	}
	resp, list := e.apiJSON(t, "GET", "/api/v1/resets", "")
	rs, _ := list["resets"].([]any)
	if resp.StatusCode != http.StatusOK || len(rs) != 2 || rs[1].(map[string]any)["key"] != maskedSecret() {
		t.Errorf("list: %d %v", resp.StatusCode, list)
	}
	entries, err := e.st.ListAudit(context.Background(), store.AuditFilter{Action: ActionReset})
	if err != nil || len(entries) != 2 {
		t.Fatalf("audit: %+v, %v", entries, err)
	}
	if d := entries[1].Detail; !strings.Contains(d, maskedSecret()) || strings.Contains(d, secretKey) || entries[1].Target != "pay" {
		t.Errorf("audit entry %+v: want the rule and the masked key, never the key", entries[1])
	}
}

func TestAPIResetRefusesBadInputNamingTheField(t *testing.T) {
	e := resetEnv(t)
	cases := []struct{ body, field, msg string }{
		{`{"key":"k"}`, "rule", "required"},
		{`{"rule":"pay"}`, "key", "required"},
		{`{"rule":"nope","key":"k"}`, "rule", "is not a rule"},
		{`{"rule":"in-flight","key":"k"}`, "rule", "in flight"},
		{`{"rule":"pay","key":"a|b"}`, "key", "limit_keys"},
		{`{"rule":"pay","key":"a\\b"}`, "key", "escapes nothing"},
		{`{"rule":"pay","key":7}`, "key", "a string"},
	}
	for _, c := range cases {
		resp, m := e.apiJSON(t, "POST", "/api/v1/resets", c.body)
		if resp.StatusCode != http.StatusBadRequest || m["field"] != c.field || !strings.Contains(m["error"].(string), c.msg) {
			t.Errorf("%s: %d %v; want 400 naming %s (%q)", c.body, resp.StatusCode, m, c.field, c.msg)
		}
	}
	resp, m := e.apiJSON(t, "POST", "/api/v1/resets", `{"rule":"pay","key":"k","author":"x"}`)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(m["error"].(string), `unknown field "author"`) {
		t.Errorf("an unknown field: %d %v", resp.StatusCode, m)
	}
	if _, list := e.apiJSON(t, "GET", "/api/v1/resets", ""); len(list["resets"].([]any)) != 0 {
		t.Errorf("refused resets were stored: %v", list)
	}
}

func TestAPIResetNeedsAnEditorWithTheRuleInScope(t *testing.T) {
	e := resetEnv(t)
	viewer := addUser(t, e, "val", auth.RoleViewer)
	if resp, m := e.call(t, "POST", "/api/v1/resets", viewer, "application/json", `{"rule":"pay","key":"k"}`); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a viewer's reset: %d %v", resp.StatusCode, m)
	}
	if resp, _ := e.call(t, "GET", "/api/v1/resets", viewer, "", ""); resp.StatusCode != http.StatusOK {
		t.Errorf("a viewer's list: %d", resp.StatusCode)
	}
	if resp, _ := e.call(t, "POST", "/api/v1/resets", "", "application/json", `{"rule":"pay","key":"k"}`); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("no token: %d", resp.StatusCode)
	}
	if resp, m := e.apiJSON(t, "POST", "/api/v1/users", `{"name":"pay","role":"editor","password":"`+testPassword+`","policies":["payments-*"]}`); resp.StatusCode != http.StatusCreated {
		t.Fatalf("creating a scoped editor: %d %v", resp.StatusCode, m)
	}
	tok, _, err := e.auth.CreateToken(context.Background(), "pay", "ci")
	if err != nil {
		t.Fatal(err)
	}
	if resp, m := e.call(t, "POST", "/api/v1/resets", tok, "application/json", `{"rule":"pay","key":"k"}`); resp.StatusCode != http.StatusCreated || m["author"] != "pay" {
		t.Errorf("a rule in scope: %d %v", resp.StatusCode, m)
	}
	resp, m := e.call(t, "POST", "/api/v1/resets", tok, "application/json", `{"rule":"find","key":"k"}`)
	if resp.StatusCode != http.StatusForbidden || m["scope"] != "payments-*" || !strings.Contains(m["error"].(string), `"search"`) {
		t.Errorf("a rule of another team: %d %v, want 403 naming its policy", resp.StatusCode, m)
	}
}

func TestDashboardResetFormResetsAndListsMaskedKeys(t *testing.T) {
	e := resetEnv(t)
	c := login(t, e, "ann")
	page := get(t, c, e.srv.URL+"/dashboard")
	if !strings.Contains(page, `id="reset-form"`) || !strings.Contains(page, `<option value="pay-ip"`) || strings.Contains(page, `<option value="in-flight"`) {
		t.Fatalf("the dashboard's reset form is missing, or offers a rule no reset applies to:\n%s", page)
	}
	resp, body := post(t, c, e.srv.URL+"/resets", url.Values{"csrf": {csrfOf(t, page)}, "rule": {"pay"}, "key": {secretKey}})
	masked := html.EscapeString(maskedSecret())
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `id="reset-outcome"`) || !strings.Contains(body, "<code>"+masked+"</code>") {
		t.Fatalf("after a reset: %d, want the outcome and the reset listed with the key masked (%s):\n%s", resp.StatusCode, masked, body)
	}
	if strings.Contains(body, secretKey) {
		t.Error("the page shows the key in clear after a reset")
	}
	resp, body = post(t, c, e.srv.URL+"/resets", url.Values{"csrf": {csrfOf(t, page)}, "rule": {"pay"}, "key": {"a|b"}})
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "Not reset: key:") {
		t.Errorf("a refused key: %d, want 400 with the field's error:\n%s", resp.StatusCode, body)
	}
	if resp, _ := post(t, c, e.srv.URL+"/resets", url.Values{"rule": {"pay"}, "key": {"k"}}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a form without the CSRF token: %d, want 403", resp.StatusCode)
	}
	if rs, _ := e.svc.Resets(context.Background(), 10); len(rs) != 1 {
		t.Errorf("%d resets stored, want the one accepted", len(rs))
	}
}

func TestDashboardResetFormIsClosedToViewers(t *testing.T) {
	e := resetEnv(t)
	addUser(t, e, "val", auth.RoleViewer)
	c := loginAs(t, e, "val")
	page := get(t, c, e.srv.URL+"/dashboard")
	if strings.Contains(page, `id="reset-form"`) || !strings.Contains(page, "needs the editor role") {
		t.Errorf("a viewer is offered the reset form:\n%s", page)
	}
	if resp, _ := post(t, c, e.srv.URL+"/resets", url.Values{"csrf": {csrfOf(t, page)}, "rule": {"pay"}, "key": {"k"}}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a viewer's POST /resets: %d, want 403", resp.StatusCode)
	}
}

// A node whose resource version is the current version with resets added
// runs the current policy: the Nodes page must not show it behind.
func TestANodeRunningTheVersionWithResetsIsUpToDate(t *testing.T) {
	for _, c := range []struct {
		acked string
		want  bool
	}{{"4", true}, {"4+resets.1a2b3c4d", true}, {"4+trial1", false}, {"4+trial1+resets.1a2b3c4d", false}, {"40", false}, {"3+resets.1a2b3c4d", false}} {
		if got := runsVersion(c.acked, "4"); got != c.want {
			t.Errorf("runsVersion(%q, 4) = %v, want %v", c.acked, got, c.want)
		}
	}
}

// failingForgetter is a rate limit service whose backend is down.
type failingForgetter struct{}

func (failingForgetter) Forget(context.Context, string, string, string) error {
	return errors.New("redis: connection refused")
}

func (failingForgetter) ForgetRule(context.Context, string, string) error {
	return errors.New("redis: connection refused")
}

func TestAPIResetOfAGlobalRuleIsUnavailableWhileTheBackendFails(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Policies.(*policies.Service).SetFleetForgetter(failingForgetter{}) })
	global := `{"fleet":{"cluster":"rls"},"rules":[{"name":"g","scope":"global","limit_keys":["header:x-api-key"],
	  "algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":5}}]}`
	if resp, m := e.apiJSON(t, "POST", "/api/v1/policy", saveRequestBody(1, global)); resp.StatusCode != http.StatusCreated {
		t.Fatalf("saving the policy: %d %v", resp.StatusCode, m)
	}
	resp, m := e.apiJSON(t, "POST", "/api/v1/resets", `{"rule":"g","key":"acme"}`)
	if msg, _ := m["error"].(string); resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(msg, "nothing was reset") {
		t.Fatalf("reset with the backend down: %d %v, want 503 saying nothing was reset", resp.StatusCode, m)
	}
	if _, list := e.apiJSON(t, "GET", "/api/v1/resets", ""); len(list["resets"].([]any)) != 0 {
		t.Errorf("a reset was stored: %v", list)
	}
}

// servingNodes are nodes of an xDS server pushing the resource version
// serving.
type servingNodes struct {
	fakeNodes
	serving string
}

func (s servingNodes) Serving() string { return s.serving }

func TestResetsSayHowManyConnectedEnvoysHaveTheLatest(t *testing.T) {
	nodes := servingNodes{serving: "2+resets.0a1b2c3d", fakeNodes: fakeNodes{
		{ID: "a", Connected: true, AckedVersion: "2+resets.0a1b2c3d"},
		{ID: "b", Connected: true, AckedVersion: "2"},
		{ID: "c", Connected: false, AckedVersion: "2+resets.0a1b2c3d"},
	}}
	e := newEnv(t, func(c *Config) { c.Nodes = &nodes })
	resp, m := e.apiJSON(t, "GET", "/api/v1/resets", "")
	envoys, _ := m["envoys"].(map[string]any)
	if resp.StatusCode != http.StatusOK || envoys["connected"] != 2.0 || envoys["with_latest"] != 1.0 {
		t.Errorf("GET /api/v1/resets: %d %v, want 1 of the 2 connected Envoys with the latest", resp.StatusCode, m)
	}
	page := get(t, login(t, e, "ann"), e.srv.URL+"/dashboard")
	if !strings.Contains(page, "in force on 1 of 2 connected Envoys") {
		t.Errorf("the dashboard does not say how many Envoys have the latest resets:\n%s", page)
	}
	nodes.serving = "2" // a push without resets: nothing to say
	if _, m := e.apiJSON(t, "GET", "/api/v1/resets", ""); m["envoys"] != nil {
		t.Errorf("without resets pushed: %v, want no envoys", m)
	}
}

// POST /api/v1/resets with "all": true resets every identity of the rule:
// the answer and the list say "all" and carry no key, and the audit log
// records it as rule.reset, apart from the resets of one client.
func TestAPIResetOfEveryIdentityAnswersAllAndIsAuditedAsARuleReset(t *testing.T) {
	e := resetEnv(t)
	if resp, m := e.apiJSON(t, "POST", "/api/v1/resets", `{"rule":"pay","key":"`+secretKey+`"}`); resp.StatusCode != http.StatusCreated {
		t.Fatalf("a reset of one client: %d %v", resp.StatusCode, m)
	}
	resp, m := e.apiJSON(t, "POST", "/api/v1/resets", `{"rule":"pay-ip","all":true}`)
	if _, hasKey := m["key"]; resp.StatusCode != http.StatusCreated || m["all"] != true || hasKey || m["rule"] != "pay-ip" || m["author"] != "api" || m["id"] == "" {
		t.Fatalf("reset of every identity: %d %v; want 201 with all and no key", resp.StatusCode, m)
	}
	resp, list := e.apiJSON(t, "GET", "/api/v1/resets", "")
	rs, _ := list["resets"].([]any)
	if resp.StatusCode != http.StatusOK || len(rs) != 2 {
		t.Fatalf("list: %d %v", resp.StatusCode, list)
	}
	newest, older := rs[0].(map[string]any), rs[1].(map[string]any)
	if _, hasKey := newest["key"]; newest["all"] != true || hasKey || older["all"] != nil || older["key"] != maskedSecret() {
		t.Errorf("list %v: want every identity of pay-ip, then the masked key under pay", rs)
	}
	entries, err := e.st.ListAudit(context.Background(), store.AuditFilter{Action: ActionResetRule})
	if err != nil || len(entries) != 1 {
		t.Fatalf("rule.reset entries: %+v, %v", entries, err)
	}
	if en := entries[0]; en.Target != "pay-ip" || !strings.Contains(en.Detail, "every identity under pay-ip ("+m["id"].(string)+")") {
		t.Errorf("audit entry %+v: want the rule, every identity and the reset's id", en)
	}
	if one, _ := e.st.ListAudit(context.Background(), store.AuditFilter{Action: ActionReset}); len(one) != 1 {
		t.Errorf("%d client.reset entries, want only the reset of one client", len(one))
	}
}

// Exactly one of key and all: otherwise 400 naming the field, and the
// parser's refusal of a rule whose identities the filter cannot list.
func TestAPIResetOfEveryIdentityRefusesBadInputNamingTheField(t *testing.T) {
	e := resetEnv(t)
	cases := []struct{ body, field, msg string }{
		{`{"rule":"pay","key":"k","all":true}`, "key", `must be left out with "all": true`},
		{`{"rule":"pay","all":false}`, "key", "required"},
		{`{"rule":"pay","all":"yes"}`, "all", "must be true or false, got string"},
		{`{"rule":"pay-exact","all":true}`, "all", `keeps exact storage ("max_keys": 0)`},
		{`{"rule":"in-flight","all":true}`, "rule", "in flight"},
		{`{"all":true}`, "rule", "required"},
	}
	for _, c := range cases {
		resp, m := e.apiJSON(t, "POST", "/api/v1/resets", c.body)
		if msg, _ := m["error"].(string); resp.StatusCode != http.StatusBadRequest || m["field"] != c.field || !strings.Contains(msg, c.msg) {
			t.Errorf("%s: %d %v; want 400 naming %s (%q)", c.body, resp.StatusCode, m, c.field, c.msg)
		}
	}
	if _, list := e.apiJSON(t, "GET", "/api/v1/resets", ""); len(list["resets"].([]any)) != 0 {
		t.Errorf("refused resets were stored: %v", list)
	}
}

// An editor limited to some policies resets every identity only of their
// rules; a viewer not at all.
func TestAPIResetOfEveryIdentityNeedsAnEditorWithTheRuleInScope(t *testing.T) {
	e := resetEnv(t)
	viewer := addUser(t, e, "val", auth.RoleViewer)
	if resp, m := e.call(t, "POST", "/api/v1/resets", viewer, "application/json", `{"rule":"pay","all":true}`); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a viewer's reset: %d %v", resp.StatusCode, m)
	}
	if resp, m := e.apiJSON(t, "POST", "/api/v1/users", `{"name":"pay","role":"editor","password":"`+testPassword+`","policies":["payments-*"]}`); resp.StatusCode != http.StatusCreated {
		t.Fatalf("creating a scoped editor: %d %v", resp.StatusCode, m)
	}
	tok, _, err := e.auth.CreateToken(context.Background(), "pay", "ci")
	if err != nil {
		t.Fatal(err)
	}
	if resp, m := e.call(t, "POST", "/api/v1/resets", tok, "application/json", `{"rule":"pay","all":true}`); resp.StatusCode != http.StatusCreated || m["author"] != "pay" {
		t.Errorf("a rule in scope: %d %v", resp.StatusCode, m)
	}
	resp, m := e.call(t, "POST", "/api/v1/resets", tok, "application/json", `{"rule":"find","all":true}`)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(m["error"].(string), `"search"`) {
		t.Errorf("a rule of another team: %d %v, want 403 naming its policy", resp.StatusCode, m)
	}
}

func TestAPIResetOfEveryIdentityOfAGlobalRuleIsUnavailableWhileTheBackendFails(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Policies.(*policies.Service).SetFleetForgetter(failingForgetter{}) })
	global := `{"fleet":{"cluster":"rls"},"rules":[{"name":"g","scope":"global","limit_keys":["header:x-api-key"],
	  "algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":5}}]}`
	if resp, m := e.apiJSON(t, "POST", "/api/v1/policy", saveRequestBody(1, global)); resp.StatusCode != http.StatusCreated {
		t.Fatalf("saving the policy: %d %v", resp.StatusCode, m)
	}
	resp, m := e.apiJSON(t, "POST", "/api/v1/resets", `{"rule":"g","all":true}`)
	if msg, _ := m["error"].(string); resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(msg, "not stored or pushed") {
		t.Fatalf("reset with the backend down: %d %v, want 503 saying the reset was not stored", resp.StatusCode, m)
	}
	if _, list := e.apiJSON(t, "GET", "/api/v1/resets", ""); len(list["resets"].([]any)) != 0 {
		t.Errorf("a reset was stored: %v", list)
	}
	if entries, _ := e.st.ListAudit(context.Background(), store.AuditFilter{Action: ActionResetRule}); len(entries) != 0 {
		t.Errorf("a refused reset was audited: %+v", entries)
	}
}

// The dashboard form resets every identity with its box ticked and the
// key left empty, without JavaScript; the box with a key is refused
// naming the key, and the recent resets say "every identity".
func TestDashboardResetFormResetsEveryIdentityWithItsBox(t *testing.T) {
	e := resetEnv(t)
	c := login(t, e, "ann")
	page := get(t, c, e.srv.URL+"/dashboard")
	if !strings.Contains(page, `<input type="checkbox" id="reset-all" name="all" value="1"`) {
		t.Fatalf("the reset form has no box for every identity:\n%s", page)
	}
	csrf := csrfOf(t, page)
	resp, body := post(t, c, e.srv.URL+"/resets", url.Values{"csrf": {csrf}, "rule": {"pay"}, "key": {"alice"}, "all": {"1"}})
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "Not reset: key: leave it empty") {
		t.Errorf("the box with a key: %d, want 400 naming the key:\n%s", resp.StatusCode, body)
	}
	if !regexp.MustCompile(`id="reset-all" name="all" value="1" checked`).MatchString(body) || !strings.Contains(body, `value="alice"`) {
		t.Errorf("after the refusal the box and the key are not kept:\n%s", body)
	}
	resp, body = post(t, c, e.srv.URL+"/resets", url.Values{"csrf": {csrf}, "rule": {"pay-exact"}, "key": {""}, "all": {"1"}})
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "Not reset: all:") {
		t.Errorf("a rule of exact storage: %d, want 400 with the parser's error at all:\n%s", resp.StatusCode, body)
	}
	resp, body = post(t, c, e.srv.URL+"/resets", url.Values{"csrf": {csrf}, "rule": {"pay"}, "key": {""}, "all": {"1"}})
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "Reset every identity under pay") || !strings.Contains(body, "<em>every identity</em>") {
		t.Fatalf("the box and no key: %d, want every identity reset and listed:\n%s", resp.StatusCode, body)
	}
	if strings.Contains(body, `value="1" checked`) {
		t.Error("the box stays ticked after a reset that was done")
	}
	if resp, _ := post(t, c, e.srv.URL+"/resets", url.Values{"rule": {"pay"}, "all": {"1"}}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a form without the CSRF token: %d, want 403", resp.StatusCode)
	}
	rs, _ := e.svc.Resets(context.Background(), 10)
	if len(rs) != 1 || !rs[0].All || rs[0].Rule != "pay" || rs[0].Author != "ann" {
		t.Errorf("stored %+v, want the one reset of every identity of pay", rs)
	}
	entries, _ := e.st.ListAudit(context.Background(), store.AuditFilter{Action: ActionResetRule})
	if len(entries) != 1 || entries[0].Actor != "ann" {
		t.Errorf("audit: %+v, want ann's rule.reset", entries)
	}
}
