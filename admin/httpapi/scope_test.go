package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/admin/policies"
)

// twoTeams is a configuration with the payments team's policy and the
// search team's.
func twoTeams(paymentsRPS, searchRPS string) string {
	rule := func(name, rps string) string {
		return `{"name":"` + name + `","limit_keys":["header:x-api-key"],"algorithm":"token_bucket","algorithm_config":{"rps":` + rps + `,"burst":100}}`
	}
	return `{"mode":"enforce","policies":[{"name":"payments-api","rules":[` + rule("pay", paymentsRPS) + `]},{"name":"search","rules":[` + rule("find", searchRPS) + `]}]}`
}

func (e *env) currentVersion(t *testing.T) float64 {
	t.Helper()
	_, m := e.apiJSON(t, "GET", "/api/v1/policy", "")
	return m["version"].(float64)
}

func saveRequestBody(base float64, doc string) string {
	return `{"base_version":` + formatNumber(base) + `,"policy":` + doc + `}`
}

func formatNumber(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// TestScopedEditorChangesOnlyItsPolicies: an editor given the payments
// policies saves and rolls back those through the API and the policy
// page, and is refused, naming the policy, any change to the search
// team's policy or to a top-level setting; clearing the scope applies at
// once.
func TestScopedEditorChangesOnlyItsPolicies(t *testing.T) {
	e := newEnv(t, nil)
	if resp, m := e.apiJSON(t, "POST", "/api/v1/policy", saveRequestBody(1, twoTeams("10", "20"))); resp.StatusCode != http.StatusCreated {
		t.Fatalf("admin save: %d %v", resp.StatusCode, m)
	}
	resp, m := e.apiJSON(t, "POST", "/api/v1/users", `{"name":"pay","role":"editor","password":"`+testPassword+`","policies":["payments-*"]}`)
	if resp.StatusCode != http.StatusCreated || len(m["policies"].([]any)) != 1 {
		t.Fatalf("creating a scoped editor: %d %v", resp.StatusCode, m)
	}
	tok, _, err := e.auth.CreateToken(context.Background(), "pay", "ci")
	if err != nil {
		t.Fatal(err)
	}

	// Its own policy: saved.
	v := e.currentVersion(t)
	if resp, m := e.call(t, "POST", "/api/v1/policy", tok, "application/json", saveRequestBody(v, twoTeams("50", "20"))); resp.StatusCode != http.StatusCreated {
		t.Fatalf("saving its own policy: %d %v", resp.StatusCode, m)
	}
	// The other team's policy, and a top-level setting: refused, naming them.
	v = e.currentVersion(t)
	for _, c := range []struct{ doc, names string }{
		{twoTeams("50", "99"), `policy "search" changed`},
		{strings.Replace(twoTeams("50", "20"), `"mode":"enforce"`, `"mode":"enforce","reject_status":503`, 1), `"reject_status"`},
	} {
		resp, m := e.call(t, "POST", "/api/v1/policy", tok, "application/json", saveRequestBody(v, c.doc))
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(m["error"].(string), c.names) || m["scope"] != "payments-*" {
			t.Errorf("a change outside the scope: %d %v, want 403 naming %s", resp.StatusCode, m, c.names)
		}
	}
	if got := e.currentVersion(t); got != v {
		t.Errorf("version %v after refused saves, want %v", got, v)
	}

	// The search team changes search; the payments team's rollback to v2
	// restores its own policy and keeps search's change.
	if resp, _ := e.apiJSON(t, "POST", "/api/v1/policy", saveRequestBody(v, twoTeams("50", "30"))); resp.StatusCode != http.StatusCreated {
		t.Fatal("admin save of search")
	}
	resp, m = e.call(t, "POST", "/api/v1/policy/rollback", tok, "application/json", `{"to":2,"base_version":`+formatNumber(e.currentVersion(t))+`}`)
	rolled, _ := json.Marshal(m["policy"])
	norm, _ := policies.Validate([]byte(twoTeams("10", "30")))
	var wantDoc any
	json.Unmarshal(norm, &wantDoc)
	want, _ := json.Marshal(wantDoc) // keys sorted, as rolled
	if resp.StatusCode != http.StatusCreated || string(rolled) != string(want) {
		t.Errorf("a scoped rollback: %d %s, want payments as in v2 and search kept:\n%s", resp.StatusCode, rolled, want)
	}
	cur := e.currentVersion(t)

	// The policy page says the same, and stores nothing.
	pay := loginAs(t, e, "pay")
	page := get(t, pay, e.srv.URL+"/")
	if !strings.Contains(page, `title="the policies you may change">payments-*</span>`) {
		t.Error("the policy page does not show the editor's scope")
	}
	// The structured view offers buttons for its own policy only.
	for _, c := range []struct {
		policy, rule string
		editable     bool
	}{{"payments-api", "pay", true}, {"search", "find", false}} {
		table := page[strings.Index(page, `data-policy="`+c.policy+`"`):]
		table = table[:strings.Index(table, "</table>")]
		if has := strings.Contains(table, `class="edit-rule"`); has != c.editable || strings.Contains(table, "read-only") == c.editable {
			t.Errorf("policy %s: edit buttons %v, want %v (read-only otherwise)", c.policy, has, c.editable)
		}
	}
	resp2, html := post(t, pay, e.srv.URL+"/policy", url.Values{"csrf": {csrfOf(t, page)}, "base_version": {formatNumber(cur)},
		"policy": {twoTeams("50", "77")}, "message": {"m"}})
	if resp2.StatusCode != http.StatusForbidden || !strings.Contains(html, "outside your scope") || !strings.Contains(html, "&#34;search&#34;") {
		t.Errorf("the policy page: %d, want 403 saying the search policy is outside the scope", resp2.StatusCode)
	}
	if got := e.currentVersion(t); got != cur {
		t.Errorf("version %v after the page's refused save, want %v", got, cur)
	}

	// Clearing the scope applies to the token at once.
	// The answer is the account as it is now: its role too, which the
	// request left out.
	if resp, m := e.apiJSON(t, "PATCH", "/api/v1/users/pay", `{"policies":[]}`); resp.StatusCode != http.StatusOK ||
		m["role"] != "editor" || len(m["policies"].([]any)) != 0 || m["created"] == nil {
		t.Fatalf("clearing the scope: %d %v", resp.StatusCode, m)
	}
	if resp, m := e.call(t, "POST", "/api/v1/policy", tok, "application/json", saveRequestBody(cur, twoTeams("50", "99"))); resp.StatusCode != http.StatusCreated {
		t.Errorf("after the scope was cleared: %d %v", resp.StatusCode, m)
	}
}

func TestScopesAreCheckedWhenSet(t *testing.T) {
	e := newEnv(t, nil)
	for _, c := range []struct{ body, want string }{
		{`{"name":"a1","role":"admin","password":"` + testPassword + `","policies":["x"]}`, "an admin may change every policy"},
		{`{"name":"a2","role":"editor","password":"` + testPassword + `","policies":["pay*ments"]}`, `"pay*ments" is not a policy name`},
		{`{"name":"a3","role":"editor","password":"` + testPassword + `","policies":"x"}`, "policies"},
	} {
		resp, m := e.apiJSON(t, "POST", "/api/v1/users", c.body)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(m["error"].(string), c.want) {
			t.Errorf("%s: %d %v, want 400 saying %q", c.body, resp.StatusCode, m, c.want)
		}
	}
	if us, _ := e.auth.Users(context.Background()); len(us) != 0 {
		t.Errorf("users stored from refused requests: %+v", us)
	}
}

// TestScopedEditorTriesAndPromotesOnlyItsPolicies: a trial's draft is a
// save to come, so the scope applies to starting one and to promoting
// one, whoever started it.
func TestScopedEditorTriesAndPromotesOnlyItsPolicies(t *testing.T) {
	e := newTrialEnv(t)
	if resp, _ := e.apiJSON(t, "POST", "/api/v1/policy", saveRequestBody(1, twoTeams("10", "20"))); resp.StatusCode != http.StatusCreated {
		t.Fatal("admin save")
	}
	if resp, m := e.apiJSON(t, "POST", "/api/v1/users", `{"name":"pay","role":"editor","password":"`+testPassword+`","policies":["payments-*"]}`); resp.StatusCode != http.StatusCreated {
		t.Fatalf("creating a scoped editor: %d %v", resp.StatusCode, m)
	}
	tok, _, err := e.auth.CreateToken(context.Background(), "pay", "ci")
	if err != nil {
		t.Fatal(err)
	}
	v := formatNumber(e.currentVersion(t))
	resp, m := e.call(t, "POST", "/api/v1/trial", tok, "application/json", `{"base_version":`+v+`,"policy":`+twoTeams("10", "5")+`}`)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(m["error"].(string), `policy "search" changed`) {
		t.Errorf("trying a change of search: %d %v, want 403", resp.StatusCode, m)
	}
	if _, running := e.trials.Running(); running {
		t.Fatal("a trial started outside the scope")
	}
	// The admin tries the same draft; the scoped editor may not promote it.
	if resp, m := e.apiJSON(t, "POST", "/api/v1/trial", `{"base_version":`+v+`,"policy":`+twoTeams("10", "5")+`}`); resp.StatusCode != http.StatusCreated {
		t.Fatalf("admin trial: %d %v", resp.StatusCode, m)
	}
	resp, m = e.call(t, "POST", "/api/v1/trial/promote", tok, "application/json", `{}`)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(m["error"].(string), `"search"`) {
		t.Errorf("promoting a trial of search: %d %v, want 403", resp.StatusCode, m)
	}
	if _, running := e.trials.Running(); !running {
		t.Error("the refused promotion ended the trial")
	}
	e.apiJSON(t, "POST", "/api/v1/trial/end", `{}`)
	// Its own policy: tried and promoted.
	if resp, m := e.call(t, "POST", "/api/v1/trial", tok, "application/json", `{"base_version":`+v+`,"policy":`+twoTeams("5", "20")+`}`); resp.StatusCode != http.StatusCreated {
		t.Fatalf("trying its own policy: %d %v", resp.StatusCode, m)
	}
	if resp, m := e.call(t, "POST", "/api/v1/trial/promote", tok, "application/json", `{}`); resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		t.Errorf("promoting its own trial: %d %v", resp.StatusCode, m)
	}
}

// TestUsersPageSetsAndShowsAnEditorsPolicies: the users page's forms set
// the policies an editor may change, show them escaped, and clear them.
func TestUsersPageSetsAndShowsAnEditorsPolicies(t *testing.T) {
	e := newEnv(t, nil)
	admin := login(t, e, "ops")
	page := get(t, admin, e.srv.URL+"/users")
	resp, html := post(t, admin, e.srv.URL+"/users", url.Values{"csrf": {csrfOf(t, page)}, "name": {"pay"}, "role": {"editor"},
		"password": {testPassword}, "policies": {"search, payments-*"}})
	if resp.StatusCode != http.StatusOK || !strings.Contains(html, "<code>payments-*,search</code>") {
		t.Fatalf("creating with policies: %d, want the users page showing them", resp.StatusCode)
	}
	resp, html = post(t, admin, e.srv.URL+"/users/pay", url.Values{"csrf": {csrfOf(t, html)}, "role": {"editor"}, "policies": {"<b>"}})
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(html, "&#34;&lt;b&gt;&#34; is not a policy name") {
		t.Errorf("a bad pattern: %d, want 400 naming it, escaped", resp.StatusCode)
	}
	resp, _ = post(t, admin, e.srv.URL+"/users/pay", url.Values{"csrf": {csrfOf(t, html)}, "role": {"editor"}, "policies": {""}})
	if us, _ := e.auth.Users(context.Background()); resp.StatusCode != http.StatusOK || len(us) != 1 || us[0].Policies != "" {
		t.Errorf("clearing the policies: %d %+v", resp.StatusCode, us)
	}
}
