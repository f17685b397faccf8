package policy

import (
	"strings"
	"testing"
)

func TestRejectBodyTakesItsContentTypeFromWhatItIs(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`{"message": "API rate limit exceeded"}`, ContentTypeJSON},
		{`["slow down"]`, ContentTypeJSON},
		{`API rate limit exceeded`, ContentTypeText},
		{`{"message": unquoted}`, ContentTypeText},
		{``, ""},
	} {
		cfg := mustParse(t, `{"reject_body": `+jsonString(tc.body)+`, "rules": [`+baseRule+`]}`)
		if cfg.Reply == nil || cfg.Reply.Body != tc.body || cfg.Reply.ContentType != tc.want {
			t.Errorf("reject_body %q: reply %+v, want content type %q", tc.body, cfg.Reply, tc.want)
		}
	}
	cfg := mustParse(t, `{"reject_body": "<h1>Slow down</h1>", "reject_content_type": "text/html; charset=utf-8", "rules": [`+baseRule+`]}`)
	if got := cfg.Reply.ContentType; got != "text/html; charset=utf-8" {
		t.Errorf("explicit content type: %q", got)
	}
}

func TestARulesReplyWinsOverTheConfigurations(t *testing.T) {
	cfg := mustParse(t, `{"reject_body": "everyone", "policies": [{"name": "p", "rules": [
		{"name": "own", "match": {"path": "/own"}, "limit_keys": ["path"], "algorithm": "token_bucket", "algorithm_config": {"rps": 1, "burst": 1},
		 "reject_body": "{\"own\": true}"},
		{"name": "shared", "limit_keys": ["path"], "algorithm": "fixed_window", "algorithm_config": {"limit": 1, "window_seconds": 60}},
		{"name": "blocked", "action": "deny", "match": {"path": "/blocked"}},
		{"name": "blocked-politely", "action": "deny", "match": {"path": "/polite"}, "reject_body": "", "reject_content_type": "text/plain"},
		{"name": "health", "action": "exempt", "match": {"path": "/healthz"}}]}]}`)
	want := map[string]*Reply{
		"own":              {Body: `{"own": true}`, ContentType: ContentTypeJSON},
		"shared":           {Body: "everyone", ContentType: ContentTypeText},
		"blocked":          nil, // a deny rule keeps its own JSON unless it says otherwise
		"blocked-politely": {Body: "", ContentType: "text/plain"},
		"health":           nil,
	}
	for i := range cfg.Policies[0].Rules {
		r := &cfg.Policies[0].Rules[i]
		got, w := cfg.RejectReply(r), want[r.Name]
		if (got == nil) != (w == nil) || got != nil && *got != *w {
			t.Errorf("%s: reply %+v, want %+v", r.Name, got, w)
		}
	}
}

func TestBadRejectRepliesAreRefusedNamingTheField(t *testing.T) {
	long := strings.Repeat("x", MaxRejectBody+1)
	for _, tc := range []struct{ in, path, msg string }{
		{`{"reject_body": 429, "rules": [` + baseRule + `]}`, "reject_body", "must be a string"},
		{`{"reject_body": "` + long + `", "rules": [` + baseRule + `]}`, "reject_body", "at most 4096"},
		{`{"reject_content_type": "text/plain", "rules": [` + baseRule + `]}`, "reject_content_type", `needs "reject_body"`},
		{`{"reject_body": "x", "reject_content_type": "", "rules": [` + baseRule + `]}`, "reject_content_type", "is empty"},
		{`{"reject_body": "x", "reject_content_type": "text", "rules": [` + baseRule + `]}`, "reject_content_type", "not type/subtype"},
		{`{"reject_body": "x", "reject_content_type": "text/plain\r\nx-injected: 1", "rules": [` + baseRule + `]}`, "reject_content_type", "printable ASCII"},
		{`{"reject_body": "x", "reject_content_type": " text/plain", "rules": [` + baseRule + `]}`, "reject_content_type", "starts or ends with a space"},
		{`{"reject_body": "x", "reject_content_type": "text/pl ain", "rules": [` + baseRule + `]}`, "reject_content_type", "not type/subtype"},
		{`{"reject_body": "x", "reject_content_type": 5, "rules": [` + baseRule + `]}`, "reject_content_type", "must be a string"},
		{rules(`{"name": "h", "action": "exempt", "reject_body": "no"}`), "rules[0].reject_body", `does not apply to an "exempt" rule`},
		{rules(`{"name": "h", "action": "exempt", "reject_content_type": "text/plain"}`), "rules[0].reject_content_type", `does not apply to an "exempt" rule`},
		{rules(`{"name": "d", "action": "deny", "reject_content_type": "text/plain"}`), "rules[0].reject_content_type", `needs "reject_body"`},
	} {
		wantError(t, tc.in, tc.path, tc.msg)
	}
}

func TestRejectRepliesSurviveNormalizing(t *testing.T) {
	in := `{"reject_body": "", "rules": [
		{"name": "a", "limit_keys": ["path"], "algorithm": "token_bucket", "algorithm_config": {"rps": 1, "burst": 1}, "reject_body": "{\"m\": 1}"},
		{"name": "d", "action": "deny", "reject_body": "gone", "reject_content_type": "text/x-custom"}]}`
	cfg := mustParse(t, in)
	out, err := cfg.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"reject_body":""`, `"reject_body":"{\"m\": 1}","reject_content_type":"application/json"`, `"reject_body":"gone","reject_content_type":"text/x-custom"`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("normalized form lacks %s:\n%s", want, out)
		}
	}
	again := mustParse(t, string(out))
	if *again.Reply != *cfg.Reply || *again.Policies[0].Rules[0].Reply != *cfg.Policies[0].Rules[0].Reply ||
		*again.Policies[0].Rules[1].Reply != *cfg.Policies[0].Rules[1].Reply {
		t.Errorf("replies changed through the normalized form:\n%s", out)
	}
}

func jsonString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, c := range s {
		if c == '"' || c == '\\' {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	b.WriteByte('"')
	return b.String()
}
