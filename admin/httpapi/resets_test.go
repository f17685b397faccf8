package httpapi

import (
	"context"
	"errors"
	"html"
	"net/http"
	"net/url"
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
  {"name":"pay-ip","limit_keys":["ip:address"],"algorithm":"fixed_window","algorithm_config":{"limit":10,"window_seconds":60}}]},
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
