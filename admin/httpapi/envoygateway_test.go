package httpapi

import (
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/admin/envoygateway"
	"github.com/sluice-rl/sluice/admin/envoygateway/crdcheck"
)

func TestAPIEnvoyGatewayRendersTheCurrentPolicyForTheTarget(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.EnvoyGateway = envoygateway.Options{Namespace: "apps"} })
	for _, tok := range []string{"", "wrong-token-wrong-token"} {
		resp, _ := e.call(t, "GET", "/api/v1/envoygateway/extensionpolicy", tok, "", "")
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("token %q: %d, want 401", tok, resp.StatusCode)
		}
	}
	resp, y := e.apiJSON(t, "GET", "/api/v1/envoygateway/extensionpolicy?target=HTTPRoute/backend", "")
	raw, _ := y["_raw"].(string)
	if resp.StatusCode != 200 || !strings.Contains(raw, "kind: EnvoyExtensionPolicy") || !strings.Contains(raw, "kind: HTTPRoute") ||
		!strings.Contains(raw, "namespace: apps") || !strings.Contains(raw, "url: ghcr.io/sluice-rl/ratelimit-wasm:latest") {
		t.Fatalf("yaml: %d\n%s", resp.StatusCode, raw)
	}
	if err := crdcheck.CheckAgainstCRD([]byte(raw)); err != nil {
		t.Errorf("the CRD schema refuses the API's YAML: %v", err)
	}
	resp, j := e.apiJSON(t, "GET", "/api/v1/envoygateway/extensionpolicy?format=json", "")
	if resp.StatusCode != 200 || j["kind"] != "EnvoyExtensionPolicy" {
		t.Errorf("json: %d %v", resp.StatusCode, j)
	}
	for _, q := range []string{"format=xml", "target=Service/x", "namespace=Bad_NS"} {
		resp, body := e.apiJSON(t, "GET", "/api/v1/envoygateway/extensionpolicy?"+q, "")
		if resp.StatusCode != http.StatusBadRequest || body["field"] == nil {
			t.Errorf("%s: %d %v, want 400 naming the field", q, resp.StatusCode, body)
		}
	}
}

func TestEnvoyGatewayPageNeedsASessionAndEscapesTheManifest(t *testing.T) {
	e := newEnv(t, nil)
	resp, err := noRedirect(nil).Get(e.srv.URL + "/envoy-gateway")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Errorf("without a session: %d, want a redirect to the login", resp.StatusCode)
	}
	c := login(t, e, "ana")
	page := get(t, c, e.srv.URL+"/envoy-gateway?target=Gateway/edge")
	if !strings.Contains(page, "EnvoyExtensionPolicy") || !strings.Contains(page, "name: edge") || !strings.Contains(page, `href="/envoy-gateway"`) {
		t.Errorf("page lacks the manifest or the nav link:\n%s", page)
	}
	page = get(t, c, e.srv.URL+"/envoy-gateway?target=%3Cscript%3E")
	if strings.Contains(page, "<script>") || !strings.Contains(page, "could not be rendered") {
		t.Errorf("a bad target is not refused or not escaped:\n%s", page)
	}
	dl := get(t, c, e.srv.URL+"/envoy-gateway/extensionpolicy.json?target=HTTPRoute/r")
	if !strings.Contains(dl, `"kind": "HTTPRoute"`) {
		t.Errorf("download: %s", dl)
	}
}
