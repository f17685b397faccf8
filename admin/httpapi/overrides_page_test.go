package httpapi

import (
	"bytes"
	"context"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/admin/auth"
	"github.com/sluice-rl/sluice/admin/policies"
	"github.com/sluice-rl/sluice/admin/store"
	"github.com/sluice-rl/sluice/shared/policy"
)

// postImport posts the import form as a browser does (multipart, the CSV
// as an uploaded file when file is set, else pasted).
func postImport(t *testing.T, c *http.Client, e *env, fields url.Values, file string) (*http.Response, string) {
	t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	for k, vs := range fields {
		for _, v := range vs {
			mw.WriteField(k, v)
		}
	}
	if file != "" {
		fw, err := mw.CreateFormFile("csv_file", "plans.csv")
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(fw, file)
	}
	mw.Close()
	req, _ := http.NewRequest("POST", e.srv.URL+"/policy/overrides", &body)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// importEnv is an admin whose v2 is perIP, with an editor logged in.
func importEnv(t *testing.T) (*env, *http.Client, string) {
	t.Helper()
	e := newEnv(t, nil)
	if resp, body := e.apiJSON(t, "POST", "/api/v1/policy", `{"base_version":1,"policy":`+perIP+`}`); resp.StatusCode != http.StatusCreated {
		t.Fatalf("save: %d %v", resp.StatusCode, body)
	}
	c := login(t, e, "ed")
	return e, c, csrfOf(t, get(t, c, e.srv.URL+"/"))
}

func currentOverrides(t *testing.T, e *env) (int64, []policy.Override) {
	t.Helper()
	return currentOverridesOf(t, e, "per-ip")
}

// currentOverridesOf returns the current version and the overrides of its
// rule named rule.
func currentOverridesOf(t *testing.T, e *env, rule string) (int64, []policy.Override) {
	t.Helper()
	cur, err := e.svc.Current(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := policy.Parse(cur.JSON)
	if err != nil {
		t.Fatal(err)
	}
	return cur.Number, cfg.RuleByName(rule).Overrides
}

func TestImportFormPreviewsAnUploadThenSavesANewVersion(t *testing.T) {
	e, c, csrf := importEnv(t)
	page := get(t, c, e.srv.URL+"/")
	if !strings.Contains(page, `id="overrides-form"`) || !strings.Contains(page, `<option value="per-ip"`) {
		t.Fatalf("the policy page lacks the import form with the rule:\n%s", page)
	}
	const table = "key,tokens_per_second,burst\n10.0.0.1,50,100\n10.0.0.2,,20\n"
	resp, body := postImport(t, c, e, url.Values{"csrf": {csrf}, "base_version": {"2"}, "rule": {"per-ip"}, "op": {"preview"}}, table)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("preview: %d\n%s", resp.StatusCode, body)
	}
	for _, want := range []string{
		`2 rows read: 2 added, 0 replaced; the rule will have 2 overrides.`,
		`<tr data-key="10.0.0.1"><td>2</td><td><code>10.0.0.1</code></td><td>50</td><td>100</td></tr>`,
		`id="ov-save"`, ">" + table + "</textarea>", // the upload comes back as text, for Save
	} {
		if !strings.Contains(body, want) {
			t.Errorf("preview lacks %s:\n%s", want, body)
		}
	}
	if n, _ := currentOverrides(t, e); n != 2 {
		t.Fatalf("a preview saved v%d", n)
	}

	resp, body = postImport(t, c, e, url.Values{"csrf": {csrf}, "base_version": {"2"}, "rule": {"per-ip"}, "op": {"save"}, "csv": {table}}, "")
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/?saved=3" {
		t.Fatalf("save: %d %s\n%s", resp.StatusCode, resp.Header.Get("Location"), body)
	}
	n, ov := currentOverrides(t, e)
	if n != 3 || len(ov) != 2 || ov[0].Key != "10.0.0.1" || ov[0].TokenBucket.Burst != 100 || ov[1].TokenBucket.TokensPerSecond != 5 {
		t.Fatalf("v%d overrides %+v", n, ov)
	}
	es, _ := e.st.ListAudit(context.Background(), store.AuditFilter{Action: ActionSave})
	if len(es) == 0 || es[0].Version != 3 || es[0].FromVersion != 2 || es[0].Actor != "ed" ||
		es[0].Detail != "Imported 2 overrides into rule per-ip from CSV (2 added, 0 replaced)" {
		t.Errorf("audit: %+v", es)
	}
	if page := get(t, c, e.srv.URL+"/"); !strings.Contains(page, `data-overrides="2"`) {
		t.Errorf("the rule list does not show the 2 overrides:\n%s", page)
	}
}

var problemRe = regexp.MustCompile(`<li data-line="(\d+)" data-column="([^"]*)">.*?<span class="msg">([^<]*)</span>`)

func TestImportFormNamesTheBadLineAndColumn(t *testing.T) {
	e, c, csrf := importEnv(t)
	for _, tc := range []struct{ csv, line, column, msg string }{
		{"key,burst\n10.0.0.1,40\n10.0.0.2,ten\n", "3", "burst", `burst: &#34;ten&#34; is not a number`},
		{"key,burst\n10.0.0.1,40\n10.0.0.1,50\n", "3", "key", `key &#34;10.0.0.1&#34; is also on line 2`},
		{"key,burst\n10.0.0.1,40\n10.0.0.9,2\n", "3", "burst", `burst: 2 is below tokens_per_second 5`}, // the filter's own check
		{"key,cost\na,1\n", "1", "cost", `unknown column &#34;cost&#34;`},
	} {
		resp, body := postImport(t, c, e, url.Values{"csrf": {csrf}, "base_version": {"2"}, "rule": {"per-ip"}, "op": {"save"}, "csv": {tc.csv}}, "")
		if resp.StatusCode != http.StatusUnprocessableEntity {
			t.Errorf("%q: %d, want 422", tc.csv, resp.StatusCode)
			continue
		}
		m := problemRe.FindStringSubmatch(body)
		if m == nil || m[1] != tc.line || m[2] != tc.column || !strings.Contains(m[3], tc.msg) {
			t.Errorf("%q: problem %q, want line %s column %s: %s\n%s", tc.csv, m, tc.line, tc.column, tc.msg, body)
		}
		if strings.Contains(body, `id="ov-save"`) {
			t.Errorf("%q: a refused import offers Save", tc.csv)
		}
	}
	if n, _ := currentOverrides(t, e); n != 2 {
		t.Errorf("a refused import saved v%d", n)
	}
}

func TestImportFormRefusesAStaleBase(t *testing.T) {
	e, c, csrf := importEnv(t)
	if resp, body := e.apiJSON(t, "POST", "/api/v1/policy", `{"base_version":2,"message":"meanwhile","policy":`+perIP+`}`); resp.StatusCode != http.StatusCreated {
		t.Fatalf("save: %d %v", resp.StatusCode, body)
	}
	resp, body := postImport(t, c, e, url.Values{"csrf": {csrf}, "base_version": {"2"}, "rule": {"per-ip"}, "op": {"save"}, "csv": {"key,burst\na,20\n"}}, "")
	if resp.StatusCode != http.StatusConflict || !strings.Contains(body, "v3 is current now") ||
		!strings.Contains(body, `name="base_version" value="3"`) {
		t.Fatalf("stale save: %d\n%s", resp.StatusCode, body)
	}
	if n, ov := currentOverrides(t, e); n != 3 || len(ov) != 0 {
		t.Errorf("a stale import saved: v%d %+v", n, ov)
	}
}

func TestImportFormIsForEditorsWithTheirCSRFToken(t *testing.T) {
	e, editor, _ := importEnv(t)
	fields := url.Values{"base_version": {"2"}, "rule": {"per-ip"}, "op": {"save"}, "csv": {"key,burst\na,20\n"}}
	if resp, body := postImport(t, editor, e, fields, ""); resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "CSRF") {
		t.Errorf("without the CSRF token: %d\n%s", resp.StatusCode, body)
	}

	addUser(t, e, "vera", auth.RoleViewer)
	viewer := loginAs(t, e, "vera")
	page := get(t, viewer, e.srv.URL+"/")
	if strings.Contains(page, "overrides-form") {
		t.Error("a viewer is shown the import form")
	}
	if own := get(t, viewer, e.srv.URL+"/policy/overrides"); strings.Contains(own, `id="ov-rule"`) || !strings.Contains(own, "it needs the editor role") {
		t.Errorf("the import page for a viewer:\n%s", own)
	}
	fields.Set("csrf", csrfOf(t, page))
	if resp, body := postImport(t, viewer, e, fields, ""); resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "editor role") {
		t.Errorf("viewer: %d\n%s", resp.StatusCode, body)
	}
	if n, _ := currentOverrides(t, e); n != 2 {
		t.Errorf("a refused import saved v%d", n)
	}
}

func TestImportFormRefusesAnUploadOverTheBodyLimit(t *testing.T) {
	e, c, csrf := importEnv(t)
	big := "key,burst\n" + strings.Repeat("10.0.0.1,40\n", 8000) // about 96 kB; the test admin takes 64 KiB
	resp, body := postImport(t, c, e, url.Values{"csrf": {csrf}, "base_version": {"2"}, "rule": {"per-ip"}, "op": {"save"}}, big)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(body, "the limit is 65536 bytes") {
		t.Errorf("too large: %d\n%s", resp.StatusCode, body)
	}
	if n, _ := currentOverrides(t, e); n != 2 {
		t.Errorf("saved v%d", n)
	}
}

// A global rule takes overrides too (the rate limit service holds each
// listed identity to its own limit): the import form offers it.
func TestImportFormTakesATableForAGlobalRule(t *testing.T) {
	e := newEnv(t, nil)
	const global = `{"fleet":{"cluster":"sluice_rls"},"rules":[{"name":"tenants","scope":"global","limit_keys":["header:x-tenant"],` +
		`"algorithm":"fixed_window","algorithm_config":{"limit":100,"window_seconds":60}}]}`
	if resp, body := e.apiJSON(t, "POST", "/api/v1/policy", `{"base_version":1,"policy":`+global+`}`); resp.StatusCode != http.StatusCreated {
		t.Fatalf("save: %d %v", resp.StatusCode, body)
	}
	c := login(t, e, "ed")
	csrf := csrfOf(t, get(t, c, e.srv.URL+"/"))
	if page := get(t, c, e.srv.URL+"/policy/overrides"); !strings.Contains(page, `<option value="tenants"`) {
		t.Fatalf("the import form does not offer the global rule:\n%s", page)
	}
	resp, body := postImport(t, c, e, url.Values{"csrf": {csrf}, "base_version": {"2"}, "rule": {"tenants"}, "op": {"save"},
		"csv": {"key,limit\nacme,1000\n"}}, "")
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("save: %d\n%s", resp.StatusCode, body)
	}
	if n, ov := currentOverridesOf(t, e, "tenants"); n != 3 || len(ov) != 1 || ov[0].Key != "acme" || ov[0].Window.Limit != 1000 {
		t.Fatalf("v%d overrides %+v", n, ov)
	}
}

// The rule list says how many overrides hold for a time, how many weekly,
// and when the next of their bounds comes, so an operator sees a raised
// limit's end.
func TestRuleListShowsOverridesForATime(t *testing.T) {
	e := newEnv(t, nil)
	c := login(t, e, "alice")
	body := `{"rules":[{"name":"api","limit_keys":["header:x-api-key"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":2},
	  "overrides":[{"key":"a","algorithm_config":{"burst":5}},
	    {"key":"b","algorithm_config":{"burst":5},"from":"2020-01-01T00:00:00Z","until":"2199-06-01T00:00:00Z"},
	    {"key":"c","algorithm_config":{"burst":5},"from":"2198-01-01T12:30:00+01:00"},
	    {"key":"d","algorithm_config":{"burst":5},"schedule":{"days":["sat","sun"]}}]}]}`
	if _, err := e.svc.Save(context.Background(), policies.SaveRequest{Base: 1, JSON: []byte(body)}); err != nil {
		t.Fatal(err)
	}
	page := get(t, c, e.srv.URL+"/")
	for _, want := range []string{`data-overrides="4"`, `data-timed="2"`, `data-weekly="1"`, "(2 for a time, 1 weekly; the next starts or ends 2198-01-01 11:30:00 UTC"} {
		if !strings.Contains(page, want) {
			t.Errorf("the rule list lacks %s", want)
		}
	}
}
