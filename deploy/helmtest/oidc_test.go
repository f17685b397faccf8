package helmtest

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

const oidcValues = `
oidc:
  enabled: true
  issuer: %s
  clientID: sluice-admin
  clientSecret: {name: sluice-oidc, key: secret}
  redirectURL: http://127.0.0.1:9000/login/oidc/callback
  name: Example SSO
  adminValues: [sluice-admins]
  editorValues: [sre]
  teamPolicies: {team-search: [search], team-payments: [payments-*, checkout]}
  createUsers: true
extraEnv:
  - {name: SLUICE_LOG_LEVEL_EXTRA, value: "1"}
`

// TestChartOIDCValuesBecomeTheAdminsFlags: the chart's oidc values render
// as the SLUICE_OIDC_* variables (the client secret from its Secret), and
// the admin binary starts with exactly that environment against a
// provider's discovery document and offers the provider's login.
func TestChartOIDCValuesBecomeTheAdminsFlags(t *testing.T) {
	var issuer string
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/.well-known/openid-configuration" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"issuer": %q, "authorization_endpoint": %q, "token_endpoint": %q, "jwks_uri": %q,
		  "id_token_signing_alg_values_supported": ["RS256"]}`, issuer, issuer+"/auth", issuer+"/token", issuer+"/keys")
	}))
	t.Cleanup(provider.Close)
	issuer = provider.URL

	objs, _, err := render(t, fmt.Sprintf(oidcValues, issuer))
	if err != nil {
		t.Fatal(err)
	}
	d := decode[appsv1.Deployment](t, objs["Deployment"][0])
	env := map[string]corev1.EnvVar{}
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = e
	}
	for name, want := range map[string]string{
		"SLUICE_OIDC_ISSUER": issuer, "SLUICE_OIDC_CLIENT_ID": "sluice-admin", "SLUICE_OIDC_NAME": "Example SSO",
		"SLUICE_OIDC_SCOPES": "profile,email", "SLUICE_OIDC_ROLE_CLAIM": "groups", "SLUICE_OIDC_ADMIN_VALUES": "sluice-admins",
		"SLUICE_OIDC_EDITOR_VALUES": "sre", "SLUICE_OIDC_TEAM_POLICIES": "team-payments=payments-*,checkout;team-search=search",
		"SLUICE_OIDC_CREATE_USERS": "true", "SLUICE_LOG_LEVEL_EXTRA": "1",
	} {
		if got := env[name].Value; got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	if ref := env["SLUICE_OIDC_CLIENT_SECRET"].ValueFrom; ref == nil || ref.SecretKeyRef.Name != "sluice-oidc" || ref.SecretKeyRef.Key != "secret" {
		t.Errorf("the client secret is not read from its Secret: %+v", env["SLUICE_OIDC_CLIENT_SECRET"])
	}

	a := startPodAdmin(t, buildAdmin(t), objs, d, map[string]string{"SLUICE_OIDC_CLIENT_SECRET": "from-the-secret"})
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		resp, err := http.Get(a.url + "/login")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !strings.Contains(string(body), "Log in with Example SSO") {
				t.Fatalf("the login page does not offer the provider:\n%s", body)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the admin did not start with the chart's OIDC environment:\n%s", a.out.String())
		}
	}
}

func TestChartOIDCNeedsItsIssuer(t *testing.T) {
	_, _, err := render(t, "oidc: {enabled: true, clientID: x, redirectURL: https://a/login/oidc/callback}")
	if err == nil || !strings.Contains(err.Error(), "oidc.issuer is required") {
		t.Errorf("OIDC without an issuer: %v", err)
	}
	_, _, err = render(t, "oidc: {teamPolicies: {t: [pay*ments]}}")
	if err == nil || !strings.Contains(err.Error(), "teamPolicies") {
		t.Errorf("a bad team policy pattern: %v, want the schema to name teamPolicies", err)
	}
}

// TestChartGRPCTLSMountsTheSecretAndRequiresClientCertificates: with
// grpcTLS the Secret is mounted read-only and the admin is told its files;
// requireClientCert adds the CA, and is refused without a Secret.
func TestChartGRPCTLSMountsTheSecretAndRequiresClientCertificates(t *testing.T) {
	objs, _, err := render(t, "grpcTLS: {secretName: sluice-grpc-tls, requireClientCert: true}")
	if err != nil {
		t.Fatal(err)
	}
	d := decode[appsv1.Deployment](t, objs["Deployment"][0])
	c := d.Spec.Template.Spec.Containers[0]
	env := envOf(c)
	for name, want := range map[string]string{"SLUICE_GRPC_TLS_CERT": "/etc/sluice-grpc-tls/tls.crt",
		"SLUICE_GRPC_TLS_KEY": "/etc/sluice-grpc-tls/tls.key", "SLUICE_GRPC_CLIENT_CA": "/etc/sluice-grpc-tls/ca.crt"} {
		if env[name] != want {
			t.Errorf("%s = %q, want %q", name, env[name], want)
		}
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		mounted = mounted || m.Name == "grpc-tls" && m.MountPath == "/etc/sluice-grpc-tls" && m.ReadOnly
	}
	secret := false
	for _, v := range d.Spec.Template.Spec.Volumes {
		secret = secret || v.Name == "grpc-tls" && v.Secret != nil && v.Secret.SecretName == "sluice-grpc-tls"
	}
	if !mounted || !secret {
		t.Errorf("the Secret is not mounted read-only: mount %v, volume %v", mounted, secret)
	}
	if objs, _, _ := render(t, ""); envOf(decode[appsv1.Deployment](t, objs["Deployment"][0]).Spec.Template.Spec.Containers[0])["SLUICE_GRPC_TLS_CERT"] != "" {
		t.Error("TLS on by default")
	}
	if _, _, err := render(t, "grpcTLS: {requireClientCert: true}"); err == nil || !strings.Contains(err.Error(), "grpcTLS.secretName") {
		t.Errorf("client certificates without a Secret: %v", err)
	}
}
