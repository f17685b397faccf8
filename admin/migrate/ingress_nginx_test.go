package migrate

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/shared/policy"
)

// guideBlock returns the fenced block of the given language that follows
// marker in docs/migrating.md.
func guideBlock(t *testing.T, marker, lang string) string {
	t.Helper()
	page, err := os.ReadFile(filepath.Join("..", "..", "docs", "migrating.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(page), marker)
	_, block, ok2 := strings.Cut(section, "```"+lang+"\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatalf("docs/migrating.md has no %s block after %q", lang, marker)
	}
	return block
}

// The guide's Ingress converts to the guide's policy, which the scenarios
// run under both hosts.
func TestTheGuidesIngressConvertsToTheGuidesPolicy(t *testing.T) {
	ing := guideBlock(t, "## ingress-nginx annotations", "yaml")
	shown := guideBlock(t, "<!-- example: ingress-nginx -->", "json")
	res, err := IngressNginx([]byte(ing), IngressOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var want, got any
	if err := json.Unmarshal([]byte(shown), &want); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(res.Policy, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(want, got) {
		t.Errorf("the guide shows\n%s\nthe conversion makes\n%s", shown, res.Policy)
	}
}

const ingressList = `apiVersion: v1
kind: List
items:
  - apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: api
      namespace: shop
      annotations:
        nginx.ingress.kubernetes.io/limit-rpm: "120"
        nginx.ingress.kubernetes.io/limit-rps: "10"
        nginx.ingress.kubernetes.io/limit-rate: "100"
    spec:
      rules:
        - host: Shop.Example.com
          http:
            paths:
              - {path: /api/, pathType: Prefix}
              - {path: /status, pathType: Exact}
  - apiVersion: v1
    kind: Service
    metadata: {name: api}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: legacy
  namespace: shop
  annotations:
    nginx.ingress.kubernetes.io/use-regex: "true"
    nginx.ingress.kubernetes.io/limit-connections: "3"
spec:
  rules:
    - host: shop.example.com
      http:
        paths:
          - {path: "/v[12]/.*", pathType: ImplementationSpecific}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: quiet}
spec:
  rules: [{host: other.example.com}]
`

func TestIngressesBecomePoliciesOfTheirHostsAndPaths(t *testing.T) {
	res, err := IngressNginx([]byte(ingressList), IngressOptions{Status: 429})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := policy.Parse(res.Policy)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.RejectStatus != 429 || len(cfg.Policies) != 3 {
		t.Fatalf("status %d, %d policies:\n%s", cfg.RejectStatus, len(cfg.Policies), res.Policy)
	}
	rps, rpm, conns := cfg.RuleByName("shop-api-rps"), cfg.RuleByName("shop-api-rpm"), cfg.RuleByName("shop-legacy-connections")
	if rps == nil || rpm == nil || conns == nil {
		t.Fatalf("rules:\n%s", res.Policy)
	}
	if rps.TokenBucket.TokensPerSecond != 10 || rps.TokenBucket.Burst != 51 || rpm.TokenBucket.TokensPerSecond != 2 || rpm.TokenBucket.Burst != 601 {
		t.Errorf("rps %+v, rpm %+v", rps.TokenBucket, rpm.TokenBucket)
	}
	for path, want := range map[string]bool{"/api": true, "/api/items": true, "/apix": false, "/status": true, "/status/x": false, "/": false} {
		if got := matchesPath(rps, path); got != want {
			t.Errorf("shop/api's rule on %s: %v, want %v", path, got, want)
		}
	}
	for path, want := range map[string]bool{"/V1/x": true, "/v3/x": false} {
		if got := matchesPath(conns, path); got != want {
			t.Errorf("shop/legacy's rule (use-regex) on %s: %v, want %v", path, got, want)
		}
	}
	notes := strings.Join(res.Notes, "\n")
	for _, want := range []string{"limit-rate", "host shop.example.com is limited by several Ingresses (shop/api, shop/legacy)"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, notes)
		}
	}
}

// matchesPath tells whether r's path condition holds for path.
func matchesPath(r *policy.Rule, path string) bool {
	for _, m := range r.Match {
		if m.Source.Kind == policy.SourcePath {
			return m.Cond.Regex.MatchString(path)
		}
	}
	return true
}

func TestIngressAnnotationsThatCannotBeReadAreNamed(t *testing.T) {
	ing := func(ann string) string {
		return "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: a\n  namespace: ns\n  annotations:\n" + ann + "spec: {rules: [{host: h}]}\n"
	}
	for _, tc := range []struct{ in, want string }{
		{ing(`    nginx.ingress.kubernetes.io/limit-rps: "ten"` + "\n"), `ingresses[0] (ns/a): annotation nginx.ingress.kubernetes.io/limit-rps "ten": want a whole number`},
		{ing(`    nginx.ingress.kubernetes.io/limit-rps: "0"` + "\n"), `limit-rps "0"`},
		{ing(`    nginx.ingress.kubernetes.io/limit-rps: "5"` + "\n" + `    nginx.ingress.kubernetes.io/limit-whitelist: "10.0.0.0/8, office"` + "\n"), `"office" is not an address or CIDR block`},
		{ing(`    nginx.ingress.kubernetes.io/limit-burst-multiplier: "3"` + "\n"), "no Ingress has a limit-rps"},
		{"kind: Ingress\n  bad: [", "ingresses: document 1"},
	} {
		if _, err := IngressNginx([]byte(tc.in), IngressOptions{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.in, err, tc.want)
		}
	}
}

func TestIngressCommand(t *testing.T) {
	f := filepath.Join(t.TempDir(), "ingresses.yaml")
	os.WriteFile(f, []byte(ingressList), 0o644)
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"ingress-nginx", "-f", f}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if cfg, err := policy.Parse(stdout.Bytes()); err != nil || cfg.RejectStatus != 503 || !strings.Contains(stderr.String(), "note: ") {
		t.Errorf("%v %+v; stderr %s", err, cfg, stderr.String())
	}
	stderr.Reset()
	if code := Main([]string{"ingress-nginx", "-f", f, "-annotations-prefix", "custom.io/"}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), `(prefix "custom.io/")`) {
		t.Errorf("another prefix: exit %d, %s", code, stderr.String())
	}
	if code := Main([]string{"ingress-nginx"}, &stdout, &stderr); code != 2 {
		t.Errorf("no -f: exit %d, want 2", code)
	}
}

func FuzzIngressNginx(f *testing.F) {
	f.Add([]byte(ingressList))
	f.Add([]byte("kind: Ingress\nmetadata:\n  name: a\n  annotations:\n    nginx.ingress.kubernetes.io/limit-rps: \"3\"\n" +
		"    nginx.ingress.kubernetes.io/limit-whitelist: \"10.0.0.1, 192.168.0.0/16\"\n" +
		"spec: {rules: [{host: a.example, http: {paths: [{path: /x/, pathType: Prefix}, {path: /y, pathType: Exact}]}}, {http: {paths: [{path: /z}]}}]}\n"))
	f.Fuzz(func(t *testing.T, doc []byte) {
		res, err := IngressNginx(doc, IngressOptions{})
		if err != nil {
			return
		}
		if _, err := policy.Parse(res.Policy); err != nil {
			t.Fatalf("a converted policy the parser refuses: %v\n%s", err, res.Policy)
		}
	})
}
