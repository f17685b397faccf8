package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/admin/auth"
	"github.com/sluice-rl/sluice/admin/store"
)

// burstTests pin perIP's burst of 10 per client address.
const burstTests = `tests:
  - name: a client gets a burst of 10
    request: {client_address: 10.0.0.1}
    steps:
      - repeat: 10
        expect: {status: 200, rule: per-ip}
      - expect: {status: 429, rule: per-ip}
`

var perIPBurst20 = strings.Replace(perIP, `"burst":10`, `"burst":20`, 1)

func (e *env) savePolicy(t *testing.T, base int64, doc string) {
	t.Helper()
	if resp, m := e.apiJSON(t, "POST", "/api/v1/policy", `{"base_version":`+itoa64(base)+`,"policy":`+doc+`}`); resp.StatusCode != http.StatusCreated {
		t.Fatalf("save: %d %v", resp.StatusCode, m)
	}
}

func itoa64(n int64) string { b, _ := json.Marshal(n); return string(b) }

func TestAPISavedTestsGuardSaves(t *testing.T) {
	e := newEnv(t, nil)
	e.savePolicy(t, 1, perIP)
	if resp, m := e.apiJSON(t, "GET", "/api/v1/policy/tests", ""); resp.StatusCode != http.StatusOK || m["revision"] != 0.0 || m["tests"] != "" {
		t.Fatalf("no tests: %d %v", resp.StatusCode, m)
	}
	resp, m := e.apiJSON(t, "PUT", "/api/v1/policy/tests", `{"base_revision":0,"tests":`+jsonString(burstTests)+`}`)
	if resp.StatusCode != http.StatusOK || m["revision"] != 1.0 || m["author"] != "api" {
		t.Fatalf("saving tests: %d %v", resp.StatusCode, m)
	}
	// A save that breaks them is refused with the report.
	resp, m = e.apiJSON(t, "POST", "/api/v1/policy", `{"base_version":2,"policy":`+perIPBurst20+`}`)
	tests, _ := m["tests"].(map[string]any)
	if resp.StatusCode != http.StatusUnprocessableEntity || tests == nil || tests["failed"] != 1.0 || tests["revision"] != 1.0 ||
		!strings.Contains(m["error"].(string), `fails 1 of 1 saved tests ("a client gets a burst of 10")`) {
		t.Fatalf("a save breaking the tests: %d %v", resp.StatusCode, m)
	}
	failure := tests["tests"].([]any)[0].(map[string]any)["failure"].(map[string]any)
	if failure["step"] != "tests[0].steps[1]" || failure["mismatches"].([]any)[0] != "status: got 200, want 429" {
		t.Fatalf("failure %v", failure)
	}
	if cur, _ := e.svc.Current(context.Background()); cur.Number != 2 {
		t.Fatalf("the refused save stored v%d", cur.Number)
	}
	// On purpose: saved, and the audit log says so.
	resp, m = e.apiJSON(t, "POST", "/api/v1/policy", `{"base_version":2,"policy":`+perIPBurst20+`,"message":"burst 20","skip_tests":true}`)
	if resp.StatusCode != http.StatusCreated || m["version"] != 3.0 {
		t.Fatalf("skip_tests: %d %v", resp.StatusCode, m)
	}
	entries, err := e.st.ListAudit(context.Background(), store.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var details []string
	for _, a := range entries {
		details = append(details, a.Action+": "+a.Detail)
	}
	all := strings.Join(details, "\n")
	if !strings.Contains(all, ActionSave+": burst 20 [saved without running the tests]") || !strings.Contains(all, ActionTestsSave+": revision 1, ") {
		t.Fatalf("audit:\n%s", all)
	}
}

func TestAPISavingTestsIsCheckedLikeASave(t *testing.T) {
	e := newEnv(t, nil)
	e.savePolicy(t, 1, perIPBurst20)
	// Tests the current version fails are refused, with the report.
	resp, m := e.apiJSON(t, "PUT", "/api/v1/policy/tests", `{"base_revision":0,"tests":`+jsonString(burstTests)+`}`)
	if tests, _ := m["tests"].(map[string]any); resp.StatusCode != http.StatusUnprocessableEntity || tests == nil || tests["failed"] != 1.0 {
		t.Fatalf("tests failing now: %d %v", resp.StatusCode, m)
	}
	// A file with a mistake: each named with its line.
	resp, m = e.apiJSON(t, "PUT", "/api/v1/policy/tests", `{"base_revision":0,"tests":"tests:\n  - name: a\n    expect: {status: 20}\n"}`)
	errs, _ := m["errors"].([]any)
	if resp.StatusCode != http.StatusUnprocessableEntity || len(errs) != 1 {
		t.Fatalf("a file with a mistake: %d %v", resp.StatusCode, m)
	}
	if e0 := errs[0].(map[string]any); e0["path"] != "tests[0].expect.status" || e0["line"] != 3.0 {
		t.Fatalf("error %v", e0)
	}
	pass := strings.Replace(burstTests, "repeat: 10", "repeat: 20", 1)
	if resp, m := e.apiJSON(t, "PUT", "/api/v1/policy/tests", `{"base_revision":0,"tests":`+jsonString(pass)+`}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("passing tests: %d %v", resp.StatusCode, m)
	}
	resp, m = e.apiJSON(t, "PUT", "/api/v1/policy/tests", `{"base_revision":0,"tests":""}`)
	if resp.StatusCode != http.StatusConflict || m["current_revision"] != 1.0 {
		t.Fatalf("a stale revision: %d %v", resp.StatusCode, m)
	}
	if resp, m := e.apiJSON(t, "PUT", "/api/v1/policy/tests", `{"tests":""}`); resp.StatusCode != http.StatusBadRequest || m["field"] != "base_revision" {
		t.Fatalf("no base: %d %v", resp.StatusCode, m)
	}
	// Running: the saved tests or a given file, against a draft, a version
	// or the current policy; a viewer may.
	viewer := addUser(t, e, "vera", auth.RoleViewer)
	for _, c := range []struct {
		body           string
		failed, passed float64
	}{
		{`{}`, 0, 1},
		{`{"version":1}`, 1, 0}, // the default policy: shadow mode refuses nothing
		{`{"policy":` + perIP + `}`, 1, 0},
		{`{"policy":` + perIP + `,"tests":` + jsonString(burstTests) + `}`, 0, 1},
	} {
		resp, m := e.call(t, "POST", "/api/v1/policy/tests/run", viewer, "application/json", c.body)
		if resp.StatusCode != http.StatusOK || m["failed"] != c.failed || m["passed"] != c.passed {
			t.Errorf("run %s: %d %v", c.body, resp.StatusCode, m)
		}
	}
	if resp, _ := e.call(t, "PUT", "/api/v1/policy/tests", viewer, "application/json", `{"base_revision":1,"tests":""}`); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a viewer saved tests: %d", resp.StatusCode)
	}
}

func TestScopedEditorMayNotChangeTheTests(t *testing.T) {
	e := newEnv(t, nil)
	if resp, m := e.apiJSON(t, "POST", "/api/v1/users", `{"name":"pay","role":"editor","password":"`+testPassword+`","policies":["payments-*"]}`); resp.StatusCode != http.StatusCreated {
		t.Fatalf("creating a scoped editor: %d %v", resp.StatusCode, m)
	}
	tok, _, err := e.auth.CreateToken(context.Background(), "pay", "ci")
	if err != nil {
		t.Fatal(err)
	}
	resp, m := e.call(t, "PUT", "/api/v1/policy/tests", tok, "application/json", `{"base_revision":0,"tests":""}`)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(m["error"].(string), "the tests check every policy") {
		t.Fatalf("a scoped editor: %d %v", resp.StatusCode, m)
	}
}

func TestTestsPageRunsAndSavesAndThePolicyPageShowsARefusal(t *testing.T) {
	e := newEnv(t, nil)
	e.savePolicy(t, 1, perIP)
	c := login(t, e, "alice")
	page := get(t, c, e.srv.URL+"/tests")
	if !strings.Contains(page, "No tests are saved") || !strings.Contains(page, "a health check is never limited") {
		t.Fatalf("empty tests page:\n%s", page)
	}
	tok := csrfOf(t, page)
	failing := strings.Replace(burstTests, "repeat: 10", "repeat: 11", 1)
	resp, body := post(t, c, e.srv.URL+"/tests/run", url.Values{"csrf": {tok}, "tests": {failing}})
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "1 of 1 tests fail against the current policy (v2)") ||
		!strings.Contains(body, "status: got 429, want 200") || !strings.Contains(body, `id="test-report"`) {
		t.Fatalf("run: %d\n%s", resp.StatusCode, body)
	}
	resp, body = post(t, c, e.srv.URL+"/tests", url.Values{"csrf": {tok}, "tests": {failing}, "base_revision": {"0"}})
	if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, "Not saved: the current policy fails these tests") {
		t.Fatalf("saving failing tests: %d\n%s", resp.StatusCode, body)
	}
	resp, body = post(t, c, e.srv.URL+"/tests", url.Values{"csrf": {tok}, "tests": {"tests:\n  - name: x\n    expect: {status: no}\n"}, "base_revision": {"0"}})
	if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, "tests[0].expect.status (line 3)") {
		t.Fatalf("a file with a mistake: %d\n%s", resp.StatusCode, body)
	}
	resp, _ = post(t, c, e.srv.URL+"/tests", url.Values{"csrf": {tok}, "tests": {burstTests}, "base_revision": {"0"}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("saving: %d", resp.StatusCode)
	}
	if page := get(t, c, e.srv.URL+"/tests"); !strings.Contains(page, "Revision 1 by alice") {
		t.Fatalf("saved:\n%s", page)
	}
	resp, _ = post(t, c, e.srv.URL+"/tests", url.Values{"csrf": {tok}, "tests": {burstTests}, "base_revision": {"0"}})
	if resp.StatusCode != http.StatusConflict {
		t.Fatalf("a stale revision: %d", resp.StatusCode)
	}

	// The policy page: the saved tests run on the draft, and a save they
	// refuse shows why and offers to save without them.
	form := url.Values{"csrf": {tok}, "base_version": {"2"}, "policy": {perIPBurst20}, "message": {"burst 20"}}
	resp, body = post(t, c, e.srv.URL+"/policy/test", form)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "1 of 1 tests fail against the draft") || strings.Contains(body, `id="skip_tests"`) {
		t.Fatalf("running the tests on the draft: %d\n%s", resp.StatusCode, body)
	}
	resp, body = post(t, c, e.srv.URL+"/policy", form)
	if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, "Not saved: the policy fails 1 of 1 saved tests") ||
		!strings.Contains(body, `id="skip_tests"`) || !strings.Contains(body, "by the saved tests (revision 1)") {
		t.Fatalf("a save the tests refuse: %d\n%s", resp.StatusCode, body)
	}
	form.Set("skip_tests", "on")
	if resp, _ := post(t, c, e.srv.URL+"/policy", form); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("saving without the tests: %d", resp.StatusCode)
	}
	if cur, _ := e.svc.Current(context.Background()); cur.Number != 3 {
		t.Fatalf("current v%d, want 3", cur.Number)
	}
}

func TestAPISaveWithTestsReplacesThem(t *testing.T) {
	e := newEnv(t, nil)
	e.savePolicy(t, 1, perIP)
	if resp, m := e.apiJSON(t, "PUT", "/api/v1/policy/tests", `{"base_revision":0,"tests":`+jsonString(burstTests)+`}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("saving tests: %d %v", resp.StatusCode, m)
	}
	burst20 := strings.Replace(burstTests, "repeat: 10", "repeat: 20", 1)
	resp, m := e.apiJSON(t, "POST", "/api/v1/policy", `{"base_version":2,"policy":`+perIPBurst20+`,"tests":`+jsonString(burst20)+`}`)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("a save with its tests: %d %v", resp.StatusCode, m)
	}
	if _, m := e.apiJSON(t, "GET", "/api/v1/policy/tests", ""); m["revision"] != 2.0 || m["tests"] != burst20 {
		t.Fatalf("tests after: %v", m)
	}
	resp, m = e.apiJSON(t, "POST", "/api/v1/policy", `{"base_version":3,"policy":`+perIP+`,"tests":`+jsonString("tests: [{name: a, expect: {status: 2}}]")+`}`)
	if resp.StatusCode != http.StatusUnprocessableEntity || m["errors"] == nil {
		t.Fatalf("a save with tests that have a mistake: %d %v", resp.StatusCode, m)
	}
}

// The trial page warns when the trial's draft fails the saved tests: its
// promotion would be refused.
func TestTrialPageWarnsThatTheDraftFailsTheSavedTests(t *testing.T) {
	e := newTrialEnv(t)
	tests := "tests: [{name: ten requests pass, request: {client_address: 10.0.0.1}, repeat: 10, expect: {status: 200}}]\n"
	if resp, m := e.apiJSON(t, "PUT", "/api/v1/policy/tests", `{"base_revision":0,"tests":`+jsonString(tests)+`}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("saving tests: %d %v", resp.StatusCode, m)
	}
	c := login(t, e.env, "alice")
	if page := get(t, c, e.srv.URL+"/trial"); strings.Contains(page, "saved tests") {
		t.Fatal("a warning without a trial")
	}
	e.apiJSON(t, "POST", "/api/v1/trial", `{"policy":`+trialDraft+`}`) // a burst of 2
	if page := get(t, c, e.srv.URL+"/trial"); !strings.Contains(page, "The draft fails 1 of 1 saved tests (revision 1): promoting it will be refused") {
		t.Fatalf("no warning:\n%s", page)
	}
}

// A run names the rules no request of the tests applied.
func TestTestRunsNameTheRulesTheyDoNotExercise(t *testing.T) {
	e := newEnv(t, nil)
	two := `{"rules":[{"name":"admin","match":{"path_prefix":"/admin"},"limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":1}},` +
		`{"name":"per-ip","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":5,"burst":10}}]}`
	tests := "tests: [{name: any, request: {path: /x}, expect: {status: 200, rule: per-ip}}]"
	resp, m := e.apiJSON(t, "POST", "/api/v1/policy/tests/run", `{"policy":`+two+`,"tests":`+jsonString(tests)+`}`)
	if un, _ := m["unexercised"].([]any); resp.StatusCode != http.StatusOK || len(un) != 1 || un[0] != "default/admin" {
		t.Fatalf("run: %d %v", resp.StatusCode, m)
	}
	e.savePolicy(t, 1, two)
	c := login(t, e, "alice")
	tok := csrfOf(t, get(t, c, e.srv.URL+"/tests"))
	if _, body := post(t, c, e.srv.URL+"/tests/run", url.Values{"csrf": {tok}, "tests": {tests}}); !strings.Contains(body, "Not exercised (no request of the tests applies them): default/admin") {
		t.Fatalf("the page:\n%s", body)
	}
}
