package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
)

// clearOIDCEnv keeps the test's flags the only source.
func clearOIDCEnv(t *testing.T) {
	for _, v := range []string{"ISSUER", "CLIENT_ID", "CLIENT_SECRET", "REDIRECT_URL", "NAME", "SCOPES", "USER_CLAIM", "ROLE_CLAIM", "ADMIN_VALUES", "EDITOR_VALUES", "TEAM_POLICIES", "CREATE_USERS"} {
		t.Setenv("SLUICE_OIDC_"+v, "") // restored after the test
		os.Unsetenv("SLUICE_OIDC_" + v)
	}
}

var goodOIDC = []string{"-oidc-issuer", "https://login.example.com/realms/ops", "-oidc-client-id", "sluice",
	"-oidc-redirect-url", "https://sluice.example.com/login/oidc/callback"}

func TestOIDCFlagsParse(t *testing.T) {
	clearOIDCEnv(t)
	t.Setenv("SLUICE_OIDC_CLIENT_SECRET", "from-the-environment")
	o, err := parseOptions(append(slices.Clone(goodOIDC), "-oidc-admin-values", "ops, sre", "-oidc-editor-values", "dev", "-oidc-create-users",
		"-oidc-team-policies", "team-payments=payments-*, checkout; team-search=search;"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	c := o.OIDC
	if c.ClientSecret != "from-the-environment" || c.Name != "login.example.com" || !c.CreateUsers ||
		!slices.Equal(c.AdminValues, []string{"ops", "sre"}) || !slices.Equal(c.EditorValues, []string{"dev"}) ||
		c.RoleClaim != "groups" || c.UserClaim != "preferred_username" || !slices.Equal(c.Scopes, []string{"profile", "email"}) ||
		len(c.TeamPolicies) != 2 || !slices.Equal(c.TeamPolicies["team-payments"], []string{"checkout", "payments-*"}) {
		t.Fatalf("%+v", c)
	}
	if _, err := parseOptions(nil, io.Discard); err == nil || !strings.HasPrefix(err.Error(), "-oidc-client-secret (SLUICE_OIDC_CLIENT_SECRET): set -oidc-issuer") {
		t.Fatalf("a secret without an issuer: %v", err)
	}
	os.Unsetenv("SLUICE_OIDC_CLIENT_SECRET")
	if o, err := parseOptions(nil, io.Discard); err != nil || o.OIDC.Issuer != "" {
		t.Fatalf("without OIDC: %+v %v", o.OIDC, err)
	}
}

func TestOIDCFlagErrorsNameTheFlag(t *testing.T) {
	clearOIDCEnv(t)
	with := func(extra ...string) []string { return append(slices.Clone(goodOIDC), extra...) }
	for _, c := range []struct {
		args []string
		flag string
	}{
		{[]string{"-oidc-client-id", "sluice"}, "-oidc-client-id: set -oidc-issuer"},
		{[]string{"-oidc-redirect-url", "https://a/login/oidc/callback"}, "-oidc-redirect-url: set -oidc-issuer"},
		{with("-oidc-issuer", "http://login.example.com"), "-oidc-issuer:"},
		{with("-oidc-issuer", "login.example.com"), "-oidc-issuer:"},
		{with("-oidc-client-id", ""), "-oidc-client-id:"},
		{with("-oidc-redirect-url", ""), "-oidc-redirect-url:"},
		{with("-oidc-redirect-url", "https://sluice.example.com/callback"), "-oidc-redirect-url: the path must be /login/oidc/callback"},
		{with("-oidc-redirect-url", "http://sluice.example.com/login/oidc/callback"), "-oidc-redirect-url:"},
		{with("-oidc-user-claim", ""), "-oidc-user-claim:"},
		{with("-oidc-role-claim", "", "-oidc-admin-values", "ops"), "-oidc-role-claim:"},
		{with("-oidc-name", strings.Repeat("x", 101)), "-oidc-name:"},
		{with("-oidc-team-policies", "team-payments"), "-oidc-team-policies: \"team-payments\" is not value=policies"},
		{with("-oidc-team-policies", "t=pay*ments"), "-oidc-team-policies: t: policies:"},
		{with("-oidc-team-policies", "t=a;t=b"), "-oidc-team-policies: \"t\" is given twice"},
		{with("-oidc-team-policies", "t= , "), "-oidc-team-policies: t: no policies"},
		{with("-oidc-role-claim", "", "-oidc-team-policies", "t=a"), "-oidc-role-claim:"},
	} {
		_, err := parseOptions(c.args, io.Discard)
		if err == nil || !strings.HasPrefix(err.Error(), c.flag) {
			t.Errorf("%q: got %v, want an error starting %q", c.args, err, c.flag)
		}
	}
	// http:// is fine on a loopback address (a provider on the same host).
	if _, err := parseOptions(with("-oidc-issuer", "http://127.0.0.1:5556/dex", "-oidc-redirect-url", "http://localhost:9000/login/oidc/callback"), io.Discard); err != nil {
		t.Errorf("loopback http: %v", err)
	}
}

func TestOIDCIssuerWithoutDiscoveryFailsTheStart(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	c := oidcOptions{Issuer: srv.URL, ClientID: "sluice", RedirectURL: "http://127.0.0.1/login/oidc/callback", UserClaim: "sub"}
	if _, err := c.build(context.Background()); err == nil || !strings.HasPrefix(err.Error(), "-oidc-issuer: ") {
		t.Fatalf("got %v", err)
	}
}
