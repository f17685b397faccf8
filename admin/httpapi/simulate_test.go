package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/admin/telemetry"
	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/request"
	"github.com/sluice-rl/sluice/shared/simulate"
)

const tiersPolicy = `{"policies":[{"name":"tiers","rules":[
 {"name":"premium","match":{"header:x-plan":"premium"},"limit_keys":["header:x-api-key"],"algorithm":"token_bucket","algorithm_config":{"tokens_per_second":10,"burst":20}},
 {"name":"free","limit_keys":["header:x-api-key"],"algorithm":"token_bucket","algorithm_config":{"tokens_per_second":1,"burst":1}},
 {"name":"anonymous","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"tokens_per_second":1,"burst":3}}]},
 {"name":"users","rules":[{"name":"per-user","limit_keys":["jwt:sub"],"algorithm":"token_bucket","algorithm_config":{"tokens_per_second":1,"burst":2}}]}]}`

func simulateCall(t *testing.T, e *env, body string) (*http.Response, map[string]any) {
	t.Helper()
	return e.apiJSON(t, "POST", "/api/v1/policy/simulate", body)
}

func rulesOf(t *testing.T, m map[string]any, policyIndex int) []map[string]any {
	t.Helper()
	ps, _ := m["policies"].([]any)
	if len(ps) <= policyIndex {
		t.Fatalf("no policy %d in %v", policyIndex, m)
	}
	var out []map[string]any
	for _, r := range ps[policyIndex].(map[string]any)["rules"].([]any) {
		out = append(out, r.(map[string]any))
	}
	return out
}

func TestSimulateDraftPicksTheTierAndExplainsTheOthers(t *testing.T) {
	e := newEnv(t, nil)
	body := fmt.Sprintf(`{"policy":%s,"request":{"path":"/v1/items","headers":{"X-Api-Key":"secret-key-12345","x-plan":"free"},"claims":{"sub":"alice"}}}`, tiersPolicy)
	resp, m := simulateCall(t, e, body)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %v", resp.StatusCode, m)
	}
	if m["policy"] != "the draft" {
		t.Errorf("policy = %v, want the draft", m["policy"])
	}
	if tc, _ := m["as_test"].(string); !strings.Contains(tc, "headers: {X-Api-Key: secret-key-12345, x-plan: free}") ||
		!strings.Contains(tc, "claims: {sub: alice}") || !strings.Contains(tc, `expect: {status: 200, rule: free, applies: {tiers: free, users: per-user}}`) {
		t.Errorf("as_test:\n%s", tc)
	}
	rules := rulesOf(t, m, 0)
	if rules[0]["applies"] != false || !strings.Contains(rules[0]["why_not"].(string), "header:x-plan") {
		t.Errorf("premium: %v", rules[0])
	}
	if strings.Contains(rules[0]["why_not"].(string), "free") {
		t.Errorf("the why repeats a header's value: %v", rules[0]["why_not"])
	}
	free := rules[1]
	if free["applies"] != true || free["cost"] != 1.0 || free["level"] != 1.0 {
		t.Errorf("free: %v", free)
	}
	id := free["identity"].(string)
	if !strings.HasPrefix(id, "header:x-api-key=secr…#") || strings.Contains(id, "secret-key-12345") {
		t.Errorf("identity %q is not masked as on the dashboard", id)
	}
	if !strings.Contains(rules[2]["why_not"].(string), `"free"`) {
		t.Errorf("anonymous: %v", rules[2])
	}
	user := rulesOf(t, m, 1)[0]
	if uid, _ := user["identity"].(string); !strings.HasPrefix(uid, "jwt:sub=…#") || len(uid) != len("jwt:sub=…#")+8 {
		t.Errorf("per-user identity %q, want the claim masked (a short value shows only its hash)", uid)
	}
	d := m["decision"].(map[string]any)
	if d["allowed"] != true || d["rule"] != "free" {
		t.Fatalf("decision %v", d)
	}
	if !hasField(d["headers"], "ratelimit", `"free";r=0;t=1`) {
		t.Errorf("headers %v, want the free tier's RateLimit field", d["headers"])
	}
}

func hasField(v any, name, value string) bool {
	hs, _ := v.([]any)
	for _, h := range hs {
		kv := h.([]any)
		if kv[0] == name && kv[1] == value {
			return true
		}
	}
	return false
}

func TestSimulateRejectsWithTheFiltersResponse(t *testing.T) {
	e := newEnv(t, nil)
	// A fresh bucket holds its burst: a request costing more is refused.
	pol := `{"reject_grpc_status":"unavailable","rules":[{"name":"tiny","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"tokens_per_second":1,"burst":2,"cost_source":"header:x-cost"}}]}`
	resp, m := simulateCall(t, e, `{"policy":`+pol+`,"request":{"client_address":"10.1.2.3:4000","headers":{"x-cost":"3"}}}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %v", resp.StatusCode, m)
	}
	d := m["decision"].(map[string]any)
	if d["allowed"] != false || d["status"] != 429.0 || d["rule"] != "tiny" || d["grpc_status"] != "unavailable" ||
		d["response_code_details"] != "sluice_rate_limited{tiny}" {
		t.Fatalf("decision %v", d)
	}
	if !hasField(d["headers"], "x-ratelimit-reason", "token_bucket_exceeded") || !strings.Contains(d["body"].(string), `"rule":"tiny"`) {
		t.Errorf("rejection %v", d)
	}
	if id := rulesOf(t, m, 0)[0]["identity"]; id != "ip:address=10.1.2.3" {
		t.Errorf("identity %v, want the address without its port", id)
	}
}

func TestSimulateSaysARuleEnforcedOnAShareSparesTheIdentity(t *testing.T) {
	e := newEnv(t, nil)
	pol := `{"rules":[{"name":"ramp","enforce_percent":50,"limit_keys":["header:x-api-key"],"algorithm":"token_bucket","algorithm_config":{"tokens_per_second":1,"burst":2,"cost_source":"header:x-cost"}}]}`
	seen := map[bool]bool{}
	for i := 0; len(seen) < 2 && i < 100; i++ {
		key := "k" + strconv.Itoa(i)
		enforced := request.Enforced(key, 50)
		if seen[enforced] {
			continue
		}
		seen[enforced] = true
		resp, m := simulateCall(t, e, `{"policy":`+pol+`,"request":{"headers":{"x-api-key":"`+key+`","x-cost":"3"}}}`)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %v", resp.StatusCode, m)
		}
		d, rule := m["decision"].(map[string]any), rulesOf(t, m, 0)[0]
		if enforced {
			if d["allowed"] != false || d["status"] != 429.0 || rule["spared"] != nil {
				t.Errorf("key %s is enforced: decision %v, rule %v", key, d, rule)
			}
			continue
		}
		if d["allowed"] != true || rule["spared"] != true || !hasField(d["upstream_headers"], "x-sluice-shadow", "ramp") {
			t.Errorf("key %s is spared: decision %v, rule %v", key, d, rule)
		}
	}
	if len(seen) < 2 {
		t.Fatal("a hundred keys, all enforced or all spared at 50%")
	}
}

func TestSimulateCurrentAndStoredVersions(t *testing.T) {
	e := newEnv(t, nil)
	resp, m := e.apiJSON(t, "POST", "/api/v1/policy", `{"base_version":1,"policy":`+perIP+`}`)
	if resp.StatusCode != 201 {
		t.Fatalf("save: %d %v", resp.StatusCode, m)
	}
	_, m = simulateCall(t, e, `{"request":{}}`)
	if m["policy"] != "the current policy (v2)" || rulesOf(t, m, 0)[0]["name"] != "per-ip" {
		t.Errorf("current: %v", m)
	}
	_, m = simulateCall(t, e, `{"version":1,"request":{}}`)
	if m["policy"] != "v1" {
		t.Errorf("version 1: %v", m["policy"])
	}
	resp, m = simulateCall(t, e, `{"version":9,"request":{}}`)
	if resp.StatusCode != 404 {
		t.Errorf("a missing version: %d %v", resp.StatusCode, m)
	}
}

func TestSimulateRefusesBadInputNamingTheField(t *testing.T) {
	e := newEnv(t, nil)
	huge := strings.Repeat("a", 9000)
	many := map[string]string{}
	for i := 0; i < 8; i++ {
		many[fmt.Sprintf("x-h%d", i)] = strings.Repeat("b", 8000)
	}
	manyJSON, _ := json.Marshal(many)
	for _, c := range []struct{ body, field string }{
		{`{"request":{"jwt":"not-a-token"}}`, "request.jwt"},
		{`{"request":{"jwt":"a.%%%.c"}}`, "request.jwt"},
		{`{"request":{"jwt":"a.b.c","claims":{"sub":"x"}}}`, "request.jwt"},
		{`{"request":{"claims":[1,2]}}`, "request.claims"},
		{`{"request":{"client_address":"10.0.0.999"}}`, "request.client_address"},
		{`{"request":{"client_address":"example.com:80"}}`, "request.client_address"},
		{`{"request":{"peer_principal":"spiffe://cluster.local/ns/a b"}}`, "request.peer_principal"},
		{`{"request":{"route":"check\nout"}}`, "request.route"},
		{`{"request":{"cluster":"outbound|80||a\u0000b"}}`, "request.cluster"},
		{`{"request":{"cluster":"` + strings.Repeat("c", 2000) + `"}}`, "request.cluster"},
		{`{"request":{"connection":-1}}`, "request.connection"},
		{`{"request":{"connection":1.5}}`, "request.connection"},
		{`{"request":{"connection":"seven"}}`, "request.connection"},
		{`{"request":{"connection":"18446744073709551616"}}`, "request.connection"},
		{`{"request":{"connection":true}}`, "request.connection"},
		{`{"request":{"metadata":["a"]}}`, "request.metadata"},
		{`{"request":{"metadata":{"envoy.filters.http.jwt_authn":"alice"}}}`, "request.metadata.envoy.filters.http.jwt_authn"},
		{`{"request":{"metadata":{"ns":{"k":"` + strings.Repeat("m", 16<<10) + `"}}}}`, "request.metadata"},
		{`{"request":{"peer_principal":"` + strings.Repeat("s", 3000) + `"}}`, "request.peer_principal"},
		{`{"request":{"headers":{"x-big":"` + huge + `"}}}`, "request.headers.x-big"},
		{`{"request":{"headers":` + string(manyJSON) + `}}`, "request.headers"},
		{`{"request":{"headers":{"bad name":"v"}}}`, "request.headers.bad name"},
		{`{"request":{"path":"no-slash"}}`, "request.path"},
		{`{"request":{"method":"GE T"}}`, "request.method"},
		{`{"policy":{},"version":1,"request":{}}`, "version"},
		{`{"request":{"response":{"status":700}}}`, "request.response.status"},
		{`{"request":{"response":{"headers":{"content type":"x"}}}}`, "request.response.headers.content type"},
		{`{"request":{"response":{"trailers":{"x-cost":"1\n2"}}}}`, "request.response.trailers.x-cost"},
		{`{"request":{"response":{"body":"` + strings.Repeat("b", 48<<10+1) + `"}}}`, "request.response.body"},
		{`{"policy":{}}`, "request"},
	} {
		resp, m := simulateCall(t, e, c.body)
		if resp.StatusCode != 400 || m["field"] != c.field {
			t.Errorf("%.80s: %d %v, want 400 naming %s", c.body, resp.StatusCode, m, c.field)
		}
	}
}

func TestSimulateRefusesAnInvalidDraftLikeASave(t *testing.T) {
	e := newEnv(t, nil)
	resp, m := simulateCall(t, e, `{"policy":{"rules":[{"name":"x","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":10,"burst":5}}]},"request":{}}`)
	if resp.StatusCode != 422 {
		t.Fatalf("status %d: %v", resp.StatusCode, m)
	}
	es, _ := m["errors"].([]any)
	if len(es) == 0 || !strings.Contains(fmt.Sprint(es), "burst") {
		t.Errorf("errors %v", m)
	}
}

func TestSimulatorFormRunsTheUnsavedDraft(t *testing.T) {
	e := newEnv(t, nil)
	c := login(t, e, "alice")
	tok := csrfOf(t, get(t, c, e.srv.URL+"/"))
	form := url.Values{"csrf": {tok}, "base_version": {"1"}, "policy": {tiersPolicy}, "sim_against": {"draft"},
		"sim_path": {"/v1/items"}, "sim_headers": {"x-plan: premium\nx-api-key: abcdefghijk"}, "sim_client": {"10.0.0.1"}}
	resp, body := post(t, c, e.srv.URL+"/simulate", form)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if !strings.Contains(body, "Allowed by the draft") || !regexp.MustCompile(`(?s)<tr class="applies" data-rule="premium">.*?abcd…#`).MatchString(body) {
		t.Errorf("the premium tier does not apply with a masked identity:\n%s", body)
	}
	if strings.Contains(body, "abcdefghijk</code>") || !strings.Contains(body, "ratelimit: &#34;premium&#34;;r=19;t=1") {
		t.Errorf("identity not masked, or RateLimit field missing")
	}
	if cur, _ := e.svc.Current(context.Background()); cur.Number != 1 {
		t.Errorf("simulating saved v%d", cur.Number)
	}
	if !strings.Contains(body, "x-api-key: abcdefghijk") {
		t.Error("the simulator's fields are not kept")
	}
	// The request as a policy test, with what it gets from fresh state.
	if !regexp.MustCompile(`(?s)<pre id="sim-as-test">- name: GET /v1/items is let through \(rule premium\)\n.*headers: \{x-api-key: abcdefghijk, x-plan: premium\}\n.*expect: \{status: 200, rule: premium, applies: \{tiers: premium, users: &#34;&#34;\}\}`).MatchString(body) {
		t.Errorf("the request as a test:\n%s", body)
	}

	form.Set("policy", `{"rules":[{"name":"tiny","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"tokens_per_second":1,"burst":2,"cost_source":"header:x-cost"}}]}`)
	form.Set("sim_headers", "x-cost: 3")
	if _, body := post(t, c, e.srv.URL+"/simulate", form); !strings.Contains(body, "Rejected by the draft: 429") ||
		!strings.Contains(body, "(a gRPC call: resource_exhausted)") ||
		!strings.Contains(body, `id="sim-details">Envoy's access log: <code>sluice_rate_limited{tiny}</code>`) {
		t.Errorf("a rejection does not say what a gRPC call receives and what Envoy logs:\n%s", body)
	}

	form.Set("sim_client", "not-an-address")
	resp, body = post(t, c, e.srv.URL+"/simulate", form)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "request.client_address") {
		t.Errorf("a bad address: %d", resp.StatusCode)
	}
	form.Set("csrf", "wrong")
	if resp, _ := post(t, c, e.srv.URL+"/simulate", form); resp.StatusCode != http.StatusForbidden {
		t.Errorf("without the CSRF token: %d", resp.StatusCode)
	}
}

func TestSimulateStartsFromTheBucketTelemetryReported(t *testing.T) {
	te := newTelEnv(t, nil)
	body := func() map[string]any {
		_, m := simulateCall(t, te.env, `{"policy":`+perIP+`,"request":{"client_address":"10.9.8.7:1234"}}`)
		return rulesOf(t, m, 0)[0]
	}
	if r := body(); r["state_known"] == true || r["level"] != 10.0 {
		t.Fatalf("before any report: %v", r)
	}
	now := float64(te.clock.Now().Unix())
	b := telemetry.Bucket{Rule: "per-ip", Identity: "ip:address=10.9.8.7", Tokens: 2, Burst: 10, LastRefill: now}
	if resp, m := te.send(t, telToken, "application/json", report("envoy-1", "a1", 1, 5, 0, b)); resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNoContent {
		t.Fatalf("report: %d %v", resp.StatusCode, m)
	}
	r := body()
	if r["state_known"] != true || r["level"] != 2.0 || r["decision"].(map[string]any)["remaining"] != 1.0 {
		t.Fatalf("after a report of 2 tokens: %v", r)
	}
}

func TestSimulateKeysByTheClientCertificate(t *testing.T) {
	e := newEnv(t, nil)
	pol := `{"rules":[{"name":"per-workload","limit_keys":["peer:principal"],"match":{"peer:principal":{"prefix":"spiffe://cluster.local/ns/shop/"}},"algorithm":"token_bucket","algorithm_config":{"rps":10,"burst":20}}]}`
	_, m := simulateCall(t, e, `{"policy":`+pol+`,"request":{"peer_principal":" spiffe://cluster.local/ns/shop/sa/web "}}`)
	r := rulesOf(t, m, 0)[0]
	if r["applies"] != true || r["identity"] != "peer:principal=spiffe://cluster.local/ns/shop/sa/web" {
		t.Errorf("with a certificate: %v", r)
	}
	_, m = simulateCall(t, e, `{"policy":`+pol+`,"request":{}}`)
	if r := rulesOf(t, m, 0)[0]; r["applies"] != false || !strings.Contains(r["why_not"].(string), "peer:principal") {
		t.Errorf("without a certificate: %v", r)
	}
}

func TestSimulateMatchesTheEnvoyRoute(t *testing.T) {
	e := newEnv(t, nil)
	pol := `{"rules":[{"name":"checkout","limit_keys":["route"],"match":{"route":"checkout"},"algorithm":"token_bucket","algorithm_config":{"rps":10,"burst":20}}]}`
	_, m := simulateCall(t, e, `{"policy":`+pol+`,"request":{"route":"checkout"}}`)
	if r := rulesOf(t, m, 0)[0]; r["applies"] != true || r["identity"] != "route=checkout" {
		t.Errorf("on the checkout route: %v", r)
	}
	_, m = simulateCall(t, e, `{"policy":`+pol+`,"request":{"route":"catalog"}}`)
	if r := rulesOf(t, m, 0)[0]; r["applies"] != false || !strings.Contains(r["why_not"].(string), `"catalog"`) {
		t.Errorf("on another route: %v", r)
	}
}

func TestSimulateKeysAndMatchesOnEnvoyMetadata(t *testing.T) {
	e := newEnv(t, nil)
	pol := `{"rules":[{"name":"reasoning","limit_keys":["metadata:envoy.filters.http.jwt_authn:jwt_payload.sub"],` +
		`"match":{"metadata:envoy.filters.http.json_to_metadata:model":"o1"},"algorithm":"token_bucket","algorithm_config":{"rps":10,"burst":20}}]}`
	meta := func(model string) string {
		return `{"envoy.filters.http.jwt_authn":{"jwt_payload":{"sub":"alice-0123456789","iss":"https://idp"}},"envoy.filters.http.json_to_metadata":{"model":"` + model + `"}}`
	}
	_, m := simulateCall(t, e, `{"policy":`+pol+`,"request":{"metadata":`+meta("o1")+`}}`)
	r := rulesOf(t, m, 0)[0]
	if r["applies"] != true {
		t.Fatalf("with the model: %v", r)
	}
	// The identity is masked like a header's: metadata may carry secrets.
	if id, _ := r["identity"].(string); !strings.HasPrefix(id, "metadata:envoy.filters.http.jwt_authn:jwt_payload.sub=") || strings.Contains(id, "alice-0123456789") {
		t.Errorf("identity %q: not the metadata source, or not masked", id)
	}
	_, m = simulateCall(t, e, `{"policy":`+pol+`,"request":{"metadata":`+meta("gpt-4o")+`}}`)
	if r := rulesOf(t, m, 0)[0]; r["applies"] != false || !strings.Contains(r["why_not"].(string), "another value") {
		t.Errorf("with another model: %v", r)
	}
	_, m = simulateCall(t, e, `{"policy":`+pol+`,"request":{}}`)
	if r := rulesOf(t, m, 0)[0]; r["applies"] != false || !strings.Contains(r["why_not"].(string), "no value") {
		t.Errorf("without metadata: %v", r)
	}
}

func TestSimulateChargesAMetadataCost(t *testing.T) {
	e := newEnv(t, nil)
	pol := `{"rules":[{"name":"images","limit_keys":["ip:address"],"algorithm":"token_bucket",` +
		`"algorithm_config":{"rps":1,"burst":10,"cost_source":"metadata:envoy.filters.http.json_to_metadata:n","default_cost":2}}]}`
	for meta, want := range map[string]float64{`{"envoy.filters.http.json_to_metadata":{"n":4}}`: 4, `{"envoy.filters.http.json_to_metadata":{"n":"3"}}`: 3, `{}`: 2} {
		_, m := simulateCall(t, e, `{"policy":`+pol+`,"request":{"metadata":`+meta+`}}`)
		if r := rulesOf(t, m, 0)[0]; r["cost"] != want {
			t.Errorf("metadata %s: cost %v, want %v", meta, r["cost"], want)
		}
	}
}

// TestSimulatorViewSaysPlacesForAConcurrencyRule: the page words each
// algorithm's state in its own unit.
func TestSimulatorViewSaysPlacesForAConcurrencyRule(t *testing.T) {
	cfg, err := policy.Parse([]byte(`{"policies":[
	 {"name":"a","rules":[{"name":"inflight","limit_keys":["header:x-api-key"],"algorithm":"concurrency","algorithm_config":{"limit":4}}]},
	 {"name":"b","rules":[{"name":"hourly","limit_keys":["header:x-api-key"],"algorithm":"fixed_window","algorithm_config":{"limit":9,"window_seconds":3600}}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	res := simulate.Run(cfg, simulate.Request{Method: "GET", Path: "/", ClientAddress: "10.0.0.1", Headers: map[string]string{"x-api-key": "k"}}, simulate.Options{Now: 1000})
	v := simView("draft", res)
	for i, want := range []string{"4 places free", "9 left in the window"} {
		if got := v.Policies[i].Rules[0].State; !strings.HasPrefix(got, want) {
			t.Errorf("policy %d: state %q, want it to start %q", i, got, want)
		}
	}
}

func TestSimulatorViewSaysASparedIdentityIsLetThrough(t *testing.T) {
	cfg, err := policy.Parse([]byte(`{"rules":[{"name":"ramp","enforce_percent":0,"limit_keys":["header:x-api-key"],"algorithm":"token_bucket","algorithm_config":{"tokens_per_second":1,"burst":1,"cost_source":"header:x-cost"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	res := simulate.Run(cfg, simulate.Request{Method: "GET", Path: "/", ClientAddress: "10.0.0.1", Headers: map[string]string{"x-api-key": "k", "x-cost": "2"}}, simulate.Options{Now: 1000})
	rv := simView("draft", res).Policies[0].Rules[0]
	if !rv.Rejects || !strings.Contains(rv.Decision, "not enforced on this identity yet") {
		t.Errorf("decision %q (rejects %v), want it to say the identity is spared", rv.Decision, rv.Rejects)
	}
}

const llmPolicy = `{"rules":[{"name":"llm","limit_keys":["header:x-api-key"],"algorithm":"token_bucket",
 "algorithm_config":{"tokens_per_second":1,"burst":1000,"cost_source":"response_json:usage.total_tokens","default_cost":50}}]}`

// A sample response shows what a rule charged from the response takes:
// the filter's own reading of the body, and what is left.
func TestSimulateChargesTheSampleResponse(t *testing.T) {
	e := newEnv(t, nil)
	for _, c := range []struct {
		response string
		cost     float64
		why      string
	}{
		{`{"headers":{"Content-Type":"application/json"},"body":"{\"usage\":{\"total_tokens\":120}}"}`, 120, "response body usage.total_tokens"},
		{`{"headers":{"content-type":"text/event-stream"},"body":"data: {\"usage\":null}\n\ndata: {\"usage\":{\"total_tokens\":7}}\n\ndata: [DONE]\n\n"}`, 7, "response body usage.total_tokens"},
		{`{"status":503,"body":"upstream overloaded"}`, 50, "the response body has no usage.total_tokens: default_cost"},
	} {
		resp, m := simulateCall(t, e, `{"policy":`+llmPolicy+`,"request":{"headers":{"x-api-key":"k"},"response":`+c.response+`}}`)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: status %d %v", c.response, resp.StatusCode, m)
		}
		r := rulesOf(t, m, 0)[0]
		charge, _ := r["response"].(map[string]any)
		if r["charged_later"] != true || charge == nil || charge["charged"] != true || charge["cost"] != c.cost ||
			charge["why"] != c.why || charge["remaining_after"] != 1000-c.cost {
			t.Errorf("%s: rule %v", c.response, r)
		}
	}
	// Without a sample response, nothing is charged yet.
	_, m := simulateCall(t, e, `{"policy":`+llmPolicy+`,"request":{"headers":{"x-api-key":"k"}}}`)
	if r := rulesOf(t, m, 0)[0]; r["response"] != nil {
		t.Errorf("charged without a response: %v", r)
	}
}

func TestSimulatorFormTakesASampleResponseAndTheClientCertificate(t *testing.T) {
	e := newEnv(t, nil)
	c := login(t, e, "alice")
	tok := csrfOf(t, get(t, c, e.srv.URL+"/"))
	form := url.Values{"csrf": {tok}, "base_version": {"1"}, "policy": {llmPolicy}, "sim_against": {"draft"},
		"sim_headers": {"x-api-key: k"}, "sim_resp_headers": {"content-type: application/json"},
		"sim_resp_body": {`{"usage": {"total_tokens": 120}}`}}
	resp, body := post(t, c, e.srv.URL+"/simulate", form)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "charged 120 (response body usage.total_tokens), leaving 880") {
		t.Fatalf("status %d; no charge for the sample response:\n%s", resp.StatusCode, body)
	}
	if !strings.Contains(body, "{&#34;usage&#34;: {&#34;total_tokens&#34;: 120}}</textarea>") {
		t.Error("the sample body is not kept in the form")
	}
	form.Set("sim_resp_body", "")
	form.Set("sim_resp_headers", "")
	if _, body := post(t, c, e.srv.URL+"/simulate", form); !strings.Contains(body, "charged when it arrives: give a sample response") {
		t.Error("without a sample response the page does not say the charge comes later")
	}
	form.Set("sim_resp_status", "9000")
	if resp, body := post(t, c, e.srv.URL+"/simulate", form); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "request.response.status") {
		t.Errorf("a bad status: %d", resp.StatusCode)
	}
	form.Set("sim_resp_status", "")
	form.Set("sim_resp_headers", "no colon here")
	if resp, body := post(t, c, e.srv.URL+"/simulate", form); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "request.response.headers") {
		t.Errorf("a bad header line: %d", resp.StatusCode)
	}

	// The page's Simulate button keys by the client certificate too.
	form.Set("sim_resp_headers", "")
	form.Set("policy", `{"rules":[{"name":"per-workload","limit_keys":["peer:principal"],"algorithm":"token_bucket","algorithm_config":{"rps":10,"burst":20}}]}`)
	form.Set("sim_peer", "spiffe://cluster.local/ns/shop/sa/web")
	if _, body := post(t, c, e.srv.URL+"/simulate", form); !strings.Contains(body, "peer:principal=spiffe://cluster.local/ns/shop/sa/web") {
		t.Errorf("the client certificate field is ignored:\n%s", body)
	}

	// And by Envoy metadata, given as JSON; bad JSON names the field.
	form.Set("policy", `{"rules":[{"name":"per-user","limit_keys":["metadata:envoy.filters.http.jwt_authn:jwt_payload.sub"],"algorithm":"token_bucket","algorithm_config":{"rps":10,"burst":20}}]}`)
	form.Set("sim_metadata", `{"envoy.filters.http.jwt_authn": {"jwt_payload": {"sub": "alice"}}}`)
	if _, body := post(t, c, e.srv.URL+"/simulate", form); !strings.Contains(body, "metadata:envoy.filters.http.jwt_authn:jwt_payload.sub=") {
		t.Errorf("the metadata field is ignored:\n%s", body)
	}
	form.Set("sim_metadata", `{"envoy.filters.http.jwt_authn": `)
	if resp, body := post(t, c, e.srv.URL+"/simulate", form); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "request.metadata") {
		t.Errorf("bad metadata JSON: %d", resp.StatusCode)
	}
}

func TestSimulateKeysByTheUpstreamCluster(t *testing.T) {
	e := newEnv(t, nil)
	pol := `{"rules":[{"name":"payments","limit_keys":["cluster"],"match":{"cluster":{"suffix":"|payments.prod.svc.cluster.local"}},"algorithm":"concurrency","algorithm_config":{"limit":50}}]}`
	_, m := simulateCall(t, e, `{"policy":`+pol+`,"request":{"cluster":"outbound|8080||payments.prod.svc.cluster.local"}}`)
	if r := rulesOf(t, m, 0)[0]; r["applies"] != true || r["identity"] != "cluster=outbound|8080||payments.prod.svc.cluster.local" {
		t.Errorf("to the payments service: %v", r)
	}
	_, m = simulateCall(t, e, `{"policy":`+pol+`,"request":{"route":"health"}}`)
	if r := rulesOf(t, m, 0)[0]; r["applies"] != false {
		t.Errorf("a request without a cluster: %v", r)
	}
}

func TestSimulateKeysByConnection(t *testing.T) {
	e := newEnv(t, nil)
	pol := `{"rules":[{"name":"per-connection","limit_keys":["connection"],"algorithm":"token_bucket","algorithm_config":{"rps":20,"burst":40}}]}`
	for _, conn := range []string{`7`, `"7"`, `"007"`} {
		_, m := simulateCall(t, e, `{"policy":`+pol+`,"request":{"connection":`+conn+`}}`)
		if r := rulesOf(t, m, 0)[0]; r["applies"] != true || r["identity"] != "connection=7" {
			t.Errorf("on connection %s: %v", conn, r)
		}
	}
	_, m := simulateCall(t, e, `{"policy":`+pol+`,"request":{}}`)
	if r := rulesOf(t, m, 0)[0]; r["applies"] != false {
		t.Errorf("a request without a connection: %v", r)
	}
}

func TestSimulateSaysARefusalBlocks(t *testing.T) {
	e := newEnv(t, nil)
	pol := `{"rules":[{"name":"uploads","limit_keys":["header:x-user"],"algorithm":"token_bucket",
	  "algorithm_config":{"rps":1,"burst":2,"cost_source":"header:x-cost","block_seconds":60}}]}`
	_, m := simulateCall(t, e, `{"policy":`+pol+`,"request":{"headers":{"x-user":"u","x-cost":"5"}}}`)
	r := rulesOf(t, m, 0)[0]
	d, _ := r["decision"].(map[string]any)
	if r["blocked"] != true || d["allowed"] != false || d["wait_seconds"] != 65.0 {
		t.Errorf("a request costing more than the burst: %v", r)
	}
	_, m = simulateCall(t, e, `{"policy":`+pol+`,"request":{"headers":{"x-user":"u","x-cost":"1"}}}`)
	if r := rulesOf(t, m, 0)[0]; r["blocked"] != nil {
		t.Errorf("an admitted request: %v", r)
	}
	// A global rule blocks too: the rate limit service keeps its block.
	global := `{"fleet":{"cluster":"rls"},` + strings.Replace(pol[1:], `"algorithm":"token_bucket"`, `"algorithm":"token_bucket","scope":"global"`, 1)
	_, m = simulateCall(t, e, `{"policy":`+global+`,"request":{"headers":{"x-user":"u","x-cost":"5"}}}`)
	if r := rulesOf(t, m, 0)[0]; r["global"] != true || r["blocked"] != true {
		t.Errorf("a global rule's refusal: %v", r)
	}
}

func TestSimulatorFormSaysARefusalBlocksAndTakesAConnection(t *testing.T) {
	e := newEnv(t, nil)
	c := login(t, e, "alice")
	tok := csrfOf(t, get(t, c, e.srv.URL+"/"))
	pol := `{"policies":[{"name":"a","rules":[{"name":"uploads","limit_keys":["header:x-user"],"algorithm":"token_bucket",
	  "algorithm_config":{"rps":1,"burst":2,"cost_source":"header:x-cost","block_seconds":60}}]},
	  {"name":"b","rules":[{"name":"per-connection","limit_keys":["connection"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":2}}]}]}`
	form := url.Values{"csrf": {tok}, "base_version": {"1"}, "policy": {pol}, "sim_against": {"draft"},
		"sim_headers": {"x-user: u\nx-cost: 5"}, "sim_connection": {"42"}}
	resp, body := post(t, c, e.srv.URL+"/simulate", form)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "rejects, retry in 65 s; the identity is blocked (block_seconds)") {
		t.Fatalf("status %d; the refusal does not say it blocks:\n%s", resp.StatusCode, body)
	}
	if !strings.Contains(body, "connection=42") || !strings.Contains(body, `name="sim_connection" value="42"`) {
		t.Error("the connection's number is not the identity, or not kept in the form")
	}
	form.Set("sim_connection", "-3")
	if resp, body := post(t, c, e.srv.URL+"/simulate", form); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "request.connection") {
		t.Errorf("a bad connection number: %d", resp.StatusCode)
	}
}

func TestSimulateChargesAResponseItsBodysSize(t *testing.T) {
	e := newEnv(t, nil)
	pol := `{"rules":[{"name":"exports","limit_keys":["header:x-api-key"],"algorithm":"quota",
	  "algorithm_config":{"limit":1e10,"period":"day","cost_source":"response_bytes"}}]}`
	_, m := simulateCall(t, e, `{"policy":`+pol+`,"request":{"headers":{"x-api-key":"k"},"response":{"body":"0123456789"}}}`)
	r := rulesOf(t, m, 0)[0]
	c, _ := r["response"].(map[string]any)
	if r["charged_later"] != true || c["charged"] != true || c["cost"] != 10.0 || c["why"] != "response body of 10 bytes" {
		t.Errorf("a 10-byte answer: %v", r)
	}
}
