package httpapi

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"golang.org/x/oauth2"

	"github.com/sluice-rl/sluice/admin/auth"
	"github.com/sluice-rl/sluice/admin/store"
)

var (
	testKeysOnce sync.Once
	testKey      *rsa.PrivateKey // the provider's signing key (in its JWKS)
	otherKey     *rsa.PrivateKey // a key the provider does not publish
)

func testKeys(t *testing.T) {
	testKeysOnce.Do(func() {
		var err error
		if testKey, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
			panic(err)
		}
		if otherKey, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
			panic(err)
		}
	})
}

// fakeProvider is a small OpenID Connect provider: discovery, JWKS, an
// authorize endpoint that logs the user in at once, and a token endpoint
// that checks the code, the client secret and the PKCE verifier.
type fakeProvider struct {
	srv    *httptest.Server
	claims map[string]any // extra claims of the next ID token
	key    *rsa.PrivateKey
	exp    time.Duration // lifetime of the ID token (negative: expired)

	mu    sync.Mutex
	codes map[string]authRequest
}

type authRequest struct{ nonce, challenge, redirect string }

const (
	testClientID     = "sluice-admin"
	testClientSecret = "client-secret-0123456789"
)

func newFakeProvider(t *testing.T) *fakeProvider {
	testKeys(t)
	p := &fakeProvider{key: testKey, exp: time.Hour, codes: map[string]authRequest{}, claims: map[string]any{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		u := p.srv.URL
		json.NewEncoder(w).Encode(map[string]any{
			"issuer": u, "authorization_endpoint": u + "/authorize", "token_endpoint": u + "/token", "jwks_uri": u + "/jwks",
			"id_token_signing_alg_values_supported": []string{"RS256"}, "response_types_supported": []string{"code"},
			"subject_types_supported": []string{"public"}, "code_challenge_methods_supported": []string{"S256"},
		})
	})
	mux.HandleFunc("GET /jwks", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &testKey.PublicKey, KeyID: "k1", Algorithm: "RS256", Use: "sig"}}})
	})
	mux.HandleFunc("GET /authorize", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if q.Get("client_id") != testClientID || q.Get("response_type") != "code" || q.Get("code_challenge_method") != "S256" || q.Get("nonce") == "" || q.Get("state") == "" {
			http.Error(w, "bad authorization request: "+r.URL.RawQuery, http.StatusBadRequest)
			return
		}
		code := auth.RandomToken()
		p.mu.Lock()
		p.codes[code] = authRequest{nonce: q.Get("nonce"), challenge: q.Get("code_challenge"), redirect: q.Get("redirect_uri")}
		p.mu.Unlock()
		http.Redirect(w, r, q.Get("redirect_uri")+"?"+url.Values{"code": {code}, "state": {q.Get("state")}}.Encode(), http.StatusFound)
	})
	mux.HandleFunc("POST /token", func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		id, secret, ok := r.BasicAuth()
		if !ok {
			id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
		}
		p.mu.Lock()
		req, found := p.codes[r.PostForm.Get("code")]
		delete(p.codes, r.PostForm.Get("code"))
		p.mu.Unlock()
		sum := sha256.Sum256([]byte(r.PostForm.Get("code_verifier")))
		if id != testClientID || secret != testClientSecret || !found || req.redirect != r.PostForm.Get("redirect_uri") ||
			base64.RawURLEncoding.EncodeToString(sum[:]) != req.challenge {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			w.Write([]byte(`{"error":"invalid_grant"}`))
			return
		}
		now := time.Now()
		claims := map[string]any{"iss": p.srv.URL, "aud": testClientID, "sub": "u-1", "nonce": req.nonce,
			"iat": now.Unix(), "exp": now.Add(p.exp).Unix()}
		for k, v := range p.claims {
			claims[k] = v
		}
		sig, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: p.key}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", "k1"))
		if err != nil {
			t.Error(err)
			return
		}
		raw, err := jwt.Signed(sig).Claims(claims).Serialize()
		if err != nil {
			t.Error(err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"access_token": "at", "token_type": "Bearer", "expires_in": 3600, "id_token": raw})
	})
	p.srv = httptest.NewServer(mux)
	t.Cleanup(p.srv.Close)
	return p
}

// oidcEnv is an admin with OIDC login against a fake provider; groups in
// "sluice-admins" are admins, in "sluice-editors" editors.
func oidcEnv(t *testing.T, create bool) (*env, *fakeProvider) {
	t.Helper()
	p := newFakeProvider(t)
	prov, err := oidc.NewProvider(context.Background(), p.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	o := &OIDC{
		Name: "Example SSO",
		OAuth2: oauth2.Config{ClientID: testClientID, ClientSecret: testClientSecret, Endpoint: prov.Endpoint(),
			Scopes: []string{oidc.ScopeOpenID, "profile", "email"}},
		Verifier: prov.Verifier(&oidc.Config{ClientID: testClientID}),
		Mapping: RoleMapping{UserClaim: "preferred_username", RoleClaim: "groups", AdminValues: []string{"sluice-admins"}, EditorValues: []string{"sluice-editors"},
			TeamPolicies: map[string][]string{"team-payments": {"payments-*"}, "team-search": {"search"}}},
		Create: create,
	}
	e := newEnv(t, func(c *Config) {
		o.Login = c.Auth.(ExternalLogin)
		c.OIDC = o
	})
	o.OAuth2.RedirectURL = e.srv.URL + "/login/oidc/callback"
	return e, p
}

// oidcLogin follows the flow from "Log in with" to the callback's answer,
// which it returns with the browser.
func oidcLogin(t *testing.T, e *env) (*http.Client, *http.Response, string) {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := noRedirect(jar)
	page := get(t, c, e.srv.URL+"/login?next=/history")
	if !strings.Contains(page, `href="/login/oidc?next=%2Fhistory"`) || !strings.Contains(page, "Log in with Example SSO") {
		t.Fatalf("no OIDC button on the login page:\n%s", page)
	}
	u := e.srv.URL + "/login/oidc?next=%2Fhistory"
	for range 3 { // admin → provider → admin's callback
		resp, err := c.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusFound {
			t.Fatalf("GET %s: %d", u, resp.StatusCode)
		}
		u = resp.Header.Get("Location")
		if strings.HasPrefix(u, e.srv.URL+"/login/oidc/callback") {
			break
		}
	}
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return c, resp, string(b)
}

func lastAudit(t *testing.T, e *env, action string) store.AuditEntry {
	t.Helper()
	got, err := e.st.ListAudit(context.Background(), store.AuditFilter{Action: action, Limit: 1})
	if err != nil || len(got) == 0 {
		t.Fatalf("no %s audit entry (%v)", action, err)
	}
	return got[0]
}

func TestOIDCLoginCreatesTheUserWithTheRoleFromTheGroupsClaim(t *testing.T) {
	e, p := oidcEnv(t, true)
	p.claims = map[string]any{"preferred_username": "carol", "groups": []string{"staff", "sluice-editors"}}
	c, resp, body := oidcLogin(t, e)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/history" {
		t.Fatalf("callback: %d %s\n%s", resp.StatusCode, resp.Header.Get("Location"), body)
	}
	// The session works like a password login's: pages and CSRF-protected forms.
	csrf := csrfOf(t, get(t, c, e.srv.URL+"/history"))
	if r, _ := post(t, c, e.srv.URL+"/rollback", url.Values{"csrf": {csrf}, "to": {"1"}, "base_version": {"1"}}); r.StatusCode == http.StatusForbidden || r.StatusCode == http.StatusUnauthorized {
		t.Fatalf("an editor's form post was refused: %d", r.StatusCode)
	}
	users, _ := e.auth.Users(context.Background())
	if len(users) != 1 || users[0].Name != "carol" || users[0].Role != "editor" {
		t.Fatalf("users: %+v", users)
	}
	if a := lastAudit(t, e, ActionLogin); a.Actor != "carol" || a.Detail != "by oidc as editor" {
		t.Fatalf("audit: %+v", a)
	}
	// The provider is the source of roles: promoted there, admin here.
	p.claims["groups"] = "sluice-admins"
	if _, resp, _ := oidcLogin(t, e); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("second login: %d", resp.StatusCode)
	}
	users, _ = e.auth.Users(context.Background())
	if users[0].Role != "admin" {
		t.Fatalf("role after promotion: %s", users[0].Role)
	}
	// No matching group: viewer.
	p.claims["groups"] = []string{"staff"}
	oidcLogin(t, e)
	if users, _ = e.auth.Users(context.Background()); users[0].Role != "viewer" {
		t.Fatalf("role without a mapped group: %s", users[0].Role)
	}
}

// TestOIDCTeamGroupsMakeEditorsOfTheirPolicies: a user in team groups is an
// editor of the union of their policies, follows the provider on the next
// login, and an editor group or an admin group wins over teams.
func TestOIDCTeamGroupsMakeEditorsOfTheirPolicies(t *testing.T) {
	e, p := oidcEnv(t, true)
	account := func() store.User {
		t.Helper()
		users, _ := e.auth.Users(context.Background())
		if len(users) != 1 {
			t.Fatalf("users: %+v", users)
		}
		return users[0]
	}
	for _, c := range []struct {
		groups         []string
		role, policies string
	}{
		{[]string{"staff", "team-search", "team-payments"}, "editor", "payments-*,search"},
		{[]string{"team-search"}, "editor", "search"},
		{[]string{"team-search", "sluice-editors"}, "editor", ""},
		{[]string{"team-search", "sluice-admins"}, "admin", ""},
		{[]string{"staff"}, "viewer", ""},
	} {
		p.claims = map[string]any{"preferred_username": "dan", "groups": c.groups}
		if _, resp, body := oidcLogin(t, e); resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("%v: %d\n%s", c.groups, resp.StatusCode, body)
		}
		if u := account(); u.Role != c.role || u.Policies != c.policies {
			t.Errorf("groups %v: %s of %q, want %s of %q", c.groups, u.Role, u.Policies, c.role, c.policies)
		}
	}
	p.claims = map[string]any{"preferred_username": "dan", "groups": []string{"team-payments"}}
	oidcLogin(t, e)
	if a := lastAudit(t, e, ActionLogin); a.Detail != "by oidc as editor of policies payments-*" {
		t.Errorf("audit detail %q", a.Detail)
	}
}

func TestOIDCLoginOfAnUnknownUserIsRefusedWhenNotCreating(t *testing.T) {
	e, p := oidcEnv(t, false)
	p.claims = map[string]any{"preferred_username": "dave"}
	_, resp, body := oidcLogin(t, e)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "no account") {
		t.Fatalf("unknown user: %d\n%s", resp.StatusCode, body)
	}
	if users, _ := e.auth.Users(context.Background()); len(users) != 0 {
		t.Fatalf("an account was created: %+v", users)
	}
	if a := lastAudit(t, e, ActionLoginFailed); a.Detail != "by oidc: no account for dave" {
		t.Fatalf("audit: %+v", a)
	}
	// Once an admin created the account, the same login works.
	addUser(t, e, "dave", auth.RoleViewer)
	if _, resp, _ := oidcLogin(t, e); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("known user: %d", resp.StatusCode)
	}
}

func TestOIDCLoginRefusesBadTokens(t *testing.T) {
	for _, c := range []struct {
		name  string
		setup func(p *fakeProvider)
		want  string // in the audit entry's detail
	}{
		{"signed with an unpublished key", func(p *fakeProvider) { p.key = otherKey }, "signature"},
		{"expired", func(p *fakeProvider) { p.exp = -time.Minute }, "expired"},
		{"for another client", func(p *fakeProvider) { p.claims["aud"] = "someone-else" }, "audience"},
		{"with another flow's nonce", func(p *fakeProvider) { p.claims["nonce"] = "another-flow" }, "wrong nonce"},
		{"from another issuer", func(p *fakeProvider) { p.claims["iss"] = "https://evil.example.com" }, "different provider"},
		{"without a user name", func(p *fakeProvider) { delete(p.claims, "preferred_username") }, `no "preferred_username" claim`},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, p := oidcEnv(t, true)
			p.claims = map[string]any{"preferred_username": "erin", "groups": "sluice-admins"}
			c.setup(p)
			jar, resp, body := oidcLogin(t, e)
			if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("Location") != "" {
				t.Fatalf("got %d %s\n%s", resp.StatusCode, resp.Header.Get("Location"), body)
			}
			if a := lastAudit(t, e, ActionLoginFailed); !strings.Contains(a.Detail, c.want) || !strings.HasPrefix(a.Detail, "by oidc: ") {
				t.Fatalf("audit detail %q does not say %q", a.Detail, c.want)
			}
			if r, _ := jar.Get(e.srv.URL + "/history"); r.StatusCode != http.StatusSeeOther {
				t.Fatalf("a session was opened: /history answered %d", r.StatusCode)
			}
			if users, _ := e.auth.Users(context.Background()); len(users) != 0 {
				t.Fatalf("an account was created: %+v", users)
			}
		})
	}
}

// startFlow leaves for the provider and returns the browser and the
// callback's query the provider answered with (a valid code and state).
func startFlow(t *testing.T, e *env) (*http.Client, url.Values) {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := noRedirect(jar)
	u := e.srv.URL + "/login/oidc"
	for range 2 { // admin → provider → (callback URL)
		resp, err := c.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		u = resp.Header.Get("Location")
	}
	cb, err := url.Parse(u)
	if err != nil || cb.Query().Get("code") == "" {
		t.Fatalf("no code in %q", u)
	}
	return c, cb.Query()
}

func TestOIDCCallbackWithAWrongStateIsRefused(t *testing.T) {
	e, p := oidcEnv(t, true)
	p.claims = map[string]any{"preferred_username": "frank"}
	for _, tc := range []struct {
		name         string
		otherBrowser bool
		state        func(right string) string
	}{
		{"another state", false, func(string) string { return "forged-state" }},
		{"no state", false, func(string) string { return "" }},
		{"the right state in another browser", true, func(right string) string { return right }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, q := startFlow(t, e)
			if tc.otherBrowser {
				c = noRedirect(nil)
			}
			v := url.Values{"code": {q.Get("code")}, "state": {tc.state(q.Get("state"))}}
			resp, err := c.Get(e.srv.URL + "/login/oidc/callback?" + v.Encode())
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusForbidden {
				t.Fatalf("%d", resp.StatusCode)
			}
			if a := lastAudit(t, e, ActionLoginFailed); !strings.Contains(a.Detail, "state") {
				t.Fatalf("audit: %+v", a)
			}
		})
	}
	if users, _ := e.auth.Users(context.Background()); len(users) != 0 {
		t.Fatalf("an account was created: %+v", users)
	}
	// The same steps with the right state log in.
	c, q := startFlow(t, e)
	resp, err := c.Get(e.srv.URL + "/login/oidc/callback?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("right state: %d", resp.StatusCode)
	}
}

func TestOIDCIsOffWithoutConfiguration(t *testing.T) {
	e := newEnv(t, nil)
	c := noRedirect(nil)
	if page := get(t, c, e.srv.URL+"/login"); strings.Contains(page, "/login/oidc") || strings.Contains(page, "Log in with") {
		t.Fatalf("an OIDC button without OIDC:\n%s", page)
	}
	for _, path := range []string{"/login/oidc", "/login/oidc/callback?code=c&state=s"} {
		resp, err := c.Get(e.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusFound || resp.StatusCode == http.StatusSeeOther {
			t.Fatalf("%s answered %d without OIDC", path, resp.StatusCode)
		}
	}
}

// FuzzOIDCFlowCookie: any cookie value is read without a panic, and a
// flow read from it always returns to a local path.
func FuzzOIDCFlowCookie(f *testing.F) {
	good, _ := json.Marshal(oidcFlow{State: "s", Nonce: "n", Verifier: "v", Next: "/history"})
	for _, seed := range []string{
		base64.RawURLEncoding.EncodeToString(good),
		base64.RawURLEncoding.EncodeToString([]byte(`{"s":"s","n":"n","v":"v","x":"//evil.example.com"}`)),
		base64.RawURLEncoding.EncodeToString([]byte(`{"s":"s","n":"","v":"v"}`)),
		base64.RawURLEncoding.EncodeToString([]byte(`[1,2]`)),
		"!!!", "",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		r := httptest.NewRequest("GET", "/login/oidc/callback", nil)
		r.Header.Set("Cookie", oidcCookie+"="+v)
		fl, err := readFlow(r)
		if err != nil {
			return
		}
		if fl.State == "" || fl.Nonce == "" || fl.Verifier == "" {
			t.Fatalf("an incomplete flow was accepted: %+v", fl)
		}
		if localPath(fl.Next) != fl.Next || !strings.HasPrefix(fl.Next, "/") || strings.HasPrefix(fl.Next, "//") {
			t.Fatalf("next %q is not a local path", fl.Next)
		}
	})
}
