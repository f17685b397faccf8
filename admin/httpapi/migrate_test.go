package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/admin/auth"
	"github.com/sluice-rl/sluice/admin/store"
	"github.com/sluice-rl/sluice/shared/policy"
)

const (
	ratelimitConfig = "domain: edge\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: hour, requests_per_unit: 1000}\n" +
		"  - key: api_key\n    value: acme\n    rate_limit: {unit: hour, requests_per_unit: 50000}\n" +
		"  - key: api_key\n    value: '<script>alert(1)</script>'\n    rate_limit: {unit: second, requests_per_unit: 0}\n"
	ratelimitActions = "- actions: [{request_headers: {header_name: x-api-key, descriptor_key: api_key}}]\n"
)

func migrateBody(extra string) string {
	return `{"config": ` + jsonString(ratelimitConfig) + `, "rate_limits": ` + jsonString(ratelimitActions) + extra + `}`
}

func jsonString(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s) + `"`
}

func TestAPIMigrateAnswersTheConvertedPolicyAndSavesNothing(t *testing.T) {
	e := newEnv(t, nil)
	resp, body := e.apiJSON(t, "POST", "/api/v1/policy/migrate", migrateBody(`, "scope": "local"`))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %v", resp.StatusCode, body)
	}
	cfg := parsePolicyOf(t, body)
	if len(cfg.Policies) != 1 || cfg.Fleet != nil || len(cfg.Policies[0].Rules) != 2 || body["base_version"] != nil {
		t.Fatalf("converted %+v, base_version %v", cfg.Policies, body["base_version"])
	}
	if notes, _ := body["notes"].([]any); len(notes) == 0 {
		t.Error("no notes")
	}
	// Added to the current version: its rule stays, the base is named.
	resp, body = e.apiJSON(t, "POST", "/api/v1/policy/migrate", migrateBody(`, "add_to_current": true`))
	if resp.StatusCode != http.StatusOK || body["base_version"] != float64(1) {
		t.Fatalf("%d %v", resp.StatusCode, body)
	}
	if cfg := parsePolicyOf(t, body); len(cfg.Policies) != 2 || cfg.Fleet == nil {
		t.Errorf("added: %+v", cfg)
	}
	if cur, _ := e.svc.Current(context.Background()); cur.Number != 1 {
		t.Errorf("a conversion saved v%d", cur.Number)
	}
}

func parsePolicyOf(t *testing.T, body map[string]any) *policy.Config {
	t.Helper()
	doc, err := json.Marshal(body["policy"])
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := policy.Parse(doc)
	if err != nil {
		t.Fatalf("%v\n%s", err, doc)
	}
	return cfg
}

func TestAPIMigrateNamesTheInputAtFault(t *testing.T) {
	e := newEnv(t, nil)
	for _, tc := range []struct{ body, field, msg string }{
		{`{"rate_limits": "x"}`, "config", "required"},
		{`{"config": "domain: d"}`, "rate_limits", "required"},
		{`{"config": "domain: d\ndescriptors:\n  - key: k\n    colour: red\n", "rate_limits": "- actions: []"}`, "config", "line 4: field colour not found"},
		{migrateBody(`, "scope": "everywhere"`), "scope", `"everywhere": want global or local`},
		{`{"config": ` + jsonString(ratelimitConfig) + `, "rate_limits": "- actions: [{source_cluster: {}}]"}`, "rate_limits", "rate_limits[0].actions[0]: source_cluster is not converted"},
		{`{"from": "ingress-nginx", "config": ` + jsonString(shopIngress) + `, "rate_limits": "- actions: []"}`, "rate_limits", "not read when converting from ingress-nginx"},
		{`{"from": "ingress-nginx", "config": ` + jsonString(shopIngress) + `, "status": 700}`, "status", "want an HTTP status from 400 to 599"},
		{`{"from": "haproxy", "config": "x"}`, "from", `"haproxy": want one of`},
		{`{"from": "higress", "config": "rule_name: r\nrule_items: []\n", "plugin": "quota"}`, "plugin", `plugin "quota": want key-rate-limit`},
		{`{"from": "ingress-nginx", "config": "x", "default_cost": 5}`, "default_cost", "not read when converting from ingress-nginx"},
		{`{"from": "kong", "config": "plugins: []", "consumer_key": "form:x"}`, "consumer_key", `"form:x" is not a key source`},
		{`{"from": "nginx", "config": "limit_req zone=z;", "scope": "local"}`, "scope", "not read when converting from nginx"},
		{`{"from": "nginx", "config": "location / {"}`, "config", "nginx.conf: line 1"},
		{`{"from": "envoy-local-ratelimit", "config": "static_resources: {listeners: []}"}`, "config", "no local_ratelimit filter"},
	} {
		resp, body := e.apiJSON(t, "POST", "/api/v1/policy/migrate", tc.body)
		msg, _ := body["error"].(string)
		if resp.StatusCode != http.StatusBadRequest || body["field"] != tc.field || !strings.Contains(msg, tc.msg) {
			t.Errorf("%s: %d %v; want 400 on %s with %q", tc.body, resp.StatusCode, body, tc.field, tc.msg)
		}
	}
}

func TestMigratePageConvertsThenSavesANewVersion(t *testing.T) {
	e := newEnv(t, nil)
	c := login(t, e, "ed")
	page := get(t, c, e.srv.URL+"/policy/migrate")
	csrf := csrfOf(t, page)
	form := url.Values{"csrf": {csrf}, "base_version": {"1"}, "config": {strings.ReplaceAll(ratelimitConfig, "\n", "\r\n")},
		"rate_limits": {ratelimitActions}, "scope": {"global"}, "op": {"preview"}}
	resp, body := post(t, c, e.srv.URL+"/policy/migrate", form)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("convert: %d\n%s", resp.StatusCode, body)
	}
	for _, want := range []string{`id="mg-rules"`, `data-rule="api_key"`, "; 1 override<", `id="mg-save"`, "Save as v2",
		"&lt;script&gt;alert(1)&lt;/script&gt;"} {
		if !strings.Contains(body, want) {
			t.Errorf("the conversion lacks %s:\n%s", want, body)
		}
	}
	if strings.Contains(body, "<script>alert(1)") {
		t.Error("a value of the configuration is rendered unescaped")
	}

	form.Set("op", "save")
	form.Set("message", "from the service")
	resp, body = post(t, c, e.srv.URL+"/policy/migrate", form)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/?saved=2" {
		t.Fatalf("save: %d %s\n%s", resp.StatusCode, resp.Header.Get("Location"), body)
	}
	cur, err := e.svc.Current(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := policy.Parse(cur.JSON)
	if err != nil || len(cfg.Policies) != 2 || cfg.RuleByName("api_key") == nil || cur.Message != "from the service" {
		t.Fatalf("v%d: %v %s", cur.Number, err, cur.JSON)
	}
	es, _ := e.st.ListAudit(context.Background(), store.AuditFilter{Action: ActionSave})
	if len(es) == 0 || es[0].Version != 2 || es[0].Actor != "ed" {
		t.Errorf("audit: %+v", es)
	}

	// The same form again is based on v1: refused, nothing saved.
	resp, body = post(t, c, e.srv.URL+"/policy/migrate", form)
	if resp.StatusCode != http.StatusConflict || !strings.Contains(body, `id="conflict"`) {
		t.Errorf("a stale base: %d\n%s", resp.StatusCode, body)
	}
}

func TestMigratePageLetsAViewerConvertButNotSave(t *testing.T) {
	e := newEnv(t, nil)
	addUser(t, e, "vera", auth.RoleViewer)
	viewer := loginAs(t, e, "vera")
	page := get(t, viewer, e.srv.URL+"/policy/migrate")
	if !strings.Contains(page, "needs the editor role") {
		t.Errorf("the viewer is not told:\n%s", page)
	}
	form := url.Values{"csrf": {csrfOf(t, page)}, "base_version": {"1"}, "config": {ratelimitConfig}, "rate_limits": {ratelimitActions}, "op": {"preview"}}
	resp, body := post(t, viewer, e.srv.URL+"/policy/migrate", form)
	if resp.StatusCode != http.StatusOK || strings.Contains(body, `id="mg-save"`) {
		t.Errorf("the viewer's conversion: %d, a save button %v", resp.StatusCode, strings.Contains(body, `id="mg-save"`))
	}
	form.Set("op", "save")
	if resp, _ := post(t, viewer, e.srv.URL+"/policy/migrate", form); resp.StatusCode != http.StatusForbidden {
		t.Errorf("the viewer's save: %d, want 403", resp.StatusCode)
	}
	form.Del("csrf")
	if resp, _ := post(t, loginAs(t, e, "vera"), e.srv.URL+"/policy/migrate", form); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a post without the CSRF token: %d, want 403", resp.StatusCode)
	}
	if cur, _ := e.svc.Current(context.Background()); cur.Number != 1 {
		t.Errorf("v%d saved", cur.Number)
	}
}

func TestThePolicyPageLinksToTheConversion(t *testing.T) {
	e := newEnv(t, nil)
	if page := get(t, login(t, e, "ed"), e.srv.URL+"/"); !strings.Contains(page, `<a href="/policy/migrate">`) {
		t.Errorf("no link to the conversion:\n%s", page)
	}
}

const shopIngress = `apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: shop
  namespace: web
  annotations:
    nginx.ingress.kubernetes.io/limit-rps: "5"
    nginx.ingress.kubernetes.io/limit-connections: "10"
spec:
  rules: [{host: shop.example.com}]
`

func TestAPIMigrateConvertsFromTheSourceItNames(t *testing.T) {
	e := newEnv(t, nil)
	resp, body := e.apiJSON(t, "POST", "/api/v1/policy/migrate", `{"from": "ingress-nginx", "status": 429, "config": `+jsonString(shopIngress)+`}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %v", resp.StatusCode, body)
	}
	cfg := parsePolicyOf(t, body)
	if cfg.RejectStatus != 429 || cfg.RuleByName("web-shop-rps") == nil || cfg.RuleByName("web-shop-connections") == nil {
		t.Errorf("converted: %+v", body["policy"])
	}
}

func TestAPIMigrateConvertsHigressPluginsWithTheirChoices(t *testing.T) {
	e := newEnv(t, nil)
	body := `{"from": "higress", "plugin": "ai-token-ratelimit", "default_cost": 250, "add_to_current": true, "config": ` +
		jsonString("rule_name: llm\nrule_items:\n  - limit_by_per_header: x-api-key\n    limit_keys: [{key: '*', token_per_minute: 1000}]\n") + `}`
	resp, answer := e.apiJSON(t, "POST", "/api/v1/policy/migrate", body)
	if resp.StatusCode != http.StatusOK || answer["base_version"] != float64(1) {
		t.Fatalf("%d %v", resp.StatusCode, answer)
	}
	cfg := parsePolicyOf(t, answer)
	r := cfg.RuleByName("llm")
	if len(cfg.Policies) != 2 || r == nil || r.TokenBucket == nil || r.TokenBucket.DefaultCost != 250 {
		t.Errorf("converted: %+v", answer["policy"])
	}
}

func TestAPIMigrateConvertsEnvoyGatewayPoliciesWithTheirScope(t *testing.T) {
	e := newEnv(t, nil)
	objects := "apiVersion: gateway.envoyproxy.io/v1alpha1\nkind: BackendTrafficPolicy\nmetadata: {name: api, namespace: shop}\n" +
		"spec:\n  targetRefs: [{kind: HTTPRoute, name: api}]\n" +
		"  rateLimit: {global: {rules: [{clientSelectors: [{headers: [{name: x-api-key, type: Distinct}]}], limit: {requests: 100, unit: Minute}}]}}\n"
	resp, answer := e.apiJSON(t, "POST", "/api/v1/policy/migrate", `{"from": "envoy-gateway", "scope": "local", "config": `+jsonString(objects)+`}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %v", resp.StatusCode, answer)
	}
	cfg := parsePolicyOf(t, answer)
	r := cfg.RuleByName("shop-api-rule-0")
	if r == nil || r.Global || cfg.Fleet != nil || r.Window == nil || r.Window.Limit != 100 || r.Window.WindowSeconds != 60 {
		t.Errorf("converted: %+v", answer["policy"])
	}
	resp, answer = e.apiJSON(t, "POST", "/api/v1/policy/migrate", `{"from": "envoy-gateway", "plugin": "x", "config": `+jsonString(objects)+`}`)
	if resp.StatusCode != http.StatusBadRequest || answer["field"] != "plugin" {
		t.Errorf("a choice Envoy Gateway's conversion does not read: %d %v", resp.StatusCode, answer)
	}
}

func TestMigratePageConvertsFromTheChosenSourceAndIgnoresTheOthersFields(t *testing.T) {
	e := newEnv(t, nil)
	c := login(t, e, "ed")
	page := get(t, c, e.srv.URL+"/policy/migrate?from=ingress-nginx")
	if !strings.Contains(page, `<option value="ingress-nginx" selected `) {
		t.Errorf("the source asked for is not chosen:\n%s", page)
	}
	// The form sends every source's fields: scope and rate_limits are
	// envoyproxy/ratelimit's, and not read here.
	form := url.Values{"csrf": {csrfOf(t, page)}, "base_version": {"1"}, "from": {"ingress-nginx"}, "config": {shopIngress},
		"rate_limits": {""}, "scope": {"global"}, "status": {"abc"}, "op": {"preview"}}
	resp, body := post(t, c, e.srv.URL+"/policy/migrate", form)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "status: &#34;abc&#34; is not a whole number") {
		t.Errorf("a status that is not a number: %d\n%s", resp.StatusCode, body)
	}
	form.Set("status", "429")
	form.Set("op", "save")
	resp, body = post(t, c, e.srv.URL+"/policy/migrate", form)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("save: %d\n%s", resp.StatusCode, body)
	}
	cur, _ := e.svc.Current(context.Background())
	cfg, err := policy.Parse(cur.JSON)
	if err != nil || cfg.RejectStatus != 429 || cfg.RuleByName("web-shop-rps") == nil || cur.Message != "Converted 2 rules from ingress-nginx annotations" {
		t.Errorf("v%d %q: %v\n%s", cur.Number, cur.Message, err, cur.JSON)
	}
}

func TestMigratePageTakesEachSourcesChoices(t *testing.T) {
	e := newEnv(t, nil)
	c := login(t, e, "ed")
	page := get(t, c, e.srv.URL+"/policy/migrate?from=higress")
	for _, field := range []string{"plugin", "default_cost", "consumer_key", "annotations_prefix", "fleet_cluster"} {
		if !strings.Contains(page, `data-field="`+field+`"`) {
			t.Errorf("the form has no %s", field)
		}
	}
	form := url.Values{"csrf": {csrfOf(t, page)}, "base_version": {"1"}, "from": {"higress"}, "plugin": {"ai-token-ratelimit"}, "default_cost": {"lots"},
		"config":       {"rule_name: llm\nrule_items:\n  - limit_by_per_header: x-api-key\n    limit_keys: [{key: '*', token_per_minute: 1000}]\n"},
		"consumer_key": {"jwt:sub"}, "scope": {"global"}, "op": {"preview"}}
	resp, body := post(t, c, e.srv.URL+"/policy/migrate", form)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "default_cost: &#34;lots&#34; is not a whole number") {
		t.Errorf("a cost that is not a number: %d\n%s", resp.StatusCode, body)
	}
	form.Set("default_cost", "250")
	form.Set("op", "save")
	if resp, body = post(t, c, e.srv.URL+"/policy/migrate", form); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("save: %d\n%s", resp.StatusCode, body)
	}
	cur, _ := e.svc.Current(context.Background())
	cfg, err := policy.Parse(cur.JSON)
	if r := cfg.RuleByName("llm"); err != nil || r == nil || r.TokenBucket.DefaultCost != 250 {
		t.Errorf("%v\n%s", err, cur.JSON)
	}
}
