package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/sluice-rl/sluice/admin/httpapi"
	"github.com/sluice-rl/sluice/admin/policies"
)

// oidcCallbackPath is where the provider sends the browser back.
const oidcCallbackPath = "/login/oidc/callback"

// oidcOptions are the -oidc-* flags.
type oidcOptions struct {
	Issuer       string
	ClientID     string
	ClientSecret string
	RedirectURL  string
	Name         string
	Scopes       []string
	UserClaim    string
	RoleClaim    string
	AdminValues  []string
	EditorValues []string
	TeamPolicies map[string][]string // role claim value → the policies its editors may change
	CreateUsers  bool
}

// oidcFlags declares the -oidc-* flags; the returned function checks them
// after parsing.
func (o *options) oidcFlags(fs *flag.FlagSet) func() error {
	c := &o.OIDC
	fs.StringVar(&c.Issuer, "oidc-issuer", env("SLUICE_OIDC_ISSUER", ""), "OpenID Connect issuer URL (its /.well-known/openid-configuration is read at start); empty: no OIDC login (SLUICE_OIDC_ISSUER)")
	fs.StringVar(&c.ClientID, "oidc-client-id", env("SLUICE_OIDC_CLIENT_ID", ""), "OIDC client ID of the admin (SLUICE_OIDC_CLIENT_ID)")
	fs.StringVar(&c.ClientSecret, "oidc-client-secret", "", "OIDC client secret; best given in SLUICE_OIDC_CLIENT_SECRET (a flag shows in the process list); empty: a public client (PKCE only)")
	fs.StringVar(&c.RedirectURL, "oidc-redirect-url", env("SLUICE_OIDC_REDIRECT_URL", ""), "the admin's callback URL as the browser reaches it, registered at the provider, e.g. https://sluice.example.com"+oidcCallbackPath+" (SLUICE_OIDC_REDIRECT_URL)")
	fs.StringVar(&c.Name, "oidc-name", env("SLUICE_OIDC_NAME", ""), `provider name on the login button ("Log in with <name>"); default: the issuer's host (SLUICE_OIDC_NAME)`)
	scopes := fs.String("oidc-scopes", env("SLUICE_OIDC_SCOPES", "profile,email"), "comma-separated scopes asked besides openid, e.g. profile,email,groups (SLUICE_OIDC_SCOPES)")
	fs.StringVar(&c.UserClaim, "oidc-user-claim", env("SLUICE_OIDC_USER_CLAIM", "preferred_username"), "ID token claim that names the user (letters, digits and . _ @ -), e.g. email (SLUICE_OIDC_USER_CLAIM)")
	fs.StringVar(&c.RoleClaim, "oidc-role-claim", env("SLUICE_OIDC_ROLE_CLAIM", "groups"), "ID token claim (a string or a list) matched against -oidc-admin-values and -oidc-editor-values; no match: viewer (SLUICE_OIDC_ROLE_CLAIM)")
	admins := fs.String("oidc-admin-values", env("SLUICE_OIDC_ADMIN_VALUES", ""), "comma-separated -oidc-role-claim values that make an admin (SLUICE_OIDC_ADMIN_VALUES)")
	editors := fs.String("oidc-editor-values", env("SLUICE_OIDC_EDITOR_VALUES", ""), "comma-separated -oidc-role-claim values that make an editor (SLUICE_OIDC_EDITOR_VALUES)")
	teams := fs.String("oidc-team-policies", env("SLUICE_OIDC_TEAM_POLICIES", ""), `-oidc-role-claim values that make an editor of some policies only: "team-payments=payments-*,checkout;team-search=search" (SLUICE_OIDC_TEAM_POLICIES)`)
	fs.BoolVar(&c.CreateUsers, "oidc-create-users", envBool("SLUICE_OIDC_CREATE_USERS"), "create an account for a user who logs in through OIDC without one; off: only existing accounts can (SLUICE_OIDC_CREATE_USERS)")
	return func() error {
		if c.ClientSecret == "" {
			c.ClientSecret = os.Getenv("SLUICE_OIDC_CLIENT_SECRET")
		}
		c.Scopes, c.AdminValues, c.EditorValues = splitList(*scopes), splitList(*admins), splitList(*editors)
		var err error
		if c.TeamPolicies, err = parseTeamPolicies(*teams); err != nil {
			return fmt.Errorf("-oidc-team-policies: %w", err)
		}
		return c.check()
	}
}

// parseTeamPolicies reads "value=pattern,pattern;value=pattern".
func parseTeamPolicies(v string) (map[string][]string, error) {
	out := map[string][]string{}
	for _, team := range strings.Split(v, ";") {
		if strings.TrimSpace(team) == "" {
			continue
		}
		value, patterns, ok := strings.Cut(team, "=")
		value = strings.TrimSpace(value)
		if !ok || value == "" {
			return nil, fmt.Errorf("%q is not value=policies (e.g. team-payments=payments-*)", strings.TrimSpace(team))
		}
		if _, dup := out[value]; dup {
			return nil, fmt.Errorf("%q is given twice", value)
		}
		sc, err := policies.ParseScope(patterns)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", value, err)
		}
		if !sc.Restricted() {
			return nil, fmt.Errorf("%s: no policies (an editor of every policy is -oidc-editor-values)", value)
		}
		out[value] = sc
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

func splitList(v string) []string {
	var out []string
	for _, f := range strings.Split(v, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// check validates the flags; each error names its flag.
func (c *oidcOptions) check() error {
	if c.Issuer == "" {
		for _, f := range []struct{ name, v string }{{"-oidc-client-id", c.ClientID}, {"-oidc-client-secret (SLUICE_OIDC_CLIENT_SECRET)", c.ClientSecret}, {"-oidc-redirect-url", c.RedirectURL}} {
			if f.v != "" {
				return fmt.Errorf("%s: set -oidc-issuer too (OIDC login is off without it)", f.name)
			}
		}
		return nil
	}
	iss, err := url.Parse(c.Issuer)
	if err != nil || iss.Host == "" || !secureOrLoopback(iss) {
		return fmt.Errorf("-oidc-issuer: %q is not an https:// URL (http:// only on a loopback address)", c.Issuer)
	}
	if c.ClientID == "" {
		return errors.New("-oidc-client-id: required with -oidc-issuer")
	}
	if c.RedirectURL == "" {
		return fmt.Errorf("-oidc-redirect-url: required with -oidc-issuer, e.g. https://sluice.example.com%s", oidcCallbackPath)
	}
	red, err := url.Parse(c.RedirectURL)
	if err != nil || red.Host == "" || !secureOrLoopback(red) || red.RawQuery != "" || red.Fragment != "" {
		return fmt.Errorf("-oidc-redirect-url: %q is not an https:// URL without query (http:// only on a loopback address)", c.RedirectURL)
	}
	if red.Path != oidcCallbackPath {
		return fmt.Errorf("-oidc-redirect-url: the path must be %s (got %q)", oidcCallbackPath, red.Path)
	}
	if c.UserClaim == "" {
		return errors.New("-oidc-user-claim: required with -oidc-issuer (e.g. preferred_username or email)")
	}
	if c.RoleClaim == "" && (len(c.AdminValues) > 0 || len(c.EditorValues) > 0 || len(c.TeamPolicies) > 0) {
		return errors.New("-oidc-role-claim: empty, but -oidc-admin-values, -oidc-editor-values or -oidc-team-policies are set")
	}
	if c.Name == "" {
		c.Name = iss.Hostname()
	}
	if len(c.Name) > 100 {
		return errors.New("-oidc-name: at most 100 characters")
	}
	return nil
}

func secureOrLoopback(u *url.URL) bool {
	if u.Scheme == "https" {
		return true
	}
	if u.Scheme != "http" {
		return false
	}
	h := u.Hostname()
	ip := net.ParseIP(h)
	return h == "localhost" || ip != nil && ip.IsLoopback()
}

// oidcDiscoveryTimeout bounds reading the provider's discovery document at
// start.
const oidcDiscoveryTimeout = 15 * time.Second

// build reads the provider's discovery document and returns the login
// configuration (nil when -oidc-issuer is empty).
func (c oidcOptions) build(ctx context.Context) (*httpapi.OIDC, error) {
	if c.Issuer == "" {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, oidcDiscoveryTimeout)
	defer cancel()
	prov, err := oidc.NewProvider(ctx, c.Issuer)
	if err != nil {
		return nil, fmt.Errorf("-oidc-issuer: reading the provider's discovery document: %w", err)
	}
	return &httpapi.OIDC{
		Name: c.Name,
		OAuth2: oauth2.Config{
			ClientID: c.ClientID, ClientSecret: c.ClientSecret, Endpoint: prov.Endpoint(), RedirectURL: c.RedirectURL,
			Scopes: append([]string{oidc.ScopeOpenID}, c.Scopes...),
		},
		Verifier: prov.Verifier(&oidc.Config{ClientID: c.ClientID}),
		Mapping: httpapi.RoleMapping{UserClaim: c.UserClaim, RoleClaim: c.RoleClaim, AdminValues: c.AdminValues, EditorValues: c.EditorValues,
			TeamPolicies: c.TeamPolicies},
		Create: c.CreateUsers,
	}, nil
}
