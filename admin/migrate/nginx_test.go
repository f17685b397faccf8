package migrate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/simulate"
)

// convertNginx converts conf and parses the result.
func convertNginx(t *testing.T, conf string) (*policy.Config, Result) {
	t.Helper()
	res, err := Nginx([]byte(conf), NginxOptions{})
	return parsed(t, conf, res, err)
}

// limitedBy is the names of the limit rules that apply to a request for
// host and path (with the query) from 192.0.2.1, one per policy at most.
func limitedBy(cfg *policy.Config, host, path string, headers map[string]string) []string {
	res := simulate.Run(cfg, simulate.Request{Method: "GET", Host: host, Path: path, ClientAddress: "192.0.2.1", Headers: headers}, simulate.Options{Now: 1e9})
	var out []string
	for _, p := range res.Policies {
		if p.Applied >= 0 && p.Rules[p.Applied].Action == policy.ActionLimit {
			out = append(out, p.Rules[p.Applied].Name)
		}
	}
	slices.Sort(out)
	return out
}

// expectLimits checks which rules limit each request: "host path" (or
// "path" for any host) to the rule names, comma-separated.
func expectLimits(t *testing.T, cfg *policy.Config, doc []byte, want map[string]string) {
	t.Helper()
	for req, names := range want {
		host, path, ok := strings.Cut(req, " ")
		if !ok {
			host, path = "example.com", req
		}
		got := strings.Join(limitedBy(cfg, host, path, map[string]string{"x-api-key": "k1"}), ",")
		if wantSorted := strings.Split(names, ","); names != "" {
			slices.Sort(wantSorted)
			names = strings.Join(wantSorted, ",")
		}
		if got != names {
			t.Errorf("%s: limited by [%s], want [%s]\n%s", req, got, names, doc)
		}
	}
}

// The guide's three locations convert to the guide's policy, which the
// scenarios run under both hosts.
func TestTheGuidesNginxLocationsConvertToTheGuidesPolicy(t *testing.T) {
	conf := guideBlock(t, "## nginx `limit_req`", "nginx")
	shown := guideBlock(t, "<!-- example: nginx-limit-req -->", "json")
	got, _ := convertNginx(t, conf)
	want, err := policy.Parse([]byte(shown))
	if err != nil {
		t.Fatal(err)
	}
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if string(g) != string(w) {
		t.Errorf("the guide shows\n%s\nthe conversion makes (normalized)\n%s", w, g)
	}
}

// ---- Syntax ----

func TestTheParserReadsNginxSyntax(t *testing.T) {
	dirs, err := parseNginxConf([]byte("# comment\n"+
		"a 'single quoted' \"double \\\"escaped\\\" \\t\" plain\\;semi ${var}x $v{ # trailing comment\n"+
		"  b#not-a-comment;\n"+
		"  c \"\"; d{e;}\n"+
		"}\n"+
		"if ($a = \"b\") { f; }\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	var walk func([]*ngxDirective, string)
	walk = func(ds []*ngxDirective, indent string) {
		for _, d := range ds {
			got = append(got, fmt.Sprintf("%s%d %q %q %v", indent, d.line.n, d.name, d.args, d.isBlock))
			walk(d.block, indent+"  ")
		}
	}
	walk(dirs, "")
	want := []string{
		`2 "a" ["single quoted" "double \"escaped\" \t" "plain\\;semi" "${var}x" "$v"] true`,
		`  3 "b#not-a-comment" [] false`,
		`  4 "c" [""] false`,
		`  4 "d" [] true`,
		`    4 "e" [] false`,
		`6 "if" ["($a" "=" "b" ")"] true`,
		`  6 "f" [] false`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestSyntaxErrorsNameTheLine(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"http {\n  server {\n  }\n}\n}\n", "nginx.conf: line 5: unexpected }"},
		{"a b\n}", "nginx.conf: line 2: unexpected } (a ; is missing before it)"},
		{"http {\n a;\n", "nginx.conf: line 3: unexpected end of file, expecting }"},
		{"a \"open;\n", "nginx.conf: line 2: unexpected end of file, expecting ; or }"},
		{"\n;", "nginx.conf: line 2: unexpected ;"},
		{"a \"q\"x;", "nginx.conf: line 1: unexpected x after a quoted word"},
		{strings.Repeat("a {", 40) + strings.Repeat("}", 40), "blocks nested more than 32 deep"},
		{strings.Repeat("a;", ngxMaxDirectives+1), "more than 100000 directives"},
	} {
		_, err := Nginx([]byte(tc.in), NginxOptions{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%.40q: %v, want %q", tc.in, err, tc.want)
		}
		var ie *InputError
		if err != nil && (!errors.As(err, &ie) || ie.Input != "config") {
			t.Errorf("%.40q: %T, want an InputError about the config", tc.in, err)
		}
	}
}

// ---- The limit_req mapping ----

func TestLimitReqBecomesATokenBucket(t *testing.T) {
	for _, tc := range []struct {
		zone, limit string
		tps         float64
		burst       float64
		delayMS     int
		note        string
	}{
		{"rate=10r/s", "burst=20 nodelay", 10, 21, 0, ""},
		{"rate=1r/s", "burst=5", 1, 1, 5000, ""},
		{"rate=2r/s", "burst=10 delay=3", 2, 4, 3500, ""},
		{"rate=2r/s", "burst=10 delay=30", 2, 11, 0, ""},
		{"rate=30r/m", "burst=5", 0.5, 1, 10000, ""},
		{"rate=10", "burst=4 nodelay", 10, 10, 0, "admits 5 request(s) at once at rate=10; Sluice's burst is at least its rate, so rule z admits 10 at once"},
		{"rate=10r/s", "", 10, 10, 0, "admits 1 request(s) at once"},
		{"rate=10r/s", "burst=20", 10, 10, 1100, "admits 1 request(s) at once"},
		{"rate=1r/m", "burst=3", 0.016, 1, 60000, "holds requests up to 187500 ms; Sluice holds at most 60000 ms"},
		{"rate=10r/m", "burst=2 nodelay", 0.166, 3, 0, ""},
	} {
		conf := "limit_req_zone $binary_remote_addr zone=z:1m " + tc.zone + ";\nlimit_req zone=z " + tc.limit + ";\n"
		cfg, res := convertNginx(t, conf)
		r := cfg.RuleByName("z")
		if r == nil || r.TokenBucket == nil {
			t.Fatalf("%s:\n%s", conf, res.Policy)
		}
		if tb := r.TokenBucket; tb.TokensPerSecond != tc.tps || tb.Burst != tc.burst || tb.MaxDelayMS != tc.delayMS {
			t.Errorf("%s: %+v, want rate %v burst %v max_delay_ms %d", conf, *tb, tc.tps, tc.burst, tc.delayMS)
		}
		if len(r.Match) != 0 || len(r.Keys) != 1 || r.Keys[0].String() != "ip:address" || cfg.RejectStatus != 503 {
			t.Errorf("%s: match %v keys %v status %d", conf, r.Match, r.Keys, cfg.RejectStatus)
		}
		if tc.note != "" {
			notesContain(t, res.Notes, tc.note)
		}
	}
}

func TestStatusAndDryRunFollowTheirContexts(t *testing.T) {
	cfg, res := convertNginx(t, `
limit_req_zone $binary_remote_addr zone=a:1m rate=5r/s;
limit_req_zone $binary_remote_addr zone=b:1m rate=5r/s;
limit_req_status 429;
server {
    location /one/   { limit_req zone=a burst=5 nodelay; }
    location /two/   { limit_req zone=b burst=5 nodelay; }
    location /three/ { limit_req zone=a burst=9 nodelay; limit_req_status 503; }
    location /trial/ { limit_req zone=b burst=7 nodelay; limit_req_dry_run on; limit_req_status 500; }
}`)
	if cfg.RejectStatus != 429 {
		t.Errorf("reject_status %d, want 429 (two rules of three)", cfg.RejectStatus)
	}
	for name, want := range map[string]int{"a-one": 429, "b-two": 429, "a-three": 503} {
		if r := cfg.RuleByName(name); r == nil || cfg.RejectStatusOf(r) != want {
			t.Errorf("%s rejects with %v, want %d\n%s", name, r, want, res.Policy)
		}
	}
	if r := cfg.RuleByName("a-one"); r.RejectStatus != 0 {
		t.Errorf("a-one has its own status %d; the top level's is the same", r.RejectStatus)
	}
	if r := cfg.RuleByName("b-trial"); r == nil || r.Mode != policy.ModeShadow {
		t.Errorf("the dry-run location's rule: %+v\n%s", r, res.Policy)
	}
	if r := cfg.RuleByName("a-one"); r == nil || r.Mode != policy.ModeEnforce {
		t.Errorf("an enforced location's rule: %+v", r)
	}
	if strings.Contains(strings.Join(res.Notes, "\n"), "500") {
		t.Errorf("a dry-run rule rejects nothing, its status is no concern: %q", res.Notes)
	}
}

func TestLimitConnBecomesAConcurrencyRule(t *testing.T) {
	cfg, res := convertNginx(t, `
limit_conn_zone $binary_remote_addr zone=addr:10m;
limit_conn_status 429;
location /download/ { limit_conn addr 2; limit_conn_dry_run on; }`)
	r := cfg.RuleByName("addr")
	if r == nil || r.Algorithm != policy.AlgorithmConcurrency || r.Window.Limit != 2 || r.Mode != policy.ModeShadow || r.Keys[0].String() != "ip:address" {
		t.Fatalf("%+v\n%s", r, res.Policy)
	}
	notesContain(t, res.Notes, "limit_conn counts connections")
}

func TestKeysBecomeLimitKeys(t *testing.T) {
	for _, tc := range []struct{ key, want, note string }{
		{"$binary_remote_addr", "ip:address", "xff_trusted_hops"},
		{"$remote_addr", "ip:address", ""},
		{"$http_x_api_key", "header:x-api-key", ""},
		{"$arg_token", "query:token", ""},
		{"$cookie_Session_ID", "cookie:session_id", "nginx compares cookie names ignoring case"},
		{"global", "all", ""},
		{"$host", "host", ""},
		{"$server_name", "host", "one state for all its names"},
		{"$uri", "path", ""},
		{"$request_uri", "path", "includes the query string"},
		{"$request_method", "method", ""},
		{"${http_x_tenant}:$binary_remote_addr", "header:x-tenant ip:address", "when it has every one of them"},
		{`"$arg_a$arg_a"`, "query:a", ""},
	} {
		cfg, res := convertNginx(t, "limit_req_zone "+tc.key+" zone=z:1m rate=5r/s;\nlimit_req zone=z burst=5;\n")
		r := cfg.RuleByName("z")
		var keys []string
		for _, k := range r.Keys {
			keys = append(keys, k.String())
		}
		if got := strings.Join(keys, " "); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.key, got, tc.want)
		}
		if tc.note != "" {
			notesContain(t, res.Notes, tc.note)
		}
	}
}

func TestKeysWithoutASourceAreRefused(t *testing.T) {
	for _, tc := range []struct{ key, want string }{
		{"$1", "key variable $1 has no Sluice source"},
		{"${x", "unterminated ${"},
		{"$tenant", "key variable $tenant is assigned with set (line 3)"},
	} {
		conf := "limit_req_zone " + tc.key + " zone=z:1m rate=5r/s;\nserver {\n  set $tenant $http_x;\n  limit_req zone=z;\n}\n"
		if _, err := Nginx([]byte(conf), NginxOptions{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.key, err, tc.want)
		}
	}
}

func TestAnEmptyKeyLimitsNothing(t *testing.T) {
	_, res := convertNginx(t, `
limit_req_zone "" zone=off:1m rate=1r/s;
limit_req_zone $binary_remote_addr zone=on:1m rate=1r/s;
limit_req zone=off; limit_req zone=on;`)
	notesContain(t, res.Notes, "zone off (line 2) limits no request: its key is empty")
	if strings.Contains(string(res.Policy), `"off"`) {
		t.Errorf("a rule for the empty key:\n%s", res.Policy)
	}
}

// The classic allowlist: geo marks the office, map keys everyone else by
// address; nginx does not limit a request whose key is empty.
func TestAMapOfAGeoBecomesAnAddressCondition(t *testing.T) {
	cfg, res := convertNginx(t, `
geo $limit {
    default 1;
    10.0.0.0/8 0;
    192.168.1.7 0;
}
map $limit $limit_key {
    0 "";
    1 $binary_remote_addr;
}
limit_req_zone $limit_key zone=req:10m rate=5r/s;
limit_req zone=req burst=10 nodelay;`)
	r := cfg.RuleByName("req")
	if r == nil || len(r.Match) != 1 || r.Match[0].Cond.Op != policy.MatchNot || r.Match[0].Source.String() != "ip:address" {
		t.Fatalf("%+v\n%s", r, res.Policy)
	}
	if got := fmt.Sprint(r.Match[0].Cond.Not.CIDRs); got != "[10.0.0.0/8 192.168.1.7/32]" {
		t.Errorf("left out: %s", got)
	}
	notesContain(t, res.Notes, "zone req keys on map $limit_key (line 7): the requests for which it is empty are not limited by nginx")
}

func TestAMapOfAHeaderBecomesAHeaderCondition(t *testing.T) {
	cfg, res := convertNginx(t, `
map $http_x_api_key $key {
    default $http_x_api_key;
    internal-batch "";
    ~^test- "";
}
limit_req_zone $key zone=k:10m rate=5r/s;
limit_req zone=k burst=10 nodelay;`)
	r := cfg.RuleByName("k")
	for key, want := range map[string]bool{"abc": true, "Internal-Batch": false, "test-1": false, "": false} {
		got := len(limitedBy(cfg, "h", "/", map[string]string{"x-api-key": key})) == 1
		if got != want {
			t.Errorf("x-api-key %q: limited %v, want %v\n%s", key, got, want, res.Policy)
		}
	}
	if r.Keys[0].String() != "header:x-api-key" {
		t.Errorf("keys %v", r.Keys)
	}
}

func TestMapsThatAreNotConditionsAreRefused(t *testing.T) {
	for _, tc := range []struct{ maps, want string }{
		{`map $http_x $k { default $http_x; "" $binary_remote_addr; }`, "values $http_x and $binary_remote_addr differ"},
		{`map $http_x $k { default "a"; b $http_x; }`, `default value "a" is neither empty nor one variable`},
		{`map $uri $k { default $binary_remote_addr; /health ""; }`, "a condition on path would take the place of the server's or location's"},
		{`map $http_x $k { hostnames; default $http_x; a ""; }`, "its hostnames matching is not converted"},
		{`geo $k { default 1; }`, "is a geo (line 2) of fixed values"},
		{`geo $g { default 1; 10.0.0.0/8 0; 10.1.0.0/16 1; } map $g $k { 0 ""; 1 $remote_addr; }`, "10.0.0.0/8 and 10.1.0.0/16 (line 2) nest with different outcomes"},
		{`map $http_x $k { default ""; ~^a $http_x; abc ""; }`, `"abc" is kept out of a regular expression`},
		{`map $http_x $k { default ""; ~(?<=a)b $http_x; }`, "not RE2 syntax"},
	} {
		conf := "\n" + tc.maps + "\nlimit_req_zone $k zone=z:1m rate=1r/s;\nlimit_req zone=z;\n"
		if _, err := Nginx([]byte(conf), NginxOptions{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.maps, err, tc.want)
		}
	}
}

// ---- Inheritance and location selection ----

// nginx inherits limit_req into a context only when it has none of its
// own: a location with its own limit_req drops the server's.
func TestLimitsAreInheritedOnlyIntoContextsWithoutTheirOwn(t *testing.T) {
	cfg, res := convertNginx(t, `
limit_req_zone $binary_remote_addr zone=site:1m rate=10r/s;
limit_req_zone $binary_remote_addr zone=api:1m rate=5r/s;
limit_conn_zone $binary_remote_addr zone=addr:1m;
limit_req zone=site burst=20 nodelay;
limit_conn addr 5;
server {
    location / { }
    location /api/ {
        limit_req zone=api burst=5 nodelay;
        location /api/nested/ { }
        location /api/own/ { limit_req zone=site burst=1 nodelay; }
    }
}`)
	expectLimits(t, cfg, res.Policy, map[string]string{
		"/":               "site,addr",
		"/page":           "site,addr",
		"/api/x":          "api,addr",
		"/api/nested/x":   "api,addr",
		"/api/own/x":      "site-api-own,addr",
		"/api/ownx":       "api,addr",
		"/apix":           "site,addr",
		"other.host /api": "site,addr",
	})
}

// A naive conversion (a rule per location that limits, in file order)
// fails each of these: the exact /health in a limited server, a regex
// location that wins over a prefix, a ^~ that stops the regexes, a longer
// prefix inside a ^~ one that lets them run again.
func TestRulesFollowNginxsLocationSelection(t *testing.T) {
	cfg, res := convertNginx(t, `
limit_req_zone $binary_remote_addr zone=site:1m rate=10r/s;
limit_req_zone $binary_remote_addr zone=php:1m rate=2r/s;
limit_req_zone $binary_remote_addr zone=img:1m rate=50r/s;
server {
    server_name example.com;
    limit_req zone=site burst=20 nodelay;
    location = /health { limit_req zone=img burst=1 nodelay; limit_req_dry_run on; }
    location / { }
    location ~ \.php$ { limit_req zone=php burst=1 nodelay; }
    location ^~ /static/ { limit_req zone=img burst=100 nodelay; }
    location /static/legacy/ { }
    location /uploads/ { limit_req zone=img burst=100 nodelay; }
}`)
	expectLimits(t, cfg, res.Policy, map[string]string{
		"/":                       "site",
		"/health":                 "img-health",
		"/healthz":                "site",
		"/index.php":              "php-php",
		"/static/a.php":           "img-static",
		"/static/legacy/a.php":    "php-static-legacy-php",
		"/static/legacy/a.css":    "site-static-legacy",
		"/uploads/a.png":          "img-uploads",
		"/uploads/a.php":          "php-php",
		"other.example.net /x.js": "site",
	})
}

func TestNestedLocationsAreSelectedWithinTheirParent(t *testing.T) {
	cfg, res := convertNginx(t, `
limit_req_zone $binary_remote_addr zone=a:1m rate=1r/s;
limit_req_zone $binary_remote_addr zone=b:1m rate=1r/s;
server {
    location /a/ {
        limit_req zone=a;
        location = /a/exact { limit_req zone=b; }
        location ~ \.txt$ { limit_req zone=b burst=2; }
        location ^~ /a/b/ { }
    }
    location /a/b/c/ { limit_req zone=b burst=3; }
    location ~ \.css$ { limit_req zone=b burst=4; }
}`)
	want := map[string]string{
		"/a/x":       "a-a",
		"/a/exact":   "b-a-exact",
		"/a/x.txt":   "b-a-txt",
		"/a/x.css":   "b-css",     // the server's regex location, after the nested ones: one bucket
		"/a/b/x.txt": "a-a-b",     // ^~ /a/b/ stops the regexes nested in /a/, not the server's
		"/a/b/x.css": "b-a-b-css", // and inherits /a/'s limit_req
		"/a/b/c/x":   "b-a-b-c",   // the longest prefix of its level, not /a/'s nested ^~
		"/x.css":     "b-css",
		"/x.txt":     "",
	}
	expectLimits(t, cfg, res.Policy, want)
}

// A regex location that inherits the site's limit counts in the site's
// bucket, as in nginx's one zone, though a prefix location with a limit
// of its own lies between them in the rules.
func TestARegexLocationSharesItsZonesBucket(t *testing.T) {
	cfg, res := convertNginx(t, `
limit_req_zone $binary_remote_addr zone=site:1m rate=10r/s;
limit_req_zone $binary_remote_addr zone=login:1m rate=1r/s;
limit_req zone=site burst=20 nodelay;
server {
    location / { }
    location /login { limit_req zone=login; }
    location = /login/exact.png { limit_req zone=login; }
    location ~* \.(png|css)$ { }
}`)
	expectLimits(t, cfg, res.Policy, map[string]string{
		"/":                "site",
		"/a.png":           "site",
		"/login/a.png":     "site",
		"/login/a.PNG":     "site",
		"/login":           "login-login",
		"/login/exact.png": "login-login-exact.png",
	})
	if n := len(cfg.Policies[0].Rules); n != 3 {
		t.Errorf("%d rules in the site's policy, want 3 (two unlimited, one limit):\n%s", n, res.Policy)
	}
}

// Zones whose rules cannot meet one request share a policy; zones on the
// same location need one each.
func TestOnlyZonesThatCannotMeetShareAPolicy(t *testing.T) {
	cfg, res := convertNginx(t, `
limit_req_zone $binary_remote_addr zone=a:1m rate=1r/s;
limit_req_zone $binary_remote_addr zone=b:1m rate=1r/s;
limit_req_zone $http_x_api_key zone=c:1m rate=1r/s;
server {
    location /a/ { limit_req zone=a; }
    location /b/ { limit_req zone=b; limit_req zone=c; }
}`)
	var got []string
	for _, p := range cfg.Policies {
		var rules []string
		for _, r := range p.Rules {
			rules = append(rules, r.Name)
		}
		got = append(got, p.Name+":"+strings.Join(rules, ","))
	}
	if want := []string{"a-b:a,b", "c:c"}; !slices.Equal(got, want) {
		t.Errorf("policies %q, want %q\n%s", got, want, res.Policy)
	}
}

func TestLocationsNestedInARegexLocationAreNoted(t *testing.T) {
	_, res := convertNginx(t, `
limit_req_zone $binary_remote_addr zone=z:1m rate=1r/s;
server {
    location ~ ^/app/ {
        limit_req zone=z;
        location ~ \.json$ { limit_req zone=z burst=5; }
    }
}`)
	notesContain(t, res.Notes, "line 4: the locations nested in location ~ ^/app/ limit differently from it, and are converted as it")
}

func TestLocationModifiersMayBeJoinedToTheirURI(t *testing.T) {
	cfg, res := convertNginx(t, `
limit_req_zone $binary_remote_addr zone=z:1m rate=1r/s;
server {
    limit_req zone=z;
    location =/exact { limit_req zone=z burst=1; }
    location ^~/static/ { limit_req zone=z burst=2; }
    location ~*\.JPG$ { limit_req zone=z burst=3; }
    location @named { limit_req zone=z burst=4; }
}`)
	expectLimits(t, cfg, res.Policy, map[string]string{
		"/exact":        "z-exact",
		"/static/a.jpg": "z-static",
		"/a.jpg":        "z-JPG",
		"/a":            "z",
	})
}

func TestServersAreTheirHostsAndTheDefaultTakesTheRest(t *testing.T) {
	cfg, res := convertNginx(t, `
limit_req_zone $binary_remote_addr zone=z:1m rate=1r/s;
server {
    listen 80;
    server_name example.com www.example.com;
    limit_req zone=z burst=1;
}
server {
    listen 80 default_server;
    server_name _;
    location / { limit_req zone=z burst=2; }
}
server {
    server_name *.example.com;
    location /api/ { limit_req zone=z burst=3; }
}
server {
    server_name ~^shop[0-9]+\.example\.org$ api.example.com;
    return 301 https://example.com$request_uri;
}`)
	expectLimits(t, cfg, res.Policy, map[string]string{
		"example.com /x":         "z-example.com",
		"WWW.example.com /x":     "z-example.com",
		"a.example.com /x":       "",
		"a.example.com /api":     "",
		"a.b.example.com /api/x": "z-wildcard.example.com-api",
		"api.example.com /api/x": "",
		"shop1.example.org /x":   "",
		"shop.example.org /x":    "z-default",
		"other.net /x":           "z-default",
		"api.example.com /x":     "",
	})
}

// ---- What cannot be converted ----

func TestDirectivesThatCannotBeReadNameTheirLine(t *testing.T) {
	zones := "limit_req_zone $binary_remote_addr zone=z:1m rate=1r/s;\nlimit_conn_zone $binary_remote_addr zone=c:1m;\n"
	for _, tc := range []struct{ conf, want string }{
		{"limit_req zone=nope;", "line 3: limit_req zone=nope: no limit_req_zone defines it"},
		{"limit_req zone=c;", "line 3: limit_req zone=c: c is a limit_conn_zone (line 2)"},
		{"limit_conn z 3;", "line 3: limit_conn z: z is a limit_req_zone (line 1)"},
		{"limit_req zone=z burst=0;", `line 3: limit_req: invalid parameter "burst=0"`},
		{"limit_req zone=z; limit_req zone=z burst=2;", "line 3: limit_req zone=z is duplicate (also line 3)"},
		{"limit_req burst=2;", "limit_req must have the zone parameter"},
		{"limit_conn c 70000;", `invalid number of connections "70000"`},
		{"limit_req_status 302;", `limit_req_status "302": want a status from 400 to 599`},
		{"limit_req_dry_run maybe;", "want on or off"},
		{"limit_req_zone $uri zone=z:1m rate=fast;", `invalid rate "rate=fast"`},
		{"limit_req_zone $uri zone=y rate=1r/s;", `invalid zone "zone=y"`},
		{"limit_req_zone $uri zone=z:1m;", `zone "z" is already defined (line 1)`},
		{"server { limit_req_zone $uri zone=y:1m; }", "line 3: limit_req_zone is allowed in the http block only"},
		{"server { location /a { location /b { } } }", `line 3: location /b is outside location /a`},
		{"server { location = /a { location /a/b { } } }", "cannot be inside the exact location = /a"},
		{"server { location /a { } location /a { } }", `duplicate location "/a" (also line 3)`},
		{"server { location ~ (?<=a)b { limit_req zone=z; } }", "line 3: location ~ (?<=a)b: error parsing regexp"},
		{"location /a { }\nserver { }", "line 3: location /a is outside a server block"},
		{"", "nothing to convert"},
	} {
		_, err := Nginx([]byte(zones+tc.conf), NginxOptions{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.conf, err, tc.want)
		}
	}
}

func TestWhatDiffersIsNoted(t *testing.T) {
	_, res := convertNginx(t, `
include /etc/nginx/modules-enabled/*.conf;
stream { limit_conn_zone $binary_remote_addr zone=tcp:1m; server { limit_conn tcp 1; } }
http {
    include mime.types;
    include /etc/nginx/conf.d/*.conf;
    set_real_ip_from 10.0.0.0/8;
    limit_req_zone $binary_remote_addr zone=z:20m rate=1r/s sync;
    limit_req_zone $binary_remote_addr zone=unused:1m rate=1r/s;
    server {
        listen 8080;
        server_name a.example.com;
        location / { limit_req zone=z; rewrite ^/old/(.*)$ /new/$1 last; }
        location /gone { limit_req zone=z; return 410; }
    }
    server { server_name b.example.com; location / { limit_req zone=z; } }
}`)
	notesContain(t, res.Notes,
		"include is not followed: /etc/nginx/conf.d/*.conf (line 6); this conversion reads one file: run ratelimit-admin migrate nginx",
		"inside stream is not converted",
		"realip module",
		"zone z is synchronized across NGINX Plus instances",
		"zone unused (line 9) limits no request",
		"rewrite (lines 13) changes the URI",
		"the return directives at lines 14 answer before nginx's limits run",
		"servers listen on 8080",
		"z (about 327680)",
		"per Envoy process",
	)
	if strings.Contains(strings.Join(res.Notes, "\n"), "mime.types") || strings.Contains(strings.Join(res.Notes, "\n"), "modules-enabled") {
		t.Errorf("standard includes noted: %q", res.Notes)
	}
}

func TestNamesTakenAreNotUsed(t *testing.T) {
	conf := "limit_req_zone $binary_remote_addr zone=api:1m rate=1r/s;\nlimit_req_zone $binary_remote_addr zone=web:1m rate=1r/s;\n" +
		"server { location /api/ { limit_req zone=api; } location / { limit_req zone=web; } }\n"
	res, err := Nginx([]byte(conf), NginxOptions{Taken: []string{"api", "web", "default"}})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := policy.Parse(res.Policy)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range cfg.Policies {
		names = append(names, p.Name)
		for _, r := range p.Rules {
			names = append(names, r.Name)
		}
	}
	for _, n := range names {
		if n == "api" || n == "web" || n == "default" {
			t.Errorf("%s is taken:\n%s", n, res.Policy)
		}
	}
	if _, _, err := AddTo([]byte(`{"rules": [{"name": "api", "limit_keys": ["ip:address"], "algorithm": "token_bucket", "algorithm_config": {"rps": 1, "burst": 1}}]}`), res.Policy); err != nil {
		t.Errorf("adding the conversion to a policy: %v", err)
	}
}

// ---- Against nginx's own selection ----

// nginxLimits is what nginx applies to a request, found as nginx finds it
// (ngx_http_find_virtual_server, ngx_http_core_find_location), from the
// parsed configuration: the zones with their parameters, one string each.
func nginxLimits(r *ngxReader, host, uri string) []string {
	s := refServer(r.servers, strings.ToLower(host))
	eff := &s.eff
	if l, _ := refLocation(s.locs, uri, nil); l != nil {
		eff = &l.eff
	}
	if s.redirect() || eff.returns {
		return nil
	}
	var out []string
	for i := range eff.reqs {
		q := &eff.reqs[i]
		cfg, _, _ := ngxBucket(r.zones[q.zone].rate, q)
		out = append(out, fmt.Sprintf("%s %g/%d/%d %v", q.zone, cfg.TokensPerSecond, cfg.Burst, cfg.MaxDelayMS, eff.reqDry))
	}
	for _, c := range eff.conns {
		out = append(out, fmt.Sprintf("%s %d %v", c.zone, c.n, eff.connDry))
	}
	slices.Sort(out)
	return out
}

func refServer(servers []*ngxServer, host string) *ngxServer {
	for _, s := range servers {
		for _, n := range s.names {
			if n = strings.ToLower(n); n == host || strings.HasPrefix(n, ".") && n[1:] == host {
				return s
			}
		}
	}
	var best *ngxServer
	bestLen := 0
	for _, tail := range []bool{false, true} {
		for _, s := range servers {
			for _, n := range s.names {
				n = strings.ToLower(n)
				var ok bool
				switch {
				case !tail && strings.HasPrefix(n, "*."):
					ok = strings.HasSuffix(host, n[1:])
				case !tail && strings.HasPrefix(n, "."):
					ok = strings.HasSuffix(host, n)
				case tail && strings.HasSuffix(n, ".*"):
					ok = strings.HasPrefix(host, n[:len(n)-1])
				}
				if ok && len(n) > bestLen {
					best, bestLen = s, len(n)
				}
			}
		}
		if best != nil {
			return best
		}
	}
	for _, s := range servers {
		for _, n := range s.names {
			if strings.HasPrefix(n, "~") && regexpMatch("(?i)"+n[1:], host) {
				return s
			}
		}
	}
	return ngxDefaultServer(servers)
}

// refLocation is ngx_http_core_find_location: the static search of a
// level (exact, else the longest prefix, whose nested locations are
// searched next), then the level's regex locations unless the prefix found
// is ^~. done: an exact or regex location ended the search.
func refLocation(level []*ngxLoc, uri string, current *ngxLoc) (loc *ngxLoc, done bool) {
	for _, l := range level {
		if l.exact() && l.path == uri {
			return l, true
		}
	}
	var found *ngxLoc
	for _, l := range level {
		if l.prefix() && strings.HasPrefix(uri, l.path) && (found == nil || len(l.path) > len(found.path)) {
			found = l
		}
	}
	noregex := false
	if found != nil {
		noregex = found.mod == "^~"
		if current, done = refLocation(found.kids, uri, found); done {
			return current, true
		}
	}
	if !noregex {
		for _, l := range level {
			if l.regex() && l.re.MatchString(uri) {
				return l, true // the generated configurations nest nothing in a regex location
			}
		}
	}
	return current, false
}

func regexpMatch(re, s string) bool {
	ok, err := regexp.MatchString(re, s)
	return ok && err == nil
}

// sluiceLimits is what the converted policy applies, in nginxLimits' terms.
func sluiceLimits(cfg *policy.Config, host, uri string) []string {
	var out []string
	for _, name := range limitedBy(cfg, host, uri, nil) {
		r := cfg.RuleByName(name)
		zone, _, _ := strings.Cut(name, "-")
		shadow := r.Mode == policy.ModeShadow
		if r.TokenBucket != nil {
			tb := r.TokenBucket
			out = append(out, fmt.Sprintf("%s %g/%g/%d %v", zone, tb.TokensPerSecond, tb.Burst, tb.MaxDelayMS, shadow))
		} else {
			out = append(out, fmt.Sprintf("%s %g %v", zone, r.Window.Limit, shadow))
		}
	}
	slices.Sort(out)
	return out
}

// randomNginx writes a configuration of servers, names, nested locations
// of every kind and limits in every context.
func randomNginx(rng *rand.Rand) string {
	var b strings.Builder
	b.WriteString("limit_req_zone $binary_remote_addr zone=za:1m rate=1r/s;\nlimit_req_zone $binary_remote_addr zone=zb:1m rate=90r/m;\nlimit_conn_zone $binary_remote_addr zone=ca:1m;\n")
	bursts := 0
	limits := func(indent string) {
		if rng.IntN(3) == 0 {
			return
		}
		for _, z := range []string{"za", "zb"} {
			if rng.IntN(2) == 0 {
				bursts++
				delay := []string{" nodelay", "", " delay=2"}[rng.IntN(3)]
				fmt.Fprintf(&b, "%slimit_req zone=%s burst=%d%s;\n", indent, z, bursts, delay)
			}
		}
		if rng.IntN(3) == 0 {
			bursts++
			fmt.Fprintf(&b, "%slimit_conn ca %d;\n", indent, bursts)
		}
		if rng.IntN(5) == 0 {
			fmt.Fprintf(&b, "%slimit_req_dry_run on;\n", indent)
		}
	}
	limits("")
	prefixes := []string{"/", "/api/", "/api/v1/", "/static/", "/static/img/", "/admin", "/a"}
	exacts := []string{"/health", "/api/", "/static/x.php", "/", "/admin"}
	regexes := []string{`\.php$`, `^/api/v[0-9]+/`, `\.(png|jpg)$`, `/admin`, `^/static/`}
	names := []string{"a.example.com", "*.example.com", "www.example.*", `~^b[0-9]\.example\.org$`, "example.com", ".example.org", "_"}
	var location func(indent, parent string, depth int)
	location = func(indent, parent string, depth int) {
		seen := map[string]bool{}
		for range rng.IntN(5) {
			mod := []string{"", "=", "^~", "~", "~*"}[rng.IntN(5)]
			var path string
			switch mod {
			case "~", "~*":
				path = regexes[rng.IntN(len(regexes))]
			case "=":
				path = exacts[rng.IntN(len(exacts))]
			default:
				path = prefixes[rng.IntN(len(prefixes))]
			}
			if !strings.HasPrefix(path, parent) && mod != "~" && mod != "~*" {
				path = parent + "x/"
			}
			kind := mod
			if mod == "^~" {
				kind = ""
			}
			if seen[kind+path] && mod != "~" && mod != "~*" {
				continue
			}
			seen[kind+path] = true
			fmt.Fprintf(&b, "%slocation %s %s {\n", indent, mod, path)
			limits(indent + "  ")
			if rng.IntN(8) == 0 {
				fmt.Fprintf(&b, "%s  return 204;\n", indent)
			}
			if depth < 2 && mod != "=" && mod != "~" && mod != "~*" {
				location(indent+"  ", path, depth+1)
			}
			fmt.Fprintf(&b, "%s}\n", indent)
		}
	}
	for range 1 + rng.IntN(3) {
		b.WriteString("server {\n")
		if rng.IntN(3) == 0 {
			b.WriteString("  listen 80 default_server;\n")
		}
		if rng.IntN(4) > 0 {
			b.WriteString("  server_name")
			for range 1 + rng.IntN(2) {
				b.WriteString(" " + names[rng.IntN(len(names))])
			}
			b.WriteString(";\n")
		}
		limits("  ")
		location("  ", "", 0)
		b.WriteString("}\n")
	}
	return b.String()
}

// Over random configurations, every request is limited by what nginx
// would limit it with: the same zones with the same parameters.
func TestConvertedRulesLimitWhatNginxLimits(t *testing.T) {
	hosts := []string{"a.example.com", "x.example.com", "www.example.net", "b1.example.org", "example.org", "example.com", "other.net", "www.example.com"}
	uris := []string{"/", "/x", "/zzz", "/health", "/healthz", "/api/", "/api/x", "/api/v1/", "/api/v1/x", "/api/v2/q", "/api/v1/x/",
		"/api/v1/x/y.php", "/API/v1/", "/static/", "/static/x.php", "/static/img/a.jpg", "/static/img/", "/static/a.PNG", "/admin",
		"/admin/x.php", "/adminx", "/a", "/ab", "/x/", "/api/x/", "/static/x/", "/a.php", "/index.PHP"}
	rng := rand.New(rand.NewPCG(1, 2))
	n := 200
	if testing.Short() {
		n = 40
	}
	for i := range n {
		conf := randomNginx(rng)
		res, err := Nginx([]byte(conf), NginxOptions{})
		if err != nil {
			if strings.Contains(err.Error(), "nothing to convert") {
				continue
			}
			t.Fatalf("config %d: %v\n%s", i, err, conf)
		}
		cfg, err := policy.Parse(res.Policy)
		if err != nil {
			t.Fatal(err)
		}
		top, _ := parseNginxConf([]byte(conf), "")
		r := &ngxReader{c: &converter{}, zones: map[string]*ngxZone{}, vars: map[string]*ngxVarDef{}, sets: map[string]ngxPos{}}
		if err := r.read(top); err != nil {
			t.Fatal(err)
		}
		for _, h := range hosts {
			for _, u := range uris {
				want, got := nginxLimits(r, h, u), sluiceLimits(cfg, h, u)
				if !slices.Equal(want, got) {
					t.Fatalf("config %d, %s%s: nginx limits with %q, the conversion with %q\n%s\n%s", i, h, u, want, got, conf, res.Policy)
				}
			}
		}
	}
}

// ---- A whole configuration ----

const nginxConf = `user www-data;
worker_processes auto;

events { worker_connections 1024; }

http {
    include mime.types;

    # per client, for the whole site
    limit_req_zone $binary_remote_addr zone=perip:10m rate=10r/s;
    # logins: 10 a minute
    limit_req_zone $binary_remote_addr zone=login:1m rate=10r/m;
    # per API key
    limit_req_zone $http_x_api_key zone=apikey:10m rate=50r/s;
    limit_conn_zone $binary_remote_addr zone=addr:1m;

    limit_req zone=perip burst=20 nodelay;
    limit_req_status 429;
    limit_conn_status 429;

    server {
        listen 443 ssl default_server;
        server_name example.com www.example.com;

        location = /health {
            limit_req zone=apikey burst=1000 nodelay;
            limit_req_dry_run on;
        }
        location / {
            proxy_pass http://web;
        }
        location /login {
            limit_req zone=login burst=5;
            proxy_pass http://web;
        }
        location ~* \.(css|js|png)$ {
            expires 7d;
        }
        location /downloads/ {
            limit_conn addr 2;
        }
    }

    server {
        listen 443 ssl;
        server_name api.example.com;
        limit_req zone=apikey burst=100 nodelay;
        location / {
            proxy_pass http://api;
        }
    }
}
`

// nginxConfPolicy is what nginxConf converts to.
const nginxConfPolicy = `{"policies": [
  {"name": "perip", "rules": [
    {"name": "perip-api.example.com", "action": "unlimited", "match": {"host": "api.example.com"}},
    {"name": "perip-example.com-health", "action": "unlimited", "match": {"path": "/health"}},
    {"name": "perip-example.com-login", "action": "unlimited",
     "match": {"path": {"not": {"regex": "(?i)\\.(css|js|png)$"}}, "path_prefix": "/login"}},
    {"name": "perip", "limit_keys": ["ip:address"],
     "algorithm": "token_bucket", "algorithm_config": {"tokens_per_second": 10, "burst": 21}}]},
  {"name": "login", "rules": [
    {"name": "login-api.example.com", "action": "unlimited", "match": {"host": "api.example.com"}},
    {"name": "login-example.com-css-js-png", "action": "unlimited", "match": {"path": {"regex": "(?i)\\.(css|js|png)$"}}},
    {"name": "login", "match": {"path": {"prefix": "/login"}}, "limit_keys": ["ip:address"],
     "algorithm": "token_bucket", "algorithm_config": {"tokens_per_second": 0.166, "burst": 1, "max_delay_ms": 30121}}]},
  {"name": "apikey", "rules": [
    {"name": "apikey-api.example.com", "match": {"host": "api.example.com"}, "limit_keys": ["header:x-api-key"],
     "algorithm": "token_bucket", "algorithm_config": {"tokens_per_second": 50, "burst": 101}},
    {"name": "apikey-example.com-health", "mode": "shadow", "match": {"path": "/health"}, "limit_keys": ["header:x-api-key"],
     "algorithm": "token_bucket", "algorithm_config": {"tokens_per_second": 50, "burst": 1001}}]},
  {"name": "addr", "rules": [
    {"name": "addr-api.example.com", "action": "unlimited", "match": {"host": "api.example.com"}},
    {"name": "addr-example.com-css-js-png", "action": "unlimited", "match": {"path": {"regex": "(?i)\\.(css|js|png)$"}}},
    {"name": "addr", "match": {"path": {"prefix": "/downloads/"}}, "limit_keys": ["ip:address"],
     "algorithm": "concurrency", "algorithm_config": {"limit": 2}}]}]}`

// The complete output for a configuration of the kind a site has: http
// zones and an inherited limit, two servers, a location with its own
// limit, an exact /health, a regex location, limit_conn and a dry run.
func TestAWholeNginxConfConverts(t *testing.T) {
	cfg, res := convertNginx(t, nginxConf)
	var got, want any
	if err := json.Unmarshal(res.Policy, &got); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(nginxConfPolicy), &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("the conversion makes\n%s", res.Policy)
	}
	expectLimits(t, cfg, res.Policy, map[string]string{
		"example.com /":                "perip",
		"www.example.com /login":       "login",
		"example.com /login/x.png":     "perip", // the regex location inherits the http limit: one bucket with the site's
		"example.com /health":          "apikey-example.com-health",
		"example.com /downloads/a.zip": "perip,addr",
		"example.com /downloads/a.png": "perip",
		"api.example.com /v1/x":        "apikey-api.example.com",
		"api.example.com /login":       "apikey-api.example.com",
		"other.example.org /login":     "login",
	})
	notesContain(t, res.Notes,
		"zone apikey is one state per key in nginx, whichever location uses it; its rules apikey-api.example.com, apikey-example.com-health each keep their own buckets",
		"perip (about 163840), apikey (about 163840)",
		"xff_trusted_hops", "normalize_path", "limit_conn counts connections")
	if len(res.Notes) != 6 {
		t.Errorf("%d notes, want 6:\n%s", len(res.Notes), strings.Join(res.Notes, "\n"))
	}
}

func TestTheSameConfigurationConvertsToTheSameBytes(t *testing.T) {
	first, err := Nginx([]byte(nginxConf), NginxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		again, _ := Nginx([]byte(nginxConf), NginxOptions{})
		if !bytes.Equal(first.Policy, again.Policy) || !slices.Equal(first.Notes, again.Notes) {
			t.Fatalf("two conversions differ:\n%s\n%s", first.Policy, again.Policy)
		}
	}
}

func FuzzNginx(f *testing.F) {
	f.Add([]byte(nginxConf))
	f.Add([]byte(randomNginx(rand.New(rand.NewPCG(3, 4)))))
	f.Add([]byte("geo $g { default 1; 10.0.0.0/8 0; }\nmap $g $k { 0 \"\"; 1 $binary_remote_addr; }\nlimit_req_zone $k zone=z:1m rate=1r/s;\nlimit_req zone=z burst=2 delay=1;\n"))
	f.Add([]byte(debianMain))
	f.Add([]byte("include loop.conf;\ninclude conf.d/*.conf;\nhttp { include /etc/nginx/sites-enabled/*; }\n"))
	// The files its includes can reach: the split layout and a file that
	// includes itself.
	files := fstest.MapFS{"loop.conf": {Data: []byte("include loop.conf;\n")}}
	for name, file := range debianLayout {
		files[name] = file
	}
	f.Fuzz(func(t *testing.T, conf []byte) {
		res, err := Nginx(conf, NginxOptions{Taken: []string{"default"}, Files: files})
		if err != nil {
			return
		}
		if _, err := policy.Parse(res.Policy); err != nil {
			t.Fatalf("a converted policy the parser refuses: %v\n%s", err, res.Policy)
		}
	})
}
