package httpapi

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"net/http/cookiejar"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-rl/sluice/admin/auth"
	"github.com/sluice-rl/sluice/admin/store"
)

const testPassword = "a password long enough"

// addUser creates an account and returns an API token of it.
func addUser(t *testing.T, e *env, name string, role auth.Role) string {
	t.Helper()
	if err := e.auth.CreateUser(context.Background(), name, role, testPassword); err != nil {
		t.Fatal(err)
	}
	tok, _, err := e.auth.CreateToken(context.Background(), name, "test")
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// loginAs logs in through the form with a user name and password.
func loginAs(t *testing.T, e *env, user string) *http.Client {
	t.Helper()
	return loginWith(t, e, url.Values{"user": {user}, "password": {testPassword}})
}

// routePatterns reads every route pattern this package registers
// (mux.Handle / mux.HandleFunc with a literal pattern) from its source, so
// a route added later is covered without editing the test.
func routePatterns(t *testing.T) []string {
	t.Helper()
	fset := token.NewFileSet()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, de := range entries {
		if !strings.HasSuffix(de.Name(), ".go") || strings.HasSuffix(de.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, de.Name(), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || (sel.Sel.Name != "Handle" && sel.Sel.Name != "HandleFunc") {
				return true
			}
			if lit, ok := call.Args[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
				p, _ := strconv.Unquote(lit.Value)
				out = append(out, p)
			}
			return true
		})
	}
	return out
}

var wildcard = regexp.MustCompile(`\{[^}]*\}`)

// unauthenticatedChanges are the changing routes not behind an account:
// logging in, and the plugins' telemetry reports (their own token).
var unauthenticatedChanges = map[string]bool{"POST /login": true, "POST /api/v1/telemetry": true}

func TestViewerIsForbiddenEveryChangingRoute(t *testing.T) {
	te := newTelEnv(t, nil)
	e := te.env
	viewerTok := addUser(t, e, "vera", auth.RoleViewer)
	viewer := loginAs(t, e, "vera")
	csrf := csrfOf(t, get(t, viewer, e.srv.URL+"/history"))
	checked := 0
	for _, pat := range routePatterns(t) {
		method, path, ok := strings.Cut(pat, " ")
		if !ok || method == "GET" || method == "HEAD" || unauthenticatedChanges[pat] || readOnlyPosts[path] {
			continue
		}
		path = wildcard.ReplaceAllStringFunc(path, func(w string) string {
			if w == "{$}" {
				return ""
			}
			return "1"
		})
		var resp *http.Response
		if strings.HasPrefix(path, "/api/") {
			resp, _ = e.call(t, method, path, viewerTok, "application/json", `{"base_version":1,"to":1,"policy":`+perIP+`}`)
		} else {
			resp, _ = post(t, viewer, e.srv.URL+path, url.Values{"csrf": {csrf}, "policy": {perIP}, "base_version": {"1"}, "to": {"1"},
				"name": {"x"}, "role": {"admin"}, "password": {testPassword}, "user": {"vera"}})
		}
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("viewer %s %s: %d, want 403", method, path, resp.StatusCode)
		}
		checked++
	}
	if checked < 15 {
		t.Fatalf("only %d changing routes found in the source; the route scan is broken", checked)
	}
	if cur, _ := e.svc.Current(context.Background()); cur.Number != 1 {
		t.Errorf("a viewer changed the policy to v%d", cur.Number)
	}
	if us, _ := e.auth.Users(context.Background()); len(us) != 1 {
		t.Errorf("a viewer changed the users: %+v", us)
	}
	// Reads and the read-only POSTs stay open.
	if resp, _ := e.call(t, "GET", "/api/v1/policy", viewerTok, "", ""); resp.StatusCode != 200 {
		t.Errorf("viewer GET policy: %d", resp.StatusCode)
	}
	if resp, _ := e.call(t, "POST", "/api/v1/policy/validate", viewerTok, "application/json", `{"policy":`+perIP+`}`); resp.StatusCode != 200 {
		t.Errorf("viewer validate: %d", resp.StatusCode)
	}
	if resp, body := e.call(t, "POST", "/api/v1/policy/simulate", viewerTok, "application/json", `{"request":{"method":"GET","path":"/"}}`); resp.StatusCode != 200 {
		t.Errorf("viewer simulate: %d %s", resp.StatusCode, body)
	}
	get(t, viewer, e.srv.URL+"/audit")
}

func TestEditorChangesPoliciesButNotUsers(t *testing.T) {
	e := newEnv(t, nil)
	edTok := addUser(t, e, "ed", auth.RoleEditor)
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/api/v1/users", ""},
		{"POST", "/api/v1/users", `{"name":"x","role":"admin","password":"` + testPassword + `"}`},
		{"PATCH", "/api/v1/users/ed", `{"role":"admin"}`},
		{"DELETE", "/api/v1/users/ed", ""},
		{"GET", "/api/v1/tokens", ""},
		{"POST", "/api/v1/tokens", `{"user":"ed","label":"x"}`},
	} {
		if resp, body := e.call(t, c.method, c.path, edTok, "application/json", c.body); resp.StatusCode != http.StatusForbidden ||
			!strings.Contains(body["error"].(string), "admin role") {
			t.Errorf("editor %s %s: %d %v, want 403", c.method, c.path, resp.StatusCode, body)
		}
	}
	ed := loginAs(t, e, "ed")
	if resp, err := ed.Get(e.srv.URL + "/users"); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("editor GET /users: %v %v", resp.StatusCode, err)
	}
	csrf := csrfOf(t, get(t, ed, e.srv.URL+"/history"))
	if resp, _ := post(t, ed, e.srv.URL+"/users", url.Values{"csrf": {csrf}, "name": {"eve"}, "role": {"admin"}, "password": {testPassword}}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("editor POST /users: %d", resp.StatusCode)
	}
	if us, _ := e.auth.Users(context.Background()); len(us) != 1 || us[0].Role != "editor" {
		t.Errorf("users after the editor's attempts: %+v", us)
	}
	resp, v := e.call(t, "POST", "/api/v1/policy", edTok, "application/json", `{"base_version":1,"policy":`+perIP+`,"author":"someone else"}`)
	if resp.StatusCode != http.StatusCreated || v["author"] != "ed" {
		t.Errorf("editor save: %d %v; want 201 by ed (a user's token cannot claim another author)", resp.StatusCode, v)
	}
	// The admin token is an admin.
	if resp, _ := e.apiJSON(t, "GET", "/api/v1/users", ""); resp.StatusCode != 200 {
		t.Errorf("admin token GET users: %d", resp.StatusCode)
	}
}

type sleeps struct {
	mu sync.Mutex
	ds []time.Duration
}

func (s *sleeps) sleep(_ context.Context, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d > 0 {
		s.ds = append(s.ds, d)
	}
}

// throttledEnv is an admin behind a trusted proxy on 127.0.0.1, so tests
// choose the client address with X-Forwarded-For, with a manual clock.
func throttledEnv(t *testing.T) (*env, *auth.Throttle, *testClock, *sleeps, *prometheus.Registry) {
	clock := &testClock{t: time.Date(2026, 6, 1, 8, 0, 0, 0, time.UTC)}
	th := auth.NewThrottle(auth.DefaultThrottle)
	th.SetClock(clock.Now)
	reg := prometheus.NewRegistry()
	if err := th.Register(reg); err != nil {
		t.Fatal(err)
	}
	sl := &sleeps{}
	e := newEnv(t, func(c *Config) {
		c.Throttle, c.Sleep = th, sl.sleep
		c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	})
	return e, th, clock, sl, reg
}

// formLogin posts the login form from addr and returns the status; it
// reads a fresh login CSRF token first.
func formLogin(t *testing.T, e *env, addr string, form url.Values) int {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := noRedirect(jar)
	req, _ := http.NewRequest("GET", e.srv.URL+"/login", nil)
	req.Header.Set("X-Forwarded-For", addr)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	resp.Body.Close()
	form.Set("csrf", csrfOf(t, b.String()))
	req, _ = http.NewRequest("POST", e.srv.URL+"/login", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-Forwarded-For", addr)
	if resp, err = c.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestThousandWrongLoginsFromOneAddressLeaveTheRealUserIn(t *testing.T) {
	e, _, clock, sl, reg := throttledEnv(t)
	addUser(t, e, "ann", auth.RoleEditor)
	statuses := map[int]int{}
	for i := range 1000 {
		st := formLogin(t, e, "203.0.113.9", url.Values{"user": {"ann"}, "password": {"guess number " + strconv.Itoa(i)}})
		statuses[st]++
		clock.Add(time.Second) // the attacker keeps going as the locks expire
	}
	if statuses[http.StatusSeeOther] != 0 || statuses[http.StatusUnauthorized]+statuses[http.StatusTooManyRequests] != 1000 {
		t.Fatalf("statuses of 1000 wrong logins: %v", statuses)
	}
	if checked := statuses[http.StatusUnauthorized]; checked > 20 {
		t.Errorf("%d of 1000 guesses were checked; the throttle should refuse nearly all unchecked", checked)
	}
	// The real user, from another address, logs in at once (at most a soft delay).
	if st := formLogin(t, e, "198.51.100.7", url.Values{"user": {"ann"}, "password": {testPassword}}); st != http.StatusSeeOther {
		t.Fatalf("the real user from another address: %d", st)
	}
	for _, d := range sl.ds {
		if d > auth.DefaultThrottle.DelayMax {
			t.Errorf("a login was delayed %v, more than %v", d, auth.DefaultThrottle.DelayMax)
		}
	}
	// Refused logins and the lockout are visible.
	if n := testutil.ToFloat64(mustCounter(t, reg, "sluice_admin_auth_lockouts_total", auth.ScopeAccountAddress)); n < 1 {
		t.Errorf("lockouts metric = %v", n)
	}
	es, _ := e.st.ListAudit(context.Background(), store.AuditFilter{Action: ActionLockout})
	if len(es) == 0 || es[0].Remote != "203.0.113.9" || !strings.Contains(es[0].Target, "ann") {
		t.Errorf("lockout audit entries: %+v", es)
	}
	if es, _ := e.st.ListAudit(context.Background(), store.AuditFilter{Action: ActionLoginFailed, Remote: "203.0.113.9"}); len(es) != statuses[http.StatusUnauthorized] {
		t.Errorf("%d failed-login entries for %d checked failures", len(es), statuses[http.StatusUnauthorized])
	}
}

func TestBadBearerTokensLockTheAddressOnly(t *testing.T) {
	e, _, _, _, reg := throttledEnv(t)
	bearerFrom := func(addr, tok string) int {
		req, _ := http.NewRequest("GET", e.srv.URL+"/api/v1/policy", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("X-Forwarded-For", addr)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") == "" {
			t.Error("429 without Retry-After")
		}
		return resp.StatusCode
	}
	statuses := map[int]int{}
	for i := range 1000 {
		statuses[bearerFrom("203.0.113.9", "sluice_guess"+strconv.Itoa(i))]++
	}
	if statuses[http.StatusUnauthorized] != auth.DefaultThrottle.AddressLockAfter || statuses[http.StatusTooManyRequests] != 1000-auth.DefaultThrottle.AddressLockAfter {
		t.Errorf("statuses = %v", statuses)
	}
	if st := bearerFrom("203.0.113.9", testToken); st != http.StatusTooManyRequests {
		t.Errorf("the locked address with the right token: %d, want 429", st)
	}
	if st := bearerFrom("198.51.100.7", testToken); st != http.StatusOK {
		t.Errorf("another address with the right token: %d", st)
	}
	if n := testutil.ToFloat64(mustCounter(t, reg, "sluice_admin_auth_throttled_total", auth.ScopeAddress)); n != 1000-float64(auth.DefaultThrottle.AddressLockAfter)+1 {
		t.Errorf("throttled metric = %v", n)
	}
	if es, _ := e.st.ListAudit(context.Background(), store.AuditFilter{Action: ActionLockout}); len(es) != 1 || es[0].Target != "203.0.113.9" {
		t.Errorf("lockout entries: %+v", es)
	}
}

func mustCounter(t *testing.T, reg *prometheus.Registry, name, label string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() == label {
					c := prometheus.NewCounter(prometheus.CounterOpts{Name: "x"})
					c.Add(m.GetCounter().GetValue())
					return c
				}
			}
		}
	}
	t.Fatalf("no %s{%s}", name, label)
	return nil
}

func TestAPITokensOverHTTP(t *testing.T) {
	e := newEnv(t, nil)
	addUser(t, e, "ci", auth.RoleViewer)
	resp, created := e.apiJSON(t, "POST", "/api/v1/tokens", `{"user":"ci","label":"deploys"}`)
	tok, _ := created["token"].(string)
	if resp.StatusCode != http.StatusCreated || !strings.HasPrefix(tok, auth.TokenPrefix) || created["last_used"] != nil {
		t.Fatalf("create: %d %v", resp.StatusCode, created)
	}
	id := created["id"].(string)
	// Shown once: no listing carries it.
	if raw := rawBody(t, e, nil, "/api/v1/tokens"); strings.Contains(raw, tok) || strings.Contains(raw, `"token"`) {
		t.Errorf("the token list shows the token: %s", raw)
	}
	if resp, _ := e.call(t, "GET", "/api/v1/policy", tok, "", ""); resp.StatusCode != 200 {
		t.Fatalf("using the token: %d", resp.StatusCode)
	}
	_, list := e.call(t, "GET", "/api/v1/tokens", testToken, "", "")
	var used any
	for _, x := range list["tokens"].([]any) {
		if m := x.(map[string]any); m["id"] == id {
			used = m["last_used"]
		}
	}
	if used == nil {
		t.Errorf("last_used not set after a use: %v", list)
	}
	if resp, _ := e.call(t, "DELETE", "/api/v1/tokens/"+id, testToken, "", ""); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("revoke: %d", resp.StatusCode)
	}
	if resp, _ := e.call(t, "GET", "/api/v1/policy", tok, "", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a revoked token: %d, want 401 at once", resp.StatusCode)
	}
	if resp, body := e.call(t, "DELETE", "/api/v1/tokens/"+id, testToken, "", ""); resp.StatusCode != http.StatusNotFound {
		t.Errorf("revoking twice: %d %v", resp.StatusCode, body)
	}
	if resp, body := e.apiJSON(t, "POST", "/api/v1/users", `{"name":"bad name","role":"viewer","password":"`+testPassword+`"}`); resp.StatusCode != 400 || body["field"] != "name" {
		t.Errorf("a bad user name: %d %v", resp.StatusCode, body)
	}
	if resp, body := e.apiJSON(t, "POST", "/api/v1/users", `{"name":"x","role":"god","password":"`+testPassword+`"}`); resp.StatusCode != 400 || body["field"] != "role" {
		t.Errorf("a bad role: %d %v", resp.StatusCode, body)
	}
}

func TestAuditRecordsEveryEventAndFilters(t *testing.T) {
	te := newTelEnv(t, nil)
	e := te.env
	ctx := context.Background()
	// Users and tokens through the API (the admin token acts as "admin").
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/api/v1/users", `{"name":"ann","role":"editor","password":"` + testPassword + `"}`},
		{"POST", "/api/v1/users", `{"name":"bob","role":"viewer","password":"` + testPassword + `"}`},
		{"PATCH", "/api/v1/users/bob", `{"role":"editor"}`},
		{"DELETE", "/api/v1/users/bob", ""},
		{"POST", "/api/v1/telemetry/token/rotate", ""},
	} {
		if resp, body := e.apiJSON(t, c.method, c.path, c.body); resp.StatusCode >= 300 {
			t.Fatalf("%s %s: %d %v", c.method, c.path, resp.StatusCode, body)
		}
	}
	_, created := e.apiJSON(t, "POST", "/api/v1/tokens", `{"user":"ann","label":"cli"}`)
	e.call(t, "DELETE", "/api/v1/tokens/"+created["id"].(string), testToken, "", "")
	// Logins, a failed one, a save by API and a rollback by form.
	_, created = e.apiJSON(t, "POST", "/api/v1/tokens", `{"user":"ann","label":"cli2"}`)
	annTok := created["token"].(string)
	if resp, _ := e.call(t, "POST", "/api/v1/policy", annTok, "application/json", `{"base_version":1,"policy":`+perIP+`,"message":"tighter"}`); resp.StatusCode != 201 {
		t.Fatal("save", resp.StatusCode)
	}
	if st := formLogin(t, e, "", url.Values{"user": {"ann"}, "password": {"not the password"}}); st != http.StatusUnauthorized {
		t.Fatalf("wrong password: %d", st)
	}
	ann := loginAs(t, e, "ann")
	csrf := csrfOf(t, get(t, ann, e.srv.URL+"/history"))
	if resp, _ := post(t, ann, e.srv.URL+"/rollback", url.Values{"csrf": {csrf}, "to": {"1"}, "base_version": {"2"}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("rollback: %d", resp.StatusCode)
	}

	_, all := e.apiJSON(t, "GET", "/api/v1/audit", "")
	got := map[string]map[string]any{}
	for _, x := range all["entries"].([]any) {
		m := x.(map[string]any)
		got[m["action"].(string)] = m
		if m["remote"] != "127.0.0.1" {
			t.Errorf("entry without the client address: %v", m)
		}
	}
	for action, actor := range map[string]string{
		ActionUserCreate: "admin", ActionUserUpdate: "admin", ActionUserDelete: "admin", ActionTelemetryRotate: "admin",
		ActionTokenCreate: "admin", ActionTokenRevoke: "admin", ActionSave: "ann", ActionLoginFailed: "ann",
		ActionLogin: "ann", ActionRollback: "ann",
	} {
		if m := got[action]; m == nil || m["actor"] != actor {
			t.Errorf("%s: entry %v, want one by %s", action, m, actor)
		}
	}
	if m := got[ActionSave]; m["version"] != 2.0 || m["diff"] != "/api/v1/policy/diff?from=1&to=2" || m["detail"] != "tighter" {
		t.Errorf("save entry: %v", m)
	}
	if m := got[ActionRollback]; m["version"] != 3.0 || m["from_version"] != 1.0 || m["diff"] != "/api/v1/policy/diff?from=2&to=3" {
		t.Errorf("rollback entry: %v", m)
	}
	// Filters.
	count := func(q string) int {
		resp, body := e.apiJSON(t, "GET", "/api/v1/audit?"+q, "")
		if resp.StatusCode != 200 {
			t.Fatalf("audit?%s: %d %v", q, resp.StatusCode, body)
		}
		return len(body["entries"].([]any))
	}
	if n := count("actor=ann"); n != 4 {
		t.Errorf("actor=ann: %d entries, want 4 (save, failed login, login, rollback)", n)
	}
	if n := count("action=policy."); n != 2 {
		t.Errorf("action=policy.: %d", n)
	}
	if n := count("action=user.create&actor=admin"); n != 2 {
		t.Errorf("action=user.create: %d", n)
	}
	if n := count("since=2999-01-01"); n != 0 {
		t.Errorf("since the future: %d", n)
	}
	if n := count("until=2000-01-01T00:00:00Z"); n != 0 {
		t.Errorf("until the past: %d", n)
	}
	_, one := e.apiJSON(t, "GET", "/api/v1/audit?limit=1", "")
	nb := one["next_before"].(float64)
	if n := count("before=" + strconv.FormatFloat(nb, 'f', 0, 64)); n != len(all["entries"].([]any))-1 {
		t.Errorf("the page after the first entry has %d", n)
	}
	if resp, body := e.apiJSON(t, "GET", "/api/v1/audit?since=yesterday", ""); resp.StatusCode != 400 || body["field"] != "since" {
		t.Errorf("a bad since: %d %v", resp.StatusCode, body)
	}
	// The page shows the same, with the diff link.
	html := get(t, ann, e.srv.URL+"/audit?action=policy.save")
	if !strings.Contains(html, `href="/history/2?against=1"`) || strings.Contains(html, "policy.rollback") {
		t.Errorf("audit page filtered to saves:\n%s", html)
	}
	if es, _ := e.st.ListAudit(ctx, store.AuditFilter{}); len(es) != len(all["entries"].([]any)) {
		t.Errorf("store has %d entries, API showed %d", len(es), len(all["entries"].([]any)))
	}
}

func TestUsersPageFormsEscapeAndMask(t *testing.T) {
	e := newEnv(t, nil)
	addUser(t, e, "ann", auth.RoleViewer)
	admin := login(t, e, `<b>boss</b>`)
	page := get(t, admin, e.srv.URL+"/users")
	csrf := csrfOf(t, page)
	// CSRF: without the session's token nothing happens.
	if resp, _ := post(t, admin, e.srv.URL+"/tokens", url.Values{"user": {"ann"}, "label": {"x"}}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("token form without CSRF: %d", resp.StatusCode)
	}
	if resp, _ := post(t, admin, e.srv.URL+"/users", url.Values{"csrf": {"forged"}, "name": {"eve"}, "role": {"admin"}, "password": {testPassword}}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("user form with a wrong CSRF token: %d", resp.StatusCode)
	}
	if ts, _ := e.auth.Tokens(context.Background()); len(ts) != 1 {
		t.Errorf("tokens after forged forms: %d", len(ts))
	}
	// A token with a hostile label: shown once, escaped.
	resp, body := post(t, admin, e.srv.URL+"/tokens", url.Values{"csrf": {csrf}, "user": {"ann"}, "label": {`<script>alert(1)</script>`}})
	tok := formTokenValue(body)
	if resp.StatusCode != 200 || !strings.HasPrefix(tok, auth.TokenPrefix) {
		t.Fatalf("create token: %d %q", resp.StatusCode, tok)
	}
	if strings.Contains(body, "<script>alert") || !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Error("the label is not escaped")
	}
	again := get(t, admin, e.srv.URL+"/users")
	if strings.Contains(again, tok) || strings.Contains(again, tok[auth.TokenHintLen:]) {
		t.Error("the token is shown a second time")
	}
	if strings.Contains(again, "$2a$") {
		t.Error("the page shows a password hash")
	}
	// Role change and delete by form.
	if resp, _ := post(t, admin, e.srv.URL+"/users/ann", url.Values{"csrf": {csrf}, "role": {"editor"}}); resp.StatusCode != 200 {
		t.Errorf("update: %d", resp.StatusCode)
	}
	if us, _ := e.auth.Users(context.Background()); us[0].Role != "editor" {
		t.Errorf("role after the form: %s", us[0].Role)
	}
	if resp, body := post(t, admin, e.srv.URL+"/users", url.Values{"csrf": {csrf}, "name": {"eve"}, "role": {"viewer"}, "password": {"short"}}); resp.StatusCode != 400 || !strings.Contains(body, "password") {
		t.Errorf("a short password: %d", resp.StatusCode)
	}
	if resp, _ := post(t, admin, e.srv.URL+"/users/ann/delete", url.Values{"csrf": {csrf}}); resp.StatusCode != 200 {
		t.Errorf("delete: %d", resp.StatusCode)
	}
	// The audit page escapes the author name typed at login.
	audit := get(t, admin, e.srv.URL+"/audit")
	if strings.Contains(audit, "<b>boss</b>") || !strings.Contains(audit, "&lt;b&gt;boss&lt;/b&gt;") {
		t.Error("the audit page does not escape the actor")
	}
}

func formTokenValue(html string) string {
	i := strings.Index(html, `id="new-token-value">`)
	if i < 0 {
		return ""
	}
	rest := html[i+len(`id="new-token-value">`):]
	return rest[:strings.IndexByte(rest, '<')]
}

func TestClientAddressFromTrustedProxiesOnly(t *testing.T) {
	s := &server{Config: Config{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}}
	for _, c := range []struct{ remote, xff, want string }{
		{"192.0.2.1:5555", "203.0.113.1", "192.0.2.1"},                          // untrusted peer: its header is ignored
		{"10.1.1.1:5555", "203.0.113.1", "203.0.113.1"},                         // trusted proxy
		{"10.1.1.1:5555", "198.51.100.1, 203.0.113.1, 10.2.2.2", "203.0.113.1"}, // the last untrusted hop
		{"10.1.1.1:5555", "", "10.1.1.1"},
		{"10.1.1.1:5555", "garbage", "10.1.1.1"},
	} {
		r, _ := http.NewRequest("GET", "/", nil)
		r.RemoteAddr = c.remote
		if c.xff != "" {
			r.Header.Set("X-Forwarded-For", c.xff)
		}
		if got := s.clientAddr(r); got != c.want {
			t.Errorf("clientAddr(%s, %q) = %s, want %s", c.remote, c.xff, got, c.want)
		}
	}
}
