package httpapi

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"sigs.k8s.io/yaml"

	"github.com/sluice-rl/sluice/admin/auth"
)

// openAPIDoc is the embedded document, loaded and validated once for the
// test binary (every e.call checks its answer against it).
var openAPIDoc = sync.OnceValues(func() (*openapi3.T, error) {
	doc, err := openapi3.NewLoader().LoadFromData(openAPIYAML)
	if err != nil {
		return nil, err
	}
	return doc, doc.Validate(context.Background())
})

// openAPIRouter finds a request's operation in the document. Its server is
// "/", so it matches requests by path alone, whatever the test server's
// address.
var openAPIRouter = sync.OnceValues(func() (routers.Router, error) {
	doc, err := openAPIDoc()
	if err != nil {
		return nil, err
	}
	return legacy.NewRouter(doc)
})

// openAPIResponseError checks an answer to method target (a path with its
// query) against the document: its status must be listed, its content
// type and body must match. Requests the document has no operation for
// are not checked (the route tests below cover the routes); nor are
// requests, which tests often get wrong on purpose.
func openAPIResponseError(method, target string, status int, header http.Header, body []byte) error {
	router, err := openAPIRouter()
	if err != nil {
		return err
	}
	u, err := url.ParseRequestURI(target)
	if err != nil {
		return nil // not a request the server could route either
	}
	req := &http.Request{Method: method, URL: &url.URL{Path: u.Path, RawPath: u.RawPath, RawQuery: u.RawQuery}, Header: http.Header{}}
	route, params, err := router.FindRoute(req)
	if err != nil {
		return nil
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
		Status:                 status,
		Header:                 header,
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	in.SetBodyBytes(body)
	return openapi3filter.ValidateResponse(context.Background(), in)
}

// checkOpenAPIResponse is openAPIResponseError as a test failure.
func checkOpenAPIResponse(t *testing.T, method, target string, resp *http.Response, body []byte) {
	t.Helper()
	if !strings.HasPrefix(target, "/api/v1") {
		return
	}
	if err := openAPIResponseError(method, target, resp.StatusCode, resp.Header, body); err != nil {
		t.Errorf("%s %s answered %d, which the OpenAPI document does not allow: %v", method, target, resp.StatusCode, err)
	}
}

func TestOpenAPIDocumentLoadsAndValidates(t *testing.T) {
	doc, err := openAPIDoc()
	if err != nil {
		t.Fatalf("admin/httpapi/openapi.yaml: %v", err)
	}
	if doc.OpenAPI != "3.0.3" {
		t.Errorf("openapi: %q, want 3.0.3", doc.OpenAPI)
	}
	if _, err := openAPIRouter(); err != nil {
		t.Fatalf("router: %v", err)
	}
}

// apiRoutePatterns are the "METHOD /api/v1/..." routes the package
// registers, read from its source.
func apiRoutePatterns(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, p := range routePatterns(t) {
		if method, path, ok := strings.Cut(p, " "); ok && strings.HasPrefix(path, "/api/v1/") {
			out[method+" "+path] = true
		}
	}
	if len(out) < 38 {
		t.Fatalf("only %d /api/v1 routes found in the source; the route scan is broken", len(out))
	}
	return out
}

// openAPIOperations are the document's operations as "METHOD /path".
func openAPIOperations(t *testing.T) map[string]*openapi3.Operation {
	t.Helper()
	doc, err := openAPIDoc()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*openapi3.Operation{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			out[method+" "+path] = op
		}
	}
	return out
}

func TestEveryAPIRouteIsInTheOpenAPIDocument(t *testing.T) {
	ops := openAPIOperations(t)
	var missing []string
	for r := range apiRoutePatterns(t) {
		if ops[r] == nil {
			missing = append(missing, r)
		}
	}
	slices.Sort(missing)
	for _, r := range missing {
		t.Errorf("route %s is registered but not in admin/httpapi/openapi.yaml", r)
	}
}

func TestEveryOpenAPIOperationIsARegisteredRoute(t *testing.T) {
	routes := apiRoutePatterns(t)
	var extra []string
	for op := range openAPIOperations(t) {
		if !routes[op] {
			extra = append(extra, op)
		}
	}
	slices.Sort(extra)
	for _, op := range extra {
		t.Errorf("admin/httpapi/openapi.yaml describes %s, which no handler serves", op)
	}
}

// TestEveryOpenAPIOperationIsDescribed: each operation says what it does
// and what it answers when it works.
func TestEveryOpenAPIOperationIsDescribed(t *testing.T) {
	for name, op := range openAPIOperations(t) {
		if op.Summary == "" || op.Description == "" || op.OperationID == "" {
			t.Errorf("%s: needs an operationId, a summary and a description", name)
		}
		ok := false
		for status := range op.Responses.Map() {
			ok = ok || strings.HasPrefix(status, "2")
		}
		if !ok {
			t.Errorf("%s: lists no success answer", name)
		}
	}
}

// TestOpenAPIRolesAreTheRolesTheServerRequires: each operation's
// x-required-role, and the "Role: ..." its description tells people, are
// what requiredRole decides; the telemetry reports alone take the
// telemetry token instead.
func TestOpenAPIRolesAreTheRolesTheServerRequires(t *testing.T) {
	doc, err := openAPIDoc()
	if err != nil {
		t.Fatal(err)
	}
	for name, op := range openAPIOperations(t) {
		method, path, _ := strings.Cut(name, " ")
		role, hasRole := op.Extensions["x-required-role"]
		if op.Security != nil {
			if name != "POST /api/v1/telemetry" || len(*op.Security) != 1 || (*op.Security)[0]["telemetryToken"] == nil {
				t.Errorf("%s: only the telemetry reports have their own security", name)
			}
			if hasRole {
				t.Errorf("%s: takes the telemetry token, so no role", name)
			}
			continue
		}
		if len(doc.Security) != 1 || doc.Security[0]["bearerAuth"] == nil {
			t.Fatalf("the document's security is %v, want bearerAuth", doc.Security)
		}
		want := string(requiredRole(method, path))
		if role != want {
			t.Errorf("%s: x-required-role %v, but the server requires %s", name, role, want)
		}
		if !strings.Contains(op.Description, "Role: "+want+".") {
			t.Errorf("%s: the description does not say \"Role: %s.\"", name, want)
		}
		for _, status := range []string{"401", "429", "500"} {
			if op.Responses.Value(status) == nil {
				t.Errorf("%s: every bearer operation can answer %s, which is not listed", name, status)
			}
		}
	}
}

// TestOpenAPIResponseCheckCatchesMismatches: the check every e.call runs
// refuses an unlisted status, a wrong content type and a body that is not
// the schema's, so a handler drifting from the document fails its tests.
func TestOpenAPIResponseCheckCatchesMismatches(t *testing.T) {
	jsonCT := http.Header{"Content-Type": {"application/json; charset=utf-8"}}
	withETag := http.Header{"Content-Type": {"application/json; charset=utf-8"}, "Etag": {`"1"`}}
	good := `{"version": 1, "parent": 0, "author": "sluice", "message": "m", "created": "2026-01-02T15:04:05Z", "policy": {}}`
	if err := openAPIResponseError("GET", "/api/v1/policy", 200, withETag, []byte(good)); err != nil {
		t.Fatalf("a valid answer was refused: %v", err)
	}
	for _, c := range []struct {
		name, target string
		status       int
		header       http.Header
		body         string
	}{
		{"unlisted status", "/api/v1/policy/versions/1", http.StatusTeapot, jsonCT, `{"error": "x"}`},
		{"wrong content type", "/api/v1/policy/versions/1", 200, http.Header{"Content-Type": {"text/html"}}, good},
		{"missing field", "/api/v1/policy/versions/1", 200, jsonCT, `{"version": 1}`},
		{"wrong type", "/api/v1/policy/versions/1", 200, jsonCT, strings.Replace(good, `"version": 1`, `"version": "one"`, 1)},
		{"undocumented field", "/api/v1/policy/versions/1", 200, jsonCT, strings.Replace(good, `"parent": 0`, `"parent": 0, "surprise": true`, 1)},
		{"error without error", "/api/v1/policy/versions/1", 404, jsonCT, `{"message": "x"}`},
		{"missing required header", "/api/v1/policy", 200, jsonCT, good},
	} {
		if err := openAPIResponseError("GET", c.target, c.status, c.header, []byte(c.body)); err == nil {
			t.Errorf("%s: accepted", c.name)
		}
	}
}

func TestOpenAPIDocumentIsServed(t *testing.T) {
	e := newEnv(t, nil)
	var fromYAML any
	if err := yaml.Unmarshal(openAPIYAML, &fromYAML); err != nil {
		t.Fatal(err)
	}
	viewer := addUser(t, e, "vera", auth.RoleViewer)
	for _, tok := range []string{testToken, viewer} {
		resp, raw := getRaw(t, e, "/api/v1/openapi.json", tok)
		var fromJSON any
		if err := json.Unmarshal(raw, &fromJSON); err != nil || resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("openapi.json: %d %s %v", resp.StatusCode, resp.Header.Get("Content-Type"), err)
		}
		if !reflect.DeepEqual(fromJSON, fromYAML) {
			t.Error("openapi.json is not the YAML document")
		}
		resp, raw = getRaw(t, e, "/api/v1/openapi.yaml", tok)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/yaml" || string(raw) != string(openAPIYAML) {
			t.Errorf("openapi.yaml: %d %s, %d bytes", resp.StatusCode, resp.Header.Get("Content-Type"), len(raw))
		}
	}
	for _, p := range []string{"/api/v1/openapi.json", "/api/v1/openapi.yaml"} {
		if resp, _ := e.call(t, "GET", p, "", "", ""); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s without a token: %d, want 401", p, resp.StatusCode)
		}
	}
}

// getRaw is a GET with a bearer token that returns the raw body (e.call
// decodes it as JSON), checked against the document like e.call.
func getRaw(t *testing.T, e *env, path, token string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest("GET", e.srv.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	checkOpenAPIResponse(t, "GET", path, resp, raw)
	return resp, raw
}

// TestAPIErrorAnswersMatchTheOpenAPIDocument provokes answers the other
// tests seldom see, each checked against the document by e.call: the
// routes of features this admin runs without, refusals of each kind, and
// the throttle.
func TestAPIErrorAnswersMatchTheOpenAPIDocument(t *testing.T) {
	e := newEnv(t, nil) // no telemetry, no trials
	for _, c := range []struct {
		method, path, ct, body string
		status                 int
	}{
		{"GET", "/api/v1/trial", "", "", 404},
		{"POST", "/api/v1/trial/end", "", "", 404},
		{"POST", "/api/v1/trial/promote", "application/json", `{}`, 404},
		{"GET", "/api/v1/telemetry", "", "", 404},
		{"GET", "/api/v1/telemetry/token", "", "", 404},
		{"POST", "/api/v1/telemetry", "application/json", `{}`, 404},
		{"GET", "/api/v1/changes/x", "", "", 400},
		{"GET", "/api/v1/changes/99", "", "", 404},
		{"POST", "/api/v1/changes/99/reject", "", "", 404},
		{"POST", "/api/v1/changes/1/approve", "text/plain", "skip", 415},
		{"GET", "/api/v1/policy/diff?from=x", "", "", 400},
		{"GET", "/api/v1/istio/wasmplugin?target=nope", "", "", 400},
		{"GET", "/api/v1/envoygateway/extensionpolicy?format=xml", "", "", 400},
		{"POST", "/api/v1/policy/tests/run", "application/json", `{"tests": "tests: [{name: x, request: {path: /}, expect: {nope: 1}}]"}`, 422},
		{"POST", "/api/v1/policy/tests/run", "application/json", `{"version": 99}`, 404},
		{"PUT", "/api/v1/policy/tests", "application/json", `{"base_revision": 7, "tests": ""}`, 409},
		{"POST", "/api/v1/policy/rollback", "application/json", `{"to": 1, "base_version": 1}`, 400},
		{"PATCH", "/api/v1/users/nobody", "application/json", `{"role": "viewer"}`, 404},
		{"DELETE", "/api/v1/users/nobody", "", "", 404},
		{"POST", "/api/v1/tokens", "application/json", `{"user": "nobody", "label": "x"}`, 400},
		{"DELETE", "/api/v1/tokens/nope", "", "", 404},
		{"GET", "/api/v1/audit?since=yesterday", "", "", 400},
	} {
		if resp, body := e.call(t, c.method, c.path, testToken, c.ct, c.body); resp.StatusCode != c.status {
			t.Errorf("%s %s: %d %v, want %d", c.method, c.path, resp.StatusCode, body, c.status)
		}
	}

	// Bad bearer tokens from one address: 401s, then 429 with Retry-After.
	e = newEnv(t, nil)
	for i := range 100 {
		resp, _ := e.call(t, "GET", "/api/v1/policy", "not-a-token-"+strconv.Itoa(i), "", "")
		if resp.StatusCode == http.StatusTooManyRequests {
			return
		}
	}
	t.Error("100 bad tokens from one address were never answered 429")
}
