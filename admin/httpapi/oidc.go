package httpapi

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/sluice-rl/sluice/admin/auth"
	"github.com/sluice-rl/sluice/admin/policies"
	"github.com/sluice-rl/sluice/web"
)

// OIDC configures login through an OpenID Connect provider (authorization
// code flow with state, nonce and PKCE).
type OIDC struct {
	Name     string                // shown on the login button: "Log in with <Name>"
	OAuth2   oauth2.Config         // client, endpoints, redirect URL (…/login/oidc/callback), scopes
	Verifier *oidc.IDTokenVerifier // checks the ID token's signature, issuer, audience and expiry
	Client   *http.Client          // for the token endpoint (nil: http.DefaultClient)
	Mapping  RoleMapping           // claims to user name and role
	Create   bool                  // create an account for an unknown user on first login
	Login    ExternalLogin         // nil: Config.Auth, which must implement it
}

// ExternalLogin opens sessions for users the provider vouched for
// (admin/auth.Manager implements it).
type ExternalLogin interface {
	LoginExternal(ctx context.Context, a auth.External, create bool) (string, auth.Session, error)
}

// RoleMapping maps an ID token's claims to an account: UserClaim names the
// user; a RoleClaim value (a string or a list of strings) among
// AdminValues makes an admin, else among EditorValues an editor of every
// policy, else among TeamPolicies' keys an editor of the policies of
// every team value it has, else a viewer.
type RoleMapping struct {
	UserClaim    string
	RoleClaim    string
	AdminValues  []string
	EditorValues []string
	TeamPolicies map[string][]string // nil: the scope an admin gave is kept
}

// Map returns the account the claims give.
func (m RoleMapping) Map(claims map[string]any) (auth.External, error) {
	user, _ := claims[m.UserClaim].(string)
	if user == "" {
		return auth.External{}, fmt.Errorf("the ID token has no %q claim (set -oidc-user-claim)", m.UserClaim)
	}
	if err := auth.CheckUserName(user); err != nil {
		return auth.External{}, fmt.Errorf("claim %q: %w", m.UserClaim, err)
	}
	a := auth.External{User: user, Role: auth.RoleViewer, SetPolicies: m.TeamPolicies != nil}
	var values []string
	switch v := claims[m.RoleClaim].(type) {
	case string:
		values = []string{v}
	case []any:
		for _, e := range v {
			if s, ok := e.(string); ok {
				values = append(values, s)
			}
		}
	}
	has := func(want []string) bool {
		return slices.ContainsFunc(values, func(v string) bool { return slices.Contains(want, v) })
	}
	var team []string
	for _, v := range values {
		team = append(team, m.TeamPolicies[v]...)
	}
	switch {
	case m.RoleClaim == "":
	case has(m.AdminValues):
		a.Role = auth.RoleAdmin
	case has(m.EditorValues):
		a.Role = auth.RoleEditor
	case len(team) > 0:
		sc, err := policies.NewScope(team)
		if err != nil {
			return auth.External{}, err
		}
		a.Role, a.Policies = auth.RoleEditor, sc.String()
	}
	return a, nil
}

const oidcCookie = "sluice_oidc"

// oidcFlow is what the browser keeps (HttpOnly cookie) between leaving for
// the provider and coming back.
type oidcFlow struct {
	State    string `json:"s"`
	Nonce    string `json:"n"`
	Verifier string `json:"v"`
	Next     string `json:"x"`
}

func (s *server) registerOIDC(mux *http.ServeMux) {
	mux.HandleFunc("GET /login/oidc", s.oidcStart)
	mux.HandleFunc("GET /login/oidc/callback", s.oidcCallback)
}

// oidcStart sends the browser to the provider with a fresh state, nonce
// and PKCE verifier, kept in a short-lived cookie.
func (s *server) oidcStart(w http.ResponseWriter, r *http.Request) {
	f := oidcFlow{State: auth.RandomToken(), Nonce: auth.RandomToken(), Verifier: oauth2.GenerateVerifier(), Next: localPath(r.URL.Query().Get("next"))}
	b, _ := json.Marshal(f)
	// SameSite=Lax: the provider's redirect back is a cross-site navigation.
	http.SetCookie(w, &http.Cookie{
		Name: oidcCookie, Value: base64.RawURLEncoding.EncodeToString(b), Path: "/login/oidc", MaxAge: 600,
		HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: s.secureCookie(r),
	})
	u := s.OIDC.OAuth2.AuthCodeURL(f.State, oidc.Nonce(f.Nonce), oauth2.S256ChallengeOption(f.Verifier))
	http.Redirect(w, r, u, http.StatusFound)
}

// oidcCallback checks the provider's answer, exchanges the code, verifies
// the ID token and opens a session as a password login does.
func (s *server) oidcCallback(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: oidcCookie, Value: "", Path: "/login/oidc", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: s.secureCookie(r)})
	addr := s.clientAddr(r)
	fail := func(status int, why, shown string) {
		s.log.Warn("failed OIDC login", "remote", addr, "reason", why)
		s.failedWhy(r, "oidc", "by oidc: "+why, addr, "", auth.Principal{Name: "(oidc)"})
		s.showLogin(w, r, status, web.LoginPage{Error: shown})
	}
	if d := s.Throttle.Check(addr, ""); d.Refuse {
		s.showLogin(w, r, http.StatusTooManyRequests, web.LoginPage{Error: fmt.Sprintf("Too many failed attempts from your address. Try again in %d seconds.", retrySeconds(d))})
		return
	}
	q := r.URL.Query()
	f, err := readFlow(r)
	if err != nil || q.Get("state") == "" || !auth.Equal(q.Get("state"), f.State) {
		fail(http.StatusForbidden, "state missing or not this browser's", "The login expired or came from another site. Try again (cookies must be enabled).")
		return
	}
	if e := q.Get("error"); e != "" {
		fail(http.StatusUnauthorized, "the provider refused: "+clip(e+" "+q.Get("error_description"), 200), "The identity provider refused the login.")
		return
	}
	ctx := r.Context()
	if s.OIDC.Client != nil {
		ctx = oidc.ClientContext(ctx, s.OIDC.Client)
	}
	tok, err := s.OIDC.OAuth2.Exchange(ctx, q.Get("code"), oauth2.VerifierOption(f.Verifier))
	if err != nil {
		fail(http.StatusUnauthorized, "code exchange: "+clip(err.Error(), 200), "The identity provider did not confirm the login.")
		return
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		fail(http.StatusUnauthorized, "no id_token in the token response", "The identity provider did not confirm the login.")
		return
	}
	idt, err := s.OIDC.Verifier.Verify(ctx, raw)
	if err != nil {
		fail(http.StatusUnauthorized, "ID token: "+clip(err.Error(), 200), "The identity provider's answer could not be verified.")
		return
	}
	if !auth.Equal(idt.Nonce, f.Nonce) {
		fail(http.StatusUnauthorized, "ID token: wrong nonce", "The identity provider's answer could not be verified.")
		return
	}
	var claims map[string]any
	if err := idt.Claims(&claims); err != nil {
		fail(http.StatusUnauthorized, "ID token claims: "+clip(err.Error(), 200), "The identity provider's answer could not be read.")
		return
	}
	acct, err := s.OIDC.Mapping.Map(claims)
	user := acct.User
	if err != nil {
		fail(http.StatusUnauthorized, clip(err.Error(), 200), "Your identity provider account has no usable user name; ask an admin.")
		return
	}
	id, sess, err := s.OIDC.Login.LoginExternal(r.Context(), acct, s.OIDC.Create)
	if errors.Is(err, auth.ErrUnknownUser) {
		fail(http.StatusForbidden, "no account for "+user, "You have no account here; ask an admin to create one named "+user+".")
		return
	}
	if err != nil {
		s.log.Error("OIDC login failed", "err", err)
		s.renderError(w, r, web.Nav{}, http.StatusInternalServerError, "Internal error", "Logging in failed; see the admin's log.")
		return
	}
	s.Throttle.Succeed(addr, "")
	how := "by oidc as " + string(acct.Role)
	if acct.Policies != "" {
		how += " of policies " + acct.Policies
	}
	s.loggedIn(w, r, id, sess, addr, how, f.Next)
}

func readFlow(r *http.Request) (oidcFlow, error) {
	var f oidcFlow
	c, err := r.Cookie(oidcCookie)
	if err != nil {
		return f, err
	}
	b, err := base64.RawURLEncoding.DecodeString(c.Value)
	if err != nil {
		return f, err
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return f, err
	}
	if f.State == "" || f.Nonce == "" || f.Verifier == "" {
		return f, errors.New("incomplete")
	}
	f.Next = localPath(f.Next)
	return f, nil
}

// clip shortens provider-supplied text for the log and audit entry.
func clip(s string, n int) string {
	s = strings.ToValidUTF8(s, "?")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
