package migrate

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/shared/policy"
)

func TestConvertNamesTheInputItCannotUse(t *testing.T) {
	for _, tc := range []struct {
		in          Input
		field, want string
	}{
		{Input{From: "haproxy", Config: []byte("x")}, "from", `from "haproxy": want one of envoy-ratelimit, envoy-local-ratelimit, ingress-nginx, nginx, kong, higress, envoy-gateway`},
		{Input{From: "ingress-nginx", Config: []byte(ingressList), RateLimits: []byte("- actions: []")}, "rate_limits", "not read when converting from ingress-nginx"},
		{Input{From: "ingress-nginx", Config: []byte(ingressList), Scope: "local"}, "scope", "not read"},
		{Input{Config: []byte("domain: d"), RateLimits: []byte("- actions: []"), Status: 429}, "status", "not read when converting from envoy-ratelimit"},
		{Input{Config: []byte("domain: d"), RateLimits: []byte("- actions: []"), AnnotationsPrefix: "x/", Status: 429}, "annotations_prefix", "not read"},
		{Input{From: "ingress-nginx", Config: []byte(ingressList), Status: 200}, "status", "200: want an HTTP status from 400 to 599"},
		{Input{From: "ingress-nginx", Config: []byte(" \n")}, "config", "required: the Ingresses"},
		{Input{From: "ingress-nginx", Config: []byte(ingressList), Plugin: "key-rate-limit"}, "plugin", "not read"},
		{Input{From: "higress", Config: []byte("limit_by_header: x\nlimit_keys: [{key: a, query_per_second: 1}]\n"), Plugin: "rate-limit"}, "plugin", `plugin "rate-limit": want key-rate-limit, `},
		{Input{From: "higress", Config: []byte("x: 1\n"), DefaultCost: -5}, "default_cost", "want a number of tokens"},
		{Input{Config: []byte("domain: d")}, "rate_limits", "required"},
		{Input{From: "ingress-nginx", Config: []byte("kind: Ingress\n  bad: [")}, "config", "ingresses: document 1"},
	} {
		_, err := Convert(tc.in)
		var ie *InputError
		if !errors.As(err, &ie) || ie.Input != tc.field || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error on %s saying %q", tc.in, err, tc.field, tc.want)
		}
	}
}

func TestConvertRunsTheNamedSourceWithItsChoices(t *testing.T) {
	res, err := Convert(Input{From: "ingress-nginx", Config: []byte(ingressList), Status: 429, Taken: []string{"shop-api-rps"}})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := policy.Parse(res.Policy)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.RejectStatus != 429 || cfg.RuleByName("shop-api-rps") != nil || cfg.RuleByName("shop-api-rps-2") == nil {
		t.Errorf("status %d, a taken name reused or renamed otherwise:\n%s", cfg.RejectStatus, res.Policy)
	}
	res, err = Convert(Input{Config: []byte("domain: d\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 5}}]\n"),
		RateLimits: []byte("- actions: [{request_headers: {header_name: x-k, descriptor_key: k}}]\n"), Scope: "local"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err := policy.Parse(res.Policy); err != nil || cfg.Fleet != nil || len(cfg.Policies) != 1 {
		t.Errorf("envoy-ratelimit, the default source, local: %v\n%s", err, res.Policy)
	}
}

func TestTheHigressCommandConvertsWasmPlugins(t *testing.T) {
	f := filepath.Join(t.TempDir(), "wasmplugins.yaml")
	if err := os.WriteFile(f, []byte(higressStream), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"higress", "-f", f, "-scope", "local"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	cfg, err := policy.Parse(stdout.Bytes())
	if err != nil || cfg.Fleet != nil || cfg.RuleByName("x-api-key-partner-7f3a") == nil || !strings.Contains(stderr.String(), "note: ") {
		t.Errorf("%v, fleet %+v:\n%s\n%s", err, cfg.Fleet, stdout.String(), stderr.String())
	}
	stderr.Reset()
	if code := Main([]string{"higress", "-f", f, "-plugin", "quota"}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), `plugin "quota"`) {
		t.Errorf("an unknown plugin: exit %d, %s", code, stderr.String())
	}
	if code := Main([]string{"higress"}, &stdout, &stderr); code != 2 {
		t.Errorf("no -f: exit %d, want 2", code)
	}
}

func TestTheNginxCommandConvertsAConfiguration(t *testing.T) {
	f := filepath.Join(t.TempDir(), "nginx.conf")
	conf := "limit_req_zone $binary_remote_addr zone=api:10m rate=10r/s;\nlocation /api/ { limit_req zone=api burst=20 nodelay; }\n"
	if err := os.WriteFile(f, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"nginx", "-f", f}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	cfg, err := policy.Parse(stdout.Bytes())
	if r := cfg.RuleByName("api"); err != nil || r == nil || r.TokenBucket.Burst != 21 || cfg.RejectStatus != 503 {
		t.Errorf("%v:\n%s", err, stdout.String())
	}
	if err := os.WriteFile(f, []byte("location / { limit_req zone=nope; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	stderr.Reset()
	if code := Main([]string{"nginx", "-f", f}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "nginx.conf: line 1: limit_req zone=nope") {
		t.Errorf("an undefined zone: exit %d, %s", code, stderr.String())
	}
}

func TestTheKongCommandConvertsPlugins(t *testing.T) {
	f := filepath.Join(t.TempDir(), "kong.yaml")
	conf := "_format_version: \"3.0\"\nplugins:\n  - {name: rate-limiting, config: {second: 5, limit_by: consumer}}\n"
	if err := os.WriteFile(f, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"kong", "-f", f, "-consumer-key", "jwt:sub"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	cfg, err := policy.Parse(stdout.Bytes())
	if err != nil || len(cfg.Policies) != 1 || cfg.Policies[0].Rules[0].Keys[0].String() != "jwt:sub" || cfg.LegacyHeaders != policy.LegacyRateLimit {
		t.Errorf("%v:\n%s", err, stdout.String())
	}
	stderr.Reset()
	if code := Main([]string{"kong", "-f", f, "-consumer-key", "form:x"}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), `consumer_key: "form:x"`) {
		t.Errorf("a consumer key that is no source: exit %d, %s", code, stderr.String())
	}
}

func TestYAMLErrorsNameNoGoType(t *testing.T) {
	for _, in := range []Input{
		{Config: []byte("domain: d\ndescriptors: {key: k}\n"), RateLimits: []byte("- actions: []\n")},
		{Config: []byte("domain: d\ndescriptors: []\n"), RateLimits: []byte("- actions: {a: 1}\n")},
		{From: "kong", Config: []byte("_format_version: \"3.0\"\nservices: {name: s}\n")},
		{From: "ingress-nginx", Config: []byte("kind: Ingress\nmetadata: [a]\n")},
	} {
		_, err := Convert(in)
		if err == nil || strings.Contains(err.Error(), "migrate.") || strings.Contains(err.Error(), "[]") || !strings.Contains(err.Error(), "line ") {
			t.Errorf("%s: %v, want the line and no Go type", in.Config, err)
		}
	}
}

func TestNameSetTakesEachNameOnce(t *testing.T) {
	ns := newNameSet([]string{"api", "api-2"})
	if got := ns.take("api"); got != "api-3" {
		t.Errorf("a taken name: %q, want api-3", got)
	}
	if got := ns.take("a b/c"); got != "a_b_c" {
		t.Errorf("a name with spaces: %q", got)
	}
	seen := map[string]bool{}
	for range 20000 { // linear: each take starts from the suffix after the last
		n := ns.take("route")
		if seen[n] {
			t.Fatalf("%q taken twice", n)
		}
		seen[n] = true
	}
	if !ns.has("route-20000") || ns.has("route-20001") {
		t.Error("the 20,000th name is not route-20000")
	}
}

func TestTheEnvoyLocalCommandConvertsABootstrap(t *testing.T) {
	f := filepath.Join(t.TempDir(), "envoy.yaml")
	if err := os.WriteFile(f, []byte(localBootstrap), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"envoy-local-ratelimit", "-f", f}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if cfg, err := policy.Parse(stdout.Bytes()); err != nil || cfg.RuleByName("api-api_key") == nil {
		t.Errorf("%v:\n%s", err, stdout.String())
	}
	if code := Main([]string{"envoy-local-ratelimit", "-f", f, "-scope", "local"}, &stdout, &stderr); code != 2 {
		t.Errorf("a flag the source does not have: exit %d, want 2", code)
	}
}
