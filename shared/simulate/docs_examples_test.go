package simulate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/state"
)

// guideExample is the JSON block after "<!-- example: name -->" in
// docs/configuration.md.
func guideExample(t *testing.T, name string) *policy.Config {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	i := strings.Index(doc, "<!-- example: "+name+" -->")
	if i < 0 {
		t.Fatalf("docs/configuration.md has no example %q", name)
	}
	start := strings.Index(doc[i:], "```json\n") + i + len("```json\n")
	end := strings.Index(doc[start:], "```") + start
	return mustParse(t, doc[start:end])
}

func header(hs [][2]string, name string) (string, bool) {
	for _, h := range hs {
		if h[0] == name {
			return h[1], true
		}
	}
	return "", false
}

// The configuration guide's examples of a rule's own fields and of
// rejection fields answer as its text says.
func TestTheGuidesResponseFieldExamplesAnswerAsTheTextSays(t *testing.T) {
	cfg := guideExample(t, "limit-headers")
	res := Run(cfg, Request{Method: "GET", Path: "/", ClientAddress: "10.0.0.1", Headers: map[string]string{"x-api-key": "k"}}, Options{Now: 1000})
	for name, want := range map[string]string{"x-ratelimit-limit-minute": "100", "x-ratelimit-remaining-minute": "99",
		"x-ratelimit-limit-hour": "1000", "x-ratelimit-remaining-hour": "999", "ratelimit-limit": "100"} {
		if got, _ := header(res.Headers, name); got != want {
			t.Errorf("limit-headers: %s = %q, want %q (headers %v)", name, got, want, res.Headers)
		}
	}

	cfg = guideExample(t, "reject-headers")
	drained := func(r *policy.Rule, id string) (State, bool) {
		return State{Bucket: state.Bucket{Tokens: 0, LastRefill: 1000}}, true
	}
	res = Run(cfg, Request{Method: "GET", Path: "/v2", ClientAddress: "10.0.0.1", Headers: map[string]string{"x-api-key": "k"}}, Options{Now: 1000, Lookup: drained})
	if got, _ := header(res.Headers, "x-local-rate-limit"); res.Status != 429 || got != "true" {
		t.Errorf("reject-headers, over the api limit: status %d, x-local-rate-limit %q", res.Status, got)
	}
	if _, ok := header(res.Headers, "x-limits-doc"); !ok {
		t.Errorf("reject-headers, over the api limit: no x-limits-doc in %v", res.Headers)
	}
	res = Run(cfg, Request{Method: "GET", Path: "/v2", ClientAddress: "10.0.0.1", Headers: map[string]string{"x-api-key": "k-2024-leaked"}}, Options{Now: 1000})
	if got, _ := header(res.Headers, "www-authenticate"); res.Status != 401 || !strings.HasPrefix(got, "ApiKey") {
		t.Errorf("reject-headers, a revoked key: status %d, www-authenticate %q", res.Status, got)
	}
	if _, ok := header(res.Headers, "x-local-rate-limit"); ok {
		t.Errorf("reject-headers, a revoked key carries the top level's fields: %v", res.Headers)
	}
	res = Run(cfg, Request{Method: "GET", Path: "/internal/x", ClientAddress: "10.0.0.1", Headers: map[string]string{"x-api-key": "k"}}, Options{Now: 1000, Lookup: drained})
	if _, ok := header(res.Headers, "x-local-rate-limit"); res.Status != 429 || ok {
		t.Errorf("reject-headers, /internal/ over its limit: status %d, headers %v; want the filter's fields alone", res.Status, res.Headers)
	}
}
