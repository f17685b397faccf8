package httpapi

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/sluice-rl/sluice/admin/auth"
	"github.com/sluice-rl/sluice/admin/istio"
	"github.com/sluice-rl/sluice/admin/policies"
	"github.com/sluice-rl/sluice/admin/store"
	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/web"
)

const testToken = "test-admin-token-0123456789"

type fakeNodes []NodeStatus

func (f fakeNodes) Nodes() []NodeStatus { return f }

type env struct {
	srv  *httptest.Server
	svc  *policies.Service
	st   *store.Store
	auth *auth.Manager
}

func newEnv(t *testing.T, mod func(*Config)) *env {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	svc := policies.New(st, nil, nil)
	if _, err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	am, _, err := auth.Setup(ctx, st, testToken)
	if err != nil {
		t.Fatal(err)
	}
	am.SetPasswordCost(bcrypt.MinCost)
	cfg := Config{
		Policies: svc, Auth: am, MaxBodyBytes: 64 << 10, Audit: st,
		Nodes: fakeNodes{
			{ID: "envoy-b", Cluster: "edge", Connected: true, LastSeen: time.Unix(1700000000, 0), AckedVersion: "1"},
			{ID: "envoy-a", Cluster: "edge", Connected: false, AckedVersion: "0", NackedVersion: "1", NackError: "rules[0].name: <bad>"},
		},
	}
	if mod != nil {
		mod(&cfg)
	}
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &env{srv: srv, svc: svc, st: st, auth: am}
}

// call sends an API request; token "" sends none. An answer to an
// /api/v1 request must be one the OpenAPI document allows
// (checkOpenAPIResponse in openapi_test.go).
func (e *env) call(t *testing.T, method, path, token, contentType, body string) (*http.Response, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	checkOpenAPIResponse(t, method, path, resp, raw)
	var m map[string]any
	json.Unmarshal(raw, &m)
	if m == nil {
		m = map[string]any{"_raw": string(raw)}
	}
	return resp, m
}

func (e *env) apiJSON(t *testing.T, method, path, body string) (*http.Response, map[string]any) {
	t.Helper()
	return e.call(t, method, path, testToken, "application/json", body)
}

var apiRoutes = []struct{ method, path string }{
	{"GET", "/api/v1/policy"},
	{"POST", "/api/v1/policy"},
	{"POST", "/api/v1/policy/validate"},
	{"POST", "/api/v1/policy/simulate"},
	{"POST", "/api/v1/policy/overrides"},
	{"GET", "/api/v1/policy/versions"},
	{"GET", "/api/v1/policy/versions/1"},
	{"GET", "/api/v1/policy/diff?from=0&to=1"},
	{"POST", "/api/v1/policy/rollback"},
	{"GET", "/api/v1/policy/export"},
	{"GET", "/api/v1/policy/schema"},
	{"GET", "/api/v1/istio/wasmplugin"},
	{"GET", "/api/v1/nodes"},
	{"GET", "/api/v1/resets"},
	{"POST", "/api/v1/resets"},
	{"GET", "/api/v1/nope"},
}

const perIP = `{"rules":[{"name":"per-ip","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":5,"burst":10}}]}`

func TestAPIRequiresTokenForEveryRoute(t *testing.T) {
	e := newEnv(t, nil)
	body := `{"base_version":1,"policy":` + perIP + `}`
	for _, rt := range apiRoutes {
		for _, tok := range []string{"", "wrong-token-wrong-token", "Basic " + testToken} {
			req, _ := http.NewRequest(rt.method, e.srv.URL+rt.path, strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			if strings.HasPrefix(tok, "Basic ") {
				req.Header.Set("Authorization", tok)
			} else if tok != "" {
				req.Header.Set("Authorization", "Bearer "+tok)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("%s %s with %q: %d, want 401 with a Bearer challenge", rt.method, rt.path, tok, resp.StatusCode)
			}
		}
	}
	if cur, _ := e.svc.Current(context.Background()); cur.Number != 1 {
		t.Errorf("an unauthenticated request changed the policy to v%d", cur.Number)
	}
}

func TestPagesRequireSession(t *testing.T) {
	e := newEnv(t, nil)
	client := noRedirect(nil)
	for _, rt := range []struct{ method, path string }{
		{"GET", "/"}, {"GET", "/history"}, {"GET", "/history/1"}, {"GET", "/nodes"}, {"GET", "/istio"},
		{"GET", "/istio/wasmplugin.yaml"}, {"GET", "/export"}, {"GET", "/schema.json"},
		{"POST", "/policy"}, {"POST", "/rollback"}, {"POST", "/logout"},
	} {
		req, _ := http.NewRequest(rt.method, e.srv.URL+rt.path, strings.NewReader("policy="+url.QueryEscape(perIP)+"&base_version=1&to=1"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.AddCookie(&http.Cookie{Name: sessionCookie, Value: "forged-session-id"})
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		loc := resp.Header.Get("Location")
		if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/login?next=") {
			t.Errorf("%s %s: %d %q, want a redirect to the login page", rt.method, rt.path, resp.StatusCode, loc)
		}
		if rt.method == "GET" && loc != "/login?next="+url.QueryEscape(rt.path) {
			t.Errorf("%s: next = %q", rt.path, loc)
		}
	}
	if cur, _ := e.svc.Current(context.Background()); cur.Number != 1 {
		t.Errorf("a form post without a session changed the policy to v%d", cur.Number)
	}
	// Public routes.
	for _, p := range []string{"/login", "/healthz", "/static/app.css"} {
		resp, err := client.Get(e.srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %d", p, resp.StatusCode)
		}
	}
}

func TestAPISaveConflictValidationRollback(t *testing.T) {
	e := newEnv(t, nil)
	resp, cur := e.apiJSON(t, "GET", "/api/v1/policy", "")
	if resp.StatusCode != 200 || cur["version"] != 1.0 || cur["policy"] == nil || resp.Header.Get("ETag") != `"1"` {
		t.Fatalf("GET policy: %d %v", resp.StatusCode, cur)
	}

	// Save.
	resp, v2 := e.apiJSON(t, "POST", "/api/v1/policy", `{"base_version":1,"policy":`+perIP+`,"message":"per ip","author":"ci"}`)
	if resp.StatusCode != http.StatusCreated || v2["version"] != 2.0 || v2["parent"] != 1.0 || v2["author"] != "ci" || v2["message"] != "per ip" ||
		resp.Header.Get("Location") != "/api/v1/policy/versions/2" {
		t.Fatalf("save: %d %v", resp.StatusCode, v2)
	}
	cfg, _ := policy.Parse([]byte(perIP))
	norm, _ := cfg.MarshalJSON()
	if got, _ := json.Marshal(v2["policy"]); !jsonEqual(got, norm) {
		t.Errorf("saved policy %s, want the normalized %s", got, norm)
	}

	// Stale base: 409 naming the current version.
	resp, body := e.apiJSON(t, "POST", "/api/v1/policy", `{"base_version":1,"policy":`+perIP+`}`)
	if resp.StatusCode != http.StatusConflict || body["current_version"] != 2.0 || body["base_version"] != 1.0 ||
		!strings.Contains(body["error"].(string), "current version is 2") {
		t.Errorf("stale save: %d %v", resp.StatusCode, body)
	}

	// Invalid: 422 with exactly the parser's errors.
	bad := `{"rules":[{"name":"free","limit_keys":["form:x"],"algorithm":"leaky_bucket","algorithm_config":{"tokens_per_second":10,"burst":5}}]}`
	resp, body = e.apiJSON(t, "POST", "/api/v1/policy", `{"base_version":2,"policy":`+bad+`}`)
	_, perr := policy.Parse([]byte(bad))
	var want []map[string]any
	for _, fe := range perr.(policy.Errors) {
		want = append(want, map[string]any{"path": fe.Path, "message": fe.Message})
	}
	var got []map[string]any
	b, _ := json.Marshal(body["errors"])
	json.Unmarshal(b, &got)
	if resp.StatusCode != http.StatusUnprocessableEntity || !reflect.DeepEqual(got, want) {
		t.Errorf("invalid save: %d\n got %v\nwant %v", resp.StatusCode, got, want)
	}
	resp, body = e.apiJSON(t, "POST", "/api/v1/policy/validate", `{"policy":`+bad+`}`)
	if resp.StatusCode != http.StatusUnprocessableEntity {
		t.Errorf("validate invalid: %d %v", resp.StatusCode, body)
	}
	resp, body = e.apiJSON(t, "POST", "/api/v1/policy/validate", `{"policy":`+perIP+`}`)
	if resp.StatusCode != 200 || body["valid"] != true {
		t.Errorf("validate valid: %d %v", resp.StatusCode, body)
	}

	// Rollback.
	resp, v3 := e.apiJSON(t, "POST", "/api/v1/policy/rollback", `{"to":1,"base_version":2}`)
	if resp.StatusCode != http.StatusCreated || v3["version"] != 3.0 || v3["message"] != "rollback to v1" || v3["rollback_of"] != 1.0 || v3["author"] != "api" {
		t.Fatalf("rollback: %d %v", resp.StatusCode, v3)
	}
	resp, body = e.apiJSON(t, "POST", "/api/v1/policy/rollback", `{"to":1,"base_version":2}`)
	if resp.StatusCode != http.StatusConflict {
		t.Errorf("stale rollback: %d %v", resp.StatusCode, body)
	}
	resp, body = e.apiJSON(t, "POST", "/api/v1/policy/rollback", `{"to":42,"base_version":3}`)
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(body["error"].(string), "version 42 does not exist") {
		t.Errorf("rollback to missing: %d %v", resp.StatusCode, body)
	}

	// History and versions.
	resp, list := e.apiJSON(t, "GET", "/api/v1/policy/versions?limit=2", "")
	vs, _ := list["versions"].([]any)
	if resp.StatusCode != 200 || len(vs) != 2 || vs[0].(map[string]any)["version"] != 3.0 || list["next_before"] != 2.0 {
		t.Errorf("versions: %d %v", resp.StatusCode, list)
	}
	if _, ok := vs[0].(map[string]any)["policy"]; ok {
		t.Error("the list carries policies")
	}
	resp, list = e.apiJSON(t, "GET", "/api/v1/policy/versions?before=2", "")
	if vs, _ := list["versions"].([]any); resp.StatusCode != 200 || len(vs) != 1 {
		t.Errorf("page 2: %v", list)
	}
	resp, body = e.apiJSON(t, "GET", "/api/v1/policy/versions/2", "")
	if resp.StatusCode != 200 || body["version"] != 2.0 || body["policy"] == nil {
		t.Errorf("version 2: %d %v", resp.StatusCode, body)
	}
	for _, p := range []string{"/api/v1/policy/versions/99", "/api/v1/policy/versions/x", "/api/v1/policy/versions?limit=x", "/api/v1/policy/versions?before=-1", "/api/v1/policy/diff?to=77"} {
		resp, body = e.apiJSON(t, "GET", p, "")
		if resp.StatusCode != 404 && resp.StatusCode != 400 {
			t.Errorf("%s: %d %v", p, resp.StatusCode, body)
		}
	}

	// Diff: default is the current version against its parent.
	resp, d := e.apiJSON(t, "GET", "/api/v1/policy/diff", "")
	if resp.StatusCode != 200 || d["from"] != 2.0 || d["to"] != 3.0 || !strings.HasPrefix(d["unified"].(string), "--- v2\n+++ v3\n@@") {
		t.Errorf("diff: %d %v", resp.StatusCode, d)
	}
	resp, d = e.apiJSON(t, "GET", "/api/v1/policy/diff?from=1&to=3", "")
	if resp.StatusCode != 200 || d["unified"] != "" || len(d["hunks"].([]any)) != 0 {
		t.Errorf("diff of identical versions: %v", d)
	}
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	json.Unmarshal(a, &x)
	json.Unmarshal(b, &y)
	return reflect.DeepEqual(x, y)
}

func TestAPIBadRequests(t *testing.T) {
	e := newEnv(t, nil)
	for _, c := range []struct {
		name, ct, body string
		status         int
		want           string
	}{
		{"no base", "application/json", `{"policy":` + perIP + `}`, 400, "base_version: required"},
		{"no policy", "application/json", `{"base_version":1}`, 400, "policy: required"},
		{"null policy", "application/json", `{"base_version":1,"policy":null}`, 400, "policy: required"},
		{"unknown field", "application/json", `{"base_version":1,"policy":{},"bsae":2}`, 400, `unknown field "bsae"; allowed fields: base_version, policy, message, author`},
		{"wrong type", "application/json", `{"base_version":"1","policy":{}}`, 400, "base_version: must be an integer, got string"},
		{"not JSON", "application/json", `{"base_version":1,`, 400, "invalid request body"},
		{"empty", "application/json", ``, 400, "the body is empty"},
		{"trailing", "application/json", `{"base_version":1,"policy":{}} {}`, 400, "unexpected data after the JSON object"},
		{"array", "application/json", `[1]`, 400, "must be a JSON object"},
		{"form", "application/x-www-form-urlencoded", `a=b`, 415, "send application/json"},
		{"no content type", "", `{}`, 415, "missing Content-Type"},
		{"negative base", "application/json", `{"base_version":-3,"policy":` + perIP + `}`, 400, "base_version"},
		{"bad message", "application/json", `{"base_version":1,"policy":` + perIP + `,"message":"\u0007"}`, 400, "message: contains"},
		{"too large", "application/json", `{"base_version":1,"policy":{"rules":"` + strings.Repeat("x", 70<<10) + `"}}`, 413, "request body too large: the limit is 65536 bytes"},
	} {
		resp, body := e.call(t, "POST", "/api/v1/policy", testToken, c.ct, c.body)
		msg, _ := body["error"].(string)
		if resp.StatusCode != c.status || !strings.Contains(msg, c.want) {
			t.Errorf("%s: %d %q, want %d containing %q", c.name, resp.StatusCode, msg, c.status, c.want)
		}
	}
	if cur, _ := e.svc.Current(context.Background()); cur.Number != 1 {
		t.Errorf("a bad request changed the policy to v%d", cur.Number)
	}
}

func TestAPIExportSchemaIstioNodes(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Istio = istio.Options{URL: "file:///opt/sluice.wasm"} })
	resp, _ := e.apiJSON(t, "GET", "/api/v1/policy/export", "")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Disposition") != `attachment; filename="sluice-policy-v1.json"` {
		t.Errorf("export: %d %v", resp.StatusCode, resp.Header)
	}
	resp, schema := e.apiJSON(t, "GET", "/api/v1/policy/schema", "")
	if resp.StatusCode != 200 || schema["$id"] != policy.SchemaID || resp.Header.Get("Content-Type") != "application/schema+json" {
		t.Errorf("schema: %d %v", resp.StatusCode, resp.Header)
	}
	resp, y := e.apiJSON(t, "GET", "/api/v1/istio/wasmplugin", "")
	if resp.StatusCode != 200 || !strings.Contains(y["_raw"].(string), "kind: WasmPlugin") || !strings.Contains(y["_raw"].(string), "url: file:///opt/sluice.wasm") {
		t.Errorf("istio yaml: %d %v", resp.StatusCode, y)
	}
	resp, j := e.apiJSON(t, "GET", "/api/v1/istio/wasmplugin?format=json", "")
	if resp.StatusCode != 200 || j["kind"] != "WasmPlugin" {
		t.Errorf("istio json: %d %v", resp.StatusCode, j)
	}
	resp, _ = e.apiJSON(t, "GET", "/api/v1/istio/wasmplugin?format=xml", "")
	if resp.StatusCode != 400 {
		t.Errorf("istio xml: %d", resp.StatusCode)
	}
	resp, n := e.apiJSON(t, "GET", "/api/v1/nodes", "")
	nodes, _ := n["nodes"].([]any)
	if resp.StatusCode != 200 || n["xds"] != true || n["current_version"] != 1.0 || len(nodes) != 2 ||
		nodes[0].(map[string]any)["id"] != "envoy-a" || nodes[0].(map[string]any)["nack_error"] != "rules[0].name: <bad>" {
		t.Errorf("nodes: %v", n)
	}
}

func TestSecurityHeaders(t *testing.T) {
	e := newEnv(t, nil)
	for _, p := range []string{"/login", "/api/v1/policy", "/static/app.js", "/nope"} {
		resp, err := http.Get(e.srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		csp := resp.Header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "frame-ancestors 'none'") || !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") {
			t.Errorf("%s: CSP %q", p, csp)
		}
		if resp.Header.Get("X-Content-Type-Options") != "nosniff" || resp.Header.Get("X-Frame-Options") != "DENY" {
			t.Errorf("%s: headers %v", p, resp.Header)
		}
	}
}

func TestCrossSitePostRefused(t *testing.T) {
	e := newEnv(t, nil)
	c := login(t, e, "alice")
	page := get(t, c, e.srv.URL+"/")
	req, _ := http.NewRequest("POST", e.srv.URL+"/policy", strings.NewReader(url.Values{
		"csrf": {csrfOf(t, page)}, "base_version": {"1"}, "policy": {perIP},
	}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("cross-site form post: %d", resp.StatusCode)
	}
	if cur, _ := e.svc.Current(context.Background()); cur.Number != 1 {
		t.Error("a cross-site post saved")
	}
}

// Browser-side helpers.

func noRedirect(jar http.CookieJar) *http.Client {
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

var csrfRe = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func csrfOf(t *testing.T, html string) string {
	t.Helper()
	m := csrfRe.FindStringSubmatch(html)
	if m == nil {
		t.Fatalf("no CSRF token in page:\n%s", html)
	}
	return m[1]
}

func get(t *testing.T, c *http.Client, u string) string {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d\n%s", u, resp.StatusCode, b)
	}
	return string(b)
}

func post(t *testing.T, c *http.Client, u string, form url.Values) (*http.Response, string) {
	t.Helper()
	resp, err := c.PostForm(u, form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// login logs in with the admin token through the form and returns a
// client holding the session.
func login(t *testing.T, e *env, name string) *http.Client {
	t.Helper()
	return loginWith(t, e, url.Values{"token": {testToken}, "name": {name}})
}

// loginWith posts the login form with the given fields and returns a
// client holding the session.
func loginWith(t *testing.T, e *env, form url.Values) *http.Client {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := noRedirect(jar)
	page := get(t, c, e.srv.URL+"/login?next=/history")
	form.Set("csrf", csrfOf(t, page))
	form.Set("next", "/history")
	resp, body := post(t, c, e.srv.URL+"/login", form)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/history" {
		t.Fatalf("login: %d %s\n%s", resp.StatusCode, resp.Header.Get("Location"), body)
	}
	return c
}

func TestLoginForm(t *testing.T) {
	e := newEnv(t, nil)
	jar, _ := cookiejar.New(nil)
	c := noRedirect(jar)
	page := get(t, c, e.srv.URL+"/login")
	tok := csrfOf(t, page)

	// Without the login cookie's twin, or with a wrong one: refused.
	resp, _ := post(t, noRedirect(nil), e.srv.URL+"/login", url.Values{"csrf": {tok}, "token": {testToken}})
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("login without the login cookie: %d", resp.StatusCode)
	}
	resp, _ = post(t, c, e.srv.URL+"/login", url.Values{"csrf": {"wrong"}, "token": {testToken}})
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("login with a wrong CSRF token: %d", resp.StatusCode)
	}
	// Wrong token.
	page = get(t, c, e.srv.URL+"/login")
	resp, body := post(t, c, e.srv.URL+"/login", url.Values{"csrf": {csrfOf(t, page)}, "token": {"nope"}, "name": {"x"}})
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "Wrong token.") {
		t.Errorf("wrong token: %d", resp.StatusCode)
	}
	// Bad name.
	page = get(t, c, e.srv.URL+"/login")
	resp, _ = post(t, c, e.srv.URL+"/login", url.Values{"csrf": {csrfOf(t, page)}, "token": {testToken}, "name": {"a\x01"}})
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("bad name: %d", resp.StatusCode)
	}
	// Success, with an off-site next: it goes home instead.
	page = get(t, c, e.srv.URL+"/login")
	resp, _ = post(t, c, e.srv.URL+"/login", url.Values{"csrf": {csrfOf(t, page)}, "token": {testToken}, "name": {"bob"}, "next": {"//evil.example/x"}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
		t.Fatalf("login: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	var sess *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == sessionCookie {
			sess = ck
		}
	}
	if sess == nil || !sess.HttpOnly || sess.SameSite != http.SameSiteStrictMode || sess.Secure || sess.Path != "/" {
		t.Errorf("session cookie %+v", sess)
	}
	if home := get(t, c, e.srv.URL+"/"); !strings.Contains(home, ">bob<") {
		t.Error("the page does not show the logged-in name")
	}
	// Logout needs the CSRF token too.
	home := get(t, c, e.srv.URL+"/")
	resp, _ = post(t, c, e.srv.URL+"/logout", url.Values{})
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("logout without CSRF: %d", resp.StatusCode)
	}
	resp, _ = post(t, c, e.srv.URL+"/logout", url.Values{"csrf": {csrfOf(t, home)}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Errorf("logout: %d", resp.StatusCode)
	}
	if _, err := e.auth.Session(context.Background(), sess.Value); err == nil {
		t.Error("the session survived logout")
	}
	for _, next := range []string{"https://evil.example/", "/\\evil", "javascript:alert(1)", "", "/ok?x=1"} {
		want := "/"
		if next == "/ok?x=1" {
			want = next
		}
		if got := localPath(next); got != want {
			t.Errorf("localPath(%q) = %q", next, got)
		}
	}
}

func TestSecureCookies(t *testing.T) {
	for _, c := range []struct {
		name string
		tls  bool
		flag bool
	}{{"flag", false, true}, {"tls", true, false}} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, func(cfg *Config) { cfg.SecureCookies = c.flag })
			srvURL := e.srv.URL
			var client *http.Client
			if c.tls {
				ts := httptest.NewTLSServer(e.srv.Config.Handler)
				defer ts.Close()
				srvURL = ts.URL
				client = ts.Client()
				client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
				client.Transport.(*http.Transport).TLSClientConfig = &tls.Config{InsecureSkipVerify: true}
			} else {
				client = noRedirect(nil)
			}
			resp, err := client.Get(srvURL + "/login")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			for _, ck := range resp.Cookies() {
				if !ck.Secure {
					t.Errorf("cookie %s not Secure", ck.Name)
				}
			}
			if len(resp.Cookies()) == 0 {
				t.Error("no cookie")
			}
		})
	}
}

// TestEditorFormFlow drives the pages as a browser would: CSRF checks,
// inline errors, conflict, save, history, diff, rollback.
func TestEditorFormFlow(t *testing.T) {
	e := newEnv(t, nil)
	c := login(t, e, "alice")
	home := get(t, c, e.srv.URL+"/")
	tok := csrfOf(t, home)
	if !strings.Contains(home, `name="base_version" value="1"`) {
		t.Fatal("editor does not carry the base version")
	}

	// CSRF: missing and wrong tokens are refused and nothing is saved.
	for _, bad := range []string{"", "not-the-token", strings.Repeat("A", len(tok))} {
		resp, _ := post(t, c, e.srv.URL+"/policy", url.Values{"csrf": {bad}, "base_version": {"1"}, "policy": {perIP}})
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("CSRF %q: %d", bad, resp.StatusCode)
		}
	}
	// Another session's token does not work either.
	other := csrfOf(t, get(t, login(t, e, "mallory"), e.srv.URL+"/"))
	if resp, _ := post(t, c, e.srv.URL+"/policy", url.Values{"csrf": {other}, "base_version": {"1"}, "policy": {perIP}}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("another session's CSRF token: %d", resp.StatusCode)
	}
	if cur, _ := e.svc.Current(context.Background()); cur.Number != 1 {
		t.Fatalf("a refused form saved v%d", cur.Number)
	}

	// Invalid: 422, the draft kept, each error next to its line.
	bad := "{\n  \"rules\": [\n    {\n      \"name\": \"per-ip\",\n      \"limit_keys\": [\"ip:address\"],\n      \"algorithm\": \"token_bucket\",\n" +
		"      \"algorithm_config\": {\"rps\": 10, \"burst\": 5}\n    }\n  ]\n}\n"
	resp, body := post(t, c, e.srv.URL+"/policy", url.Values{"csrf": {tok}, "base_version": {"1"}, "policy": {bad}, "message": {"m"}})
	if resp.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("invalid save: %d", resp.StatusCode)
	}
	wantMsg := "5 is below rps 10; burst must be &gt;= rps"
	line7 := regexp.MustCompile(`(?s)<li id="line-7" class="bad" data-line="7">.*?</li>`).FindString(body)
	if !strings.Contains(line7, wantMsg) || !strings.Contains(line7, "rules[0].algorithm_config.burst") {
		t.Errorf("the error is not next to line 7:\n%s", line7)
	}
	if !strings.Contains(body, `href="#line-7"`) || !strings.Contains(body, "&#34;burst&#34;: 5}") {
		t.Error("problem list or kept draft missing")
	}

	// Valid: 303 to the editor with a notice.
	resp, _ = post(t, c, e.srv.URL+"/policy", url.Values{"csrf": {tok}, "base_version": {"1"}, "policy": {perIP}, "message": {"per ip"}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/?saved=2" {
		t.Fatalf("save: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if v, _ := e.svc.Current(context.Background()); v.Number != 2 || v.Author != "alice" || v.Message != "per ip" {
		t.Errorf("saved %+v", v)
	}
	if !strings.Contains(get(t, c, e.srv.URL+"/?saved=2"), "Saved v2") {
		t.Error("no notice after saving")
	}

	// Stale base: 409 with the difference, draft kept, base moved to v2.
	draft := strings.Replace(perIP, `"burst":10`, `"burst":50`, 1)
	resp, body = post(t, c, e.srv.URL+"/policy", url.Values{"csrf": {tok}, "base_version": {"1"}, "policy": {draft}})
	if resp.StatusCode != http.StatusConflict || !strings.Contains(body, "current version is 2") ||
		!strings.Contains(body, `name="base_version" value="2"`) || !strings.Contains(body, `&#34;burst&#34;: 50`) {
		t.Errorf("conflict page: %d", resp.StatusCode)
	}

	// History lists both versions with a rollback form for v1.
	hist := get(t, c, e.srv.URL+"/history")
	if !strings.Contains(hist, `data-version="2"`) || !strings.Contains(hist, `data-version="1"`) || !strings.Contains(hist, `name="to" value="1"`) {
		t.Error("history incomplete")
	}
	if strings.Contains(hist, `name="to" value="2"`) {
		t.Error("history offers to roll back to the current version")
	}
	ver := get(t, c, e.srv.URL+"/history/2")
	if !strings.Contains(ver, `class="diff"`) || !strings.Contains(ver, "per-ip") {
		t.Error("version page has no diff")
	}

	// Rollback: CSRF required, then 303 and v3 restores v1.
	if resp, _ := post(t, c, e.srv.URL+"/rollback", url.Values{"to": {"1"}, "base_version": {"2"}}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("rollback without CSRF: %d", resp.StatusCode)
	}
	resp, _ = post(t, c, e.srv.URL+"/rollback", url.Values{"csrf": {tok}, "to": {"1"}, "base_version": {"2"}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/history?restored=3&from=1" {
		t.Fatalf("rollback: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if v, _ := e.svc.Current(context.Background()); v.Number != 3 || v.RollbackOf != 1 || v.Author != "alice" {
		t.Errorf("after rollback %+v", v)
	}
	resp, _ = post(t, c, e.srv.URL+"/rollback", url.Values{"csrf": {tok}, "to": {"1"}, "base_version": {"2"}})
	if resp.StatusCode != http.StatusConflict {
		t.Errorf("stale rollback: %d", resp.StatusCode)
	}

	// Oversized form: 413.
	resp, _ = post(t, c, e.srv.URL+"/policy", url.Values{"csrf": {tok}, "base_version": {"3"}, "policy": {strings.Repeat("x", 70<<10)}})
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized form: %d", resp.StatusCode)
	}
}

func TestPagesRender(t *testing.T) {
	e := newEnv(t, nil)
	c := login(t, e, "alice")
	inline := regexp.MustCompile(`<script>|<script [^>]*>[^<]|<style|\sstyle=|\son[a-z]+=`)
	for _, p := range []string{"/", "/history", "/history/1", "/nodes", "/istio", "/istio?format=json"} {
		page := get(t, c, e.srv.URL+p)
		if m := inline.FindString(page); m != "" {
			t.Errorf("%s has inline script or style %q (the CSP forbids it)", p, m)
		}
		if !strings.Contains(page, `/static/app.css?v=`+web.AssetHash("app.css")) {
			t.Errorf("%s does not link the hashed stylesheet", p)
		}
	}
	nodes := get(t, c, e.srv.URL+"/nodes")
	if !strings.Contains(nodes, "rules[0].name: &lt;bad&gt;") || !strings.Contains(nodes, "up to date") || !strings.Contains(nodes, "envoy-a") {
		t.Error("nodes page incomplete (or the NACK error is not escaped)")
	}
	if frag := get(t, c, e.srv.URL+"/nodes?fragment=1"); strings.Contains(frag, "<html") || !strings.Contains(frag, `data-refresh=`) {
		t.Error("the nodes fragment is not a fragment")
	}
	if ist := get(t, c, e.srv.URL+"/istio"); !strings.Contains(ist, "kind: WasmPlugin") || !strings.Contains(ist, `id="manifest"`) {
		t.Error("istio page has no manifest")
	}
	for _, p := range []string{"/history/99", "/history/x"} {
		resp, err := c.Get(e.srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 404 && resp.StatusCode != 400 {
			t.Errorf("%s: %d", p, resp.StatusCode)
		}
	}
	// Without an xDS server the nodes page says so.
	e2 := newEnv(t, func(cfg *Config) { cfg.Nodes = nil })
	if !strings.Contains(get(t, login(t, e2, "a"), e2.srv.URL+"/nodes"), "xDS server is not running") {
		t.Error("nodes page without xDS")
	}
}

func TestStaticAssets(t *testing.T) {
	e := newEnv(t, nil)
	for name, ct := range map[string]string{"app.css": "text/css", "app.js": "text/javascript", "favicon.svg": "image/svg+xml"} {
		resp, err := http.Get(e.srv.URL + "/static/" + name + "?v=" + web.AssetHash(name))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), ct) || !strings.Contains(resp.Header.Get("Cache-Control"), "immutable") {
			t.Errorf("%s: %d %v", name, resp.StatusCode, resp.Header)
		}
		req, _ := http.NewRequest("GET", e.srv.URL+"/static/"+name, nil)
		req.Header.Set("If-None-Match", `"`+web.AssetHash(name)+`"`)
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotModified {
			t.Errorf("%s conditional: %d", name, resp.StatusCode)
		}
	}
	resp, _ := http.Get(e.srv.URL + "/static/nope.js")
	if resp.StatusCode != 404 {
		t.Errorf("missing asset: %d", resp.StatusCode)
	}
}

type panicky struct{ Policies }

func (panicky) Current(context.Context) (policies.Version, error) { panic("boom") }

func TestPanicBecomes500(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Policies = panicky{c.Policies} })
	resp, _ := e.apiJSON(t, "GET", "/api/v1/policy", "")
	if resp.StatusCode != 500 {
		t.Errorf("panic: %d", resp.StatusCode)
	}
	if resp, _ := e.apiJSON(t, "GET", "/api/v1/policy/versions", ""); resp.StatusCode != 200 {
		t.Errorf("the server did not survive: %d", resp.StatusCode)
	}
	_ = fmt.Sprint
}
