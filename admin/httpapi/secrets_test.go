package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/sluice-rl/sluice/shared/policy"
)

const (
	secretA = "sluice_tel_FIRST-secret-never-shown"
	secretB = "sluice_tel_SECOND-secret-never-shown"
)

func withToken(tok string) string {
	return `{"telemetry":{"cluster":"sluice_admin","token":"` + tok + `"},` + perIP[1:]
}

// storedToken is the token of version n as stored (what xDS pushes).
func storedToken(t *testing.T, e *env, n int64) string {
	t.Helper()
	v, err := e.svc.Get(context.Background(), n)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := policy.Parse(v.JSON)
	if err != nil || cfg.Telemetry == nil {
		t.Fatalf("v%d: %v %s", n, err, v.JSON)
	}
	return cfg.Telemetry.Token
}

// rawBody GETs path as a logged-in browser (c) or, with c nil, through the
// API with the admin token.
func rawBody(t *testing.T, e *env, c *http.Client, path string) string {
	t.Helper()
	if c != nil {
		return get(t, c, e.srv.URL+path)
	}
	status, body := apiRaw(t, e, "GET", path, "")
	if status != 200 {
		t.Fatalf("GET %s: %d\n%s", path, status, body)
	}
	return body
}

// TestSecretsNeverLeave: a literal telemetry token, saved through the API,
// appears in no API answer and no rendered page (editor, history, version
// and diff pages, export, Istio manifest), while the stored version keeps
// it for the xDS push.
func TestSecretsNeverLeave(t *testing.T) {
	var logs syncBuffer
	e := newEnv(t, func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	surfaces := map[string]string{}
	var status int
	status, surfaces["save answer"] = apiRaw(t, e, "POST", "/api/v1/policy", `{"base_version":1,"policy":`+withToken(secretA)+`}`)
	if status != http.StatusCreated {
		t.Fatalf("save: %d %s", status, surfaces["save answer"])
	}
	if status, _ = apiRaw(t, e, "POST", "/api/v1/policy", `{"base_version":2,"policy":`+withToken(secretB)+`}`); status != http.StatusCreated {
		t.Fatalf("second save: %d", status)
	}
	if storedToken(t, e, 2) != secretA || storedToken(t, e, 3) != secretB {
		t.Fatal("the stored versions lost their tokens")
	}
	c := login(t, e, "alice")
	for _, p := range []string{
		"/api/v1/policy", "/api/v1/policy/versions", "/api/v1/policy/versions/2", "/api/v1/policy/versions/3",
		"/api/v1/policy/diff?from=2&to=3", "/api/v1/policy/diff?from=0&to=3", "/api/v1/policy/export",
		"/api/v1/istio/wasmplugin", "/api/v1/istio/wasmplugin?format=json",
	} {
		surfaces[p] = rawBody(t, e, nil, p)
	}
	for _, p := range []string{"/", "/history", "/history/2", "/history/3", "/history/3?against=1", "/istio", "/export"} {
		surfaces["page "+p] = rawBody(t, e, c, p)
	}
	// The API's validate answer too.
	_, surfaces["validate"] = apiRaw(t, e, "POST", "/api/v1/policy/validate", `{"policy":`+withToken(secretA)+`}`)
	_, surfaces["rollback answer"] = apiRaw(t, e, "POST", "/api/v1/policy/rollback", `{"to":2,"base_version":3}`)
	// A failed save (bad JSON around a token) is logged or answered
	// without the draft.
	_, surfaces["invalid save"] = apiRaw(t, e, "POST", "/api/v1/policy", `{"base_version":3,"policy":{"telemetry":{"token":"`+secretA+`"}}}`)
	surfaces["logs"] = logs.String()
	for name, out := range surfaces {
		if strings.Contains(out, "never-shown") || strings.Contains(out, "FIRST") || strings.Contains(out, "SECOND") {
			t.Errorf("%s shows the secret:\n%s", name, out)
		}
	}
	if !strings.Contains(surfaces["page /"], policy.SecretMask) || !strings.Contains(surfaces["/api/v1/policy"], policy.SecretMask) {
		t.Error("the editor / API do not show the mask in the token's place")
	}
	// The diff of two versions that differ only by their token is empty.
	if strings.Contains(surfaces["/api/v1/policy/diff?from=2&to=3"], `"kind":"-"`) {
		t.Errorf("the token change shows in the diff:\n%s", surfaces["/api/v1/policy/diff?from=2&to=3"])
	}
}

// apiRaw sends an API request with the admin token and returns the status
// and the raw body.
func apiRaw(t *testing.T, e *env, method, path, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestMaskedSaveKeepsTheSecret: saving the policy as shown (token masked),
// from the editor or the API, keeps the stored token; a new token typed in
// replaces it; a mask with nothing to restore is refused at its path.
func TestMaskedSaveKeepsTheSecret(t *testing.T) {
	e := newEnv(t, nil)
	if resp, _ := e.apiJSON(t, "POST", "/api/v1/policy", `{"base_version":1,"policy":`+withToken(secretA)+`}`); resp.StatusCode != 201 {
		t.Fatalf("save: %d", resp.StatusCode)
	}
	// Editor round trip: load the page, change the rate, save the draft as shown.
	c := login(t, e, "alice")
	home := get(t, c, e.srv.URL+"/")
	cur, _ := maskingPolicies{e.svc}.Current(context.Background())
	draft := strings.Replace(cur.Pretty(), `"tokens_per_second": 5`, `"tokens_per_second": 6`, 1)
	if !strings.Contains(draft, policy.SecretMask) || draft == cur.Pretty() {
		t.Fatalf("draft:\n%s", draft)
	}
	resp, body := post(t, c, e.srv.URL+"/policy", url.Values{"csrf": {csrfOf(t, home)}, "base_version": {"2"}, "policy": {draft}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("editor save: %d\n%s", resp.StatusCode, body)
	}
	if storedToken(t, e, 3) != secretA {
		t.Fatalf("the editor round trip lost the token: %q", storedToken(t, e, 3))
	}
	// API round trip with the masked policy from GET.
	_, got := e.apiJSON(t, "GET", "/api/v1/policy", "")
	policyJSON, _ := json.Marshal(got["policy"])
	if !strings.Contains(string(policyJSON), policy.SecretMask) {
		t.Fatalf("GET policy: %s", policyJSON)
	}
	if status, b := apiRaw(t, e, "POST", "/api/v1/policy", `{"base_version":3,"policy":`+string(policyJSON)+`}`); status != 201 {
		t.Fatalf("API save of the masked policy: %d %s", status, b)
	}
	if storedToken(t, e, 4) != secretA {
		t.Fatal("the API round trip lost the token")
	}
	// A new token replaces it.
	if resp, _ := e.apiJSON(t, "POST", "/api/v1/policy", `{"base_version":4,"policy":`+withToken(secretB)+`}`); resp.StatusCode != 201 || storedToken(t, e, 5) != secretB {
		t.Fatalf("new token: %d", resp.StatusCode)
	}
	// Nothing to restore (the base has token_env): 422 at telemetry.token.
	envPolicy := `{"telemetry":{"cluster":"sluice_admin","token_env":"SLUICE_TELEMETRY_TOKEN"},` + perIP[1:]
	if resp, _ := e.apiJSON(t, "POST", "/api/v1/policy", `{"base_version":5,"policy":`+envPolicy+`}`); resp.StatusCode != 201 {
		t.Fatalf("token_env save: %d", resp.StatusCode)
	}
	status, b := apiRaw(t, e, "POST", "/api/v1/policy", `{"base_version":6,"policy":`+withToken(policy.SecretMask)+`}`)
	if status != http.StatusUnprocessableEntity || !strings.Contains(b, `"path": "telemetry.token"`) {
		t.Fatalf("mask without a stored token: %d %s", status, b)
	}
	if v, _ := e.svc.Current(context.Background()); v.Number != 6 {
		t.Fatalf("current v%d, want 6", v.Number)
	}
}

// TestRollbackKeepsTheSecret: a rollback restores the stored token (the
// service copies the stored JSON; only the answer is masked).
func TestRollbackKeepsTheSecret(t *testing.T) {
	e := newEnv(t, nil)
	e.apiJSON(t, "POST", "/api/v1/policy", `{"base_version":1,"policy":`+withToken(secretA)+`}`)
	e.apiJSON(t, "POST", "/api/v1/policy", `{"base_version":2,"policy":`+perIP+`}`)
	status, b := apiRaw(t, e, "POST", "/api/v1/policy/rollback", `{"to":2,"base_version":3}`)
	if status != 201 || strings.Contains(b, "never-shown") {
		t.Fatalf("rollback: %d %s", status, b)
	}
	if storedToken(t, e, 4) != secretA {
		t.Fatal("rollback lost the token")
	}
}

// TestTelemetryPageSuggestsTokenEnv: the suggested policy block names the
// token's variable, never a token (not even a freshly rotated one).
func TestTelemetryPageSuggestsTokenEnv(t *testing.T) {
	te := newTelEnv(t, func(tc *Telemetry) { tc.TokenEnv = "SLUICE_TELEMETRY_TOKEN" })
	c := login(t, te.env, "ops")
	page := get(t, c, te.srv.URL+"/telemetry")
	r, html := post(t, c, te.srv.URL+"/telemetry/token", url.Values{"csrf": {csrfOf(t, page)}, "grace": {"1"}})
	if r.StatusCode != 200 {
		t.Fatalf("rotate: %d", r.StatusCode)
	}
	snippet := html[strings.Index(html, `id="snippet"`):]
	snippet = snippet[:strings.Index(snippet, "</pre>")]
	if !strings.Contains(snippet, "&#34;token_env&#34;: &#34;SLUICE_TELEMETRY_TOKEN&#34;") || strings.Contains(snippet, te.tokens.tok) ||
		strings.Contains(snippet, "&#34;token&#34;") {
		t.Errorf("snippet: %s", snippet)
	}
	if !strings.Contains(html, `id="token-delivery"`) {
		t.Error("the page does not say how the token reaches the plugin")
	}
}

// syncBuffer is a bytes.Buffer safe for the handler's concurrent logging.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
