package scenario

// The examples of docs/migrating.md, each read from the page and run as it
// stands: a configuration that replaces Envoy's local_ratelimit,
// envoyproxy/ratelimit, nginx's limit_req, Kong's rate-limiting, a
// Higress rate limit or an Envoy Gateway BackendTrafficPolicy must do what
// the page says it does.

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/plugin/wasmhost/wasmtest"
)

func init() {
	register(
		Case{Name: "MigratingFromEnvoyLocalRateLimit", Run: migratingEnvoyLocal},
		Case{Name: "MigratingFromEnvoyLocalRateLimitConverted", Run: migratingEnvoyLocalConverted},
		Case{Name: "MigratingFromEnvoyLocalRateLimitPerConnection", Run: migratingEnvoyLocalPerConnection},
		Case{Name: "MigratingFromEnvoyproxyRatelimit", Run: migratingEnvoyproxyRatelimit},
		Case{Name: "MigratingFromEnvoyproxyRatelimitConverted", Run: migratingEnvoyproxyRatelimitConverted},
		Case{Name: "MigratingFromEnvoyproxyRatelimitHitsFormat", Run: migratingRatelimitHitsFormat},
		Case{Name: "MigratingFromNginxLimitReq", Run: migratingNginx},
		Case{Name: "MigratingFromIngressNginxAnnotations", Run: migratingIngressNginx},
		Case{Name: "MigratingFromKongRateLimiting", Run: migratingKong},
		Case{Name: "MigratingFromHigressKeyRateLimit", Run: migratingHigressKey},
		Case{Name: "MigratingFromHigressClusterKeyRateLimit", Run: migratingHigressCluster},
		Case{Name: "MigratingFromHigressAITokenRateLimit", Run: migratingHigressAIToken},
		Case{Name: "MigratingFromEnvoyproxyRatelimitTokensCountedWhenTheStreamIsDone", Run: migratingRatelimitStreamDone},
		Case{Name: "MigratingFromEnvoyGatewayLocal", Run: migratingEnvoyGatewayLocal},
		Case{Name: "MigratingFromEnvoyGatewayGlobal", Run: migratingEnvoyGatewayGlobal},
	)
}

// MigrationGuide is the page whose examples these cases run, from the
// module root; MigrationExamples are the names of its examples that they run.
const MigrationGuide = "docs/migrating.md"

var MigrationExamples = []string{
	"envoy-local", "envoy-local-converted", "envoy-local-per-connection", "envoyproxy-ratelimit", "envoyproxy-ratelimit-converted", "envoyproxy-ratelimit-stream-done", "envoyproxy-ratelimit-hits-format", "nginx-limit-req", "ingress-nginx", "kong", "higress-key-rate-limit", "higress-cluster-key-rate-limit",
	"higress-ai-token-ratelimit", "envoy-gateway-local", "envoy-gateway-global",
}

// ExampleMarker is the comment before an example's block.
func ExampleMarker(name string) string { return "<!-- example: " + name + " -->" }

// DocExample returns the fenced block after ExampleMarker(name) in the page
// at path (from the module root).
func DocExample(path, name string) (string, error) {
	root, err := wasmtest.Root()
	if err != nil {
		return "", err
	}
	data, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		return "", err
	}
	_, after, ok := strings.Cut(string(data), ExampleMarker(name)+"\n```json\n")
	if !ok {
		return "", errors.New(path + ": no example " + name + " (a json block right after " + ExampleMarker(name) + ")")
	}
	block, _, ok := strings.Cut(after, "\n```")
	if !ok {
		return "", errors.New(path + ": example " + name + " is not closed")
	}
	return block, nil
}

// startExample starts the filter with the page's example name, the clock
// at t0.
func startExample(t *testing.T, start Starter, name string, t0 time.Time) Host {
	t.Helper()
	return startDocExample(t, start, MigrationGuide, name, t0)
}

// startDocExample starts the filter with the example name of page (from
// the module root), the clock at t0.
func startDocExample(t *testing.T, start Starter, page, name string, t0 time.Time) Host {
	t.Helper()
	cfg, err := DocExample(page, name)
	if err != nil {
		t.Fatal(err)
	}
	return mustStart(t, start, Options{Config: []byte(cfg), Start: t0})
}

// lastOf sends n copies of r and returns the last answer, failing unless
// the n-1 before it were all admitted.
func lastOf(t *testing.T, h Host, n int, r Request) Response {
	t.Helper()
	res := many(t, h, 0, repeat(r, n))
	for i, x := range res[:n-1] {
		if x.Rejected {
			t.Fatalf("request %d of %d rejected (status %d)", i+1, n, x.Status)
		}
	}
	return res[n-1]
}

var noon = time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)

func migratingEnvoyLocal(t *testing.T, start Starter) {
	h := startExample(t, start, "envoy-local", noon)
	key := req("x-api-key", "k")
	passed, rejected, held := burst(t, h, 11, key)
	if len(passed) != 10 || len(rejected) != 1 || len(held) != 0 {
		t.Fatalf("at once: %d passed, %d rejected, %d held; want max_tokens 10 passed", len(passed), len(rejected), len(held))
	}
	wantRejection(t, "over the bucket", rejected[0], 429, "local_rate_limited", "content-type", "text/plain; charset=utf-8")
	if ra := atoi(t, "retry-after", header(rejected[0].ResponseHeaders, "retry-after")); ra < 1 {
		t.Errorf("Retry-After %d", ra)
	}
	// tokens_per_fill 5 per fill_interval 1s: a token every 200 ms.
	h.Advance(200 * time.Millisecond)
	if got := admitted(t, h, 2, key); got != 1 {
		t.Errorf("200 ms later: %d of 2 admitted, want 1", got)
	}
	noRecoveredPanics(t, h)
}

// migratingEnvoyLocalPerConnection: local_rate_limit_per_downstream_connection
// converted, 40 at once on each connection.
func migratingEnvoyLocalPerConnection(t *testing.T, start Starter) {
	h := startExample(t, start, "envoy-local-per-connection", noon)
	wantRejection(t, "a connection's 41st at once", lastOf(t, h, 41, req("@connection", "3")), 429, "local_rate_limited",
		"ratelimit-policy", `"per_connection";q=40;w=2`)
	if got := admitted(t, h, 41, req("@connection", "4")); got != 40 {
		t.Errorf("another connection from the same address: %d of 41 admitted at once, want its 40", got)
	}
	noRecoveredPanics(t, h)
}

// migratingEnvoyLocalConverted runs what the converter makes of a
// bootstrap: a listener's bucket of 200, /api's own 1,000 and 20 per key
// (400 for a partner), /health not limited.
func migratingEnvoyLocalConverted(t *testing.T, start Starter) {
	h := startExample(t, start, "envoy-local-converted", noon)
	api := func(key string) Request {
		return req(":path", "/api/items", ":authority", "shop.example.com", "x-api-key", key)
	}
	wantRejection(t, "a key's 21st at once", lastOf(t, h, 21, api("k1")), 429, "local_rate_limited",
		"ratelimit-policy", `"api-api_key";q=20;w=2`)
	if got := admitted(t, h, 401, api("partner-7f3a")); got != 400 {
		t.Errorf("the partner: %d of 401 admitted at once, want its 400", got)
	}
	// The route's 1,000 hold every key: 20 and 400 taken, 580 left.
	for i := range 29 {
		if got := admitted(t, h, 20, api("key-"+strconv.Itoa(i))); got != 20 {
			t.Fatalf("key %d: %d of 20 admitted", i, got)
		}
	}
	wantRejection(t, "the route's 1,001st at once", do(t, h, api("key-29")), 429, "local_rate_limited",
		"ratelimit-policy", `"api";q=1000;w=2`)
	// Not from the listener's bucket, which /api does not take from.
	site := req(":path", "/", ":authority", "shop.example.com")
	wantRejection(t, "the site's 201st at once", lastOf(t, h, 201, site), 429, "local_rate_limited",
		"ratelimit-policy", `"http_local_rate_limiter";q=200;w=2`)
	if got := admitted(t, h, 300, req(":path", "/health", ":authority", "shop.example.com")); got != 300 {
		t.Errorf("/health: %d of 300 admitted, want all", got)
	}
	noRecoveredPanics(t, h)
}

func migratingEnvoyproxyRatelimit(t *testing.T, start Starter) {
	h := startExample(t, start, "envoyproxy-ratelimit", noon.Add(30*time.Second))
	wantRejection(t, "the revoked key", do(t, h, req("@ip", "192.0.2.1:1", "x-api-key", "revoked-key")), 429,
		`{"error":"denied","rule":"revoked"}`, "x-ratelimit-reason", "denied")

	// 60 a minute per address, in the minute aligned to the clock.
	addr := req("@ip", "192.0.2.2:1", "x-api-key", "k1")
	wantRejection(t, "the 61st of the minute", lastOf(t, h, 61, addr), 429, `{"error":"rate_limited","rule":"address-minute",...`,
		"x-ratelimit-reason", "fixed_window_exceeded", "ratelimit-policy", `"address-minute";q=60;w=60`)
	if got := metric(h, "sluice.rule.key-hour.allowed"); got != 60 {
		t.Errorf("key-hour counted %d requests of key k1, want its 60 allowed", got)
	}
	h.Advance(30 * time.Second) // 12:01:00: a new minute
	if got := admitted(t, h, 60, addr); got != 60 {
		t.Errorf("the next minute: %d of 60 admitted", got)
	}

	// The batch key has no hourly limit, but its address still has one.
	batch := req("@ip", "192.0.2.3:1", "x-api-key", "internal-batch")
	if got := admitted(t, h, 61, batch); got != 60 {
		t.Errorf("the batch key: %d of 61 admitted, want the address's 60", got)
	}
	if got := metric(h, "sluice.rule.key-hour.allowed"); got != 120 {
		t.Errorf("key-hour counted %d requests, want only key k1's 120 (not the batch key's)", got)
	}
	noRecoveredPanics(t, h)
}

func migratingNginx(t *testing.T, start Starter) {
	h := startExample(t, start, "nginx-limit-req", noon)
	at := func(path string) Request { return req("@ip", "198.51.100.7:1", ":path", path) }

	// burst=20 nodelay: 21 at once, then one every 100 ms.
	passed, rejected, held := burst(t, h, 22, at("/api/items"))
	if len(passed) != 21 || len(rejected) != 1 || len(held) != 0 {
		t.Fatalf("/api/: %d passed, %d rejected, %d held; want 21, 1, 0", len(passed), len(rejected), len(held))
	}
	h.Advance(100 * time.Millisecond) // exactly when the token is due
	if got := admitted(t, h, 2, at("/api/items")); got != 1 {
		t.Errorf("/api/ 100 ms later: %d of 2 admitted, want 1", got)
	}
	// 1r/s burst=5, queued: one at once, five paced a second apart.
	nginxQueue(t, h, at("/upload/f"), 1, []time.Duration{1000, 2000, 3000, 4000, 5000})
	// 2r/s burst=10 delay=3: four at once, seven paced half a second apart.
	nginxQueue(t, h, at("/search/q"), 4, []time.Duration{500, 1000, 1500, 2000, 2500, 3000, 3500})
	noRecoveredPanics(t, h)
}

// migratingEnvoyproxyRatelimitConverted: the policy the admin converts
// from the guide's envoyproxy/ratelimit configuration (checked against the
// converter by admin/migrate's TestTheMigrationGuideShowsTheConversionsOutput):
// 60 a minute per address; per key 1,000 an hour, acme 50,000, the revoked
// key refused, the batch key not limited by the per-key policy.
func migratingEnvoyproxyRatelimitConverted(t *testing.T, start Starter) {
	h := startExample(t, start, "envoyproxy-ratelimit-converted", noon)
	key := func(addr, k string) Request { return req("@ip", addr+":1", "x-api-key", k) }
	for i, k := range []string{"acme", "beta", "internal-batch"} {
		if res := do(t, h, key("198.51.100."+strconv.Itoa(i+1), k)); res.Rejected {
			t.Fatalf("%s rejected", k)
		}
	}
	// The per-key rule took acme (with its override) and beta, not the
	// batch key; the per-address rule all three.
	wantMetrics(t, h, map[string]uint64{"sluice.rule.api_key.allowed": 2, "sluice.rule.api_key.overridden": 1,
		"sluice.rule.remote_address.allowed": 3})
	// beta's 1,000 an hour, from addresses that stay under 60 a minute.
	for i := range 20 {
		admitted(t, h, 50, key("192.0.2."+strconv.Itoa(i+1), "beta"))
	}
	if res := do(t, h, key("192.0.2.100", "beta")); !res.Rejected {
		t.Error("beta's 1,001st request of the hour was admitted")
	} else {
		wantHeaders(t, "beta over its hour", res.ResponseHeaders, "ratelimit-policy", `"api_key";q=1000;w=3600`)
	}
	if res := do(t, h, key("198.51.100.99", "revoked-key")); !res.Rejected || res.Status != 429 {
		t.Errorf("the revoked key: rejected %v status %d, want 429", res.Rejected, res.Status)
	}
	// 60 a minute from one address, whatever the key.
	if got := admitted(t, h, 61, key("203.0.113.1", "internal-batch")); got != 60 {
		t.Errorf("one address: %d of 61 admitted in a minute, want 60", got)
	}
	noRecoveredPanics(t, h)
}

// migratingRatelimitHitsFormat: hits read from x-cost are each request's
// cost in the key's window; a request without it is not limited.
func migratingRatelimitHitsFormat(t *testing.T, start Starter) {
	h := startExample(t, start, "envoyproxy-ratelimit-hits-format", noon)
	costing := req("x-api-key", "acme", "x-cost", "30")
	if got := admitted(t, h, 4, costing); got != 3 {
		t.Errorf("acme at 30 a request: %d of 4 admitted, want 3 (90 of 100)", got)
	}
	if res := do(t, h, req("x-api-key", "acme", "x-cost", "10")); res.Rejected {
		t.Error("acme's last 10 of the minute refused")
	}
	if got := admitted(t, h, 50, req("x-api-key", "acme")); got != 50 {
		t.Errorf("acme without x-cost: %d of 50 admitted, want all (no descriptor, no limit)", got)
	}
	if res := do(t, h, req("x-api-key", "acme", "x-cost", "1")); !res.Rejected {
		t.Error("acme's 101st unit of the minute admitted")
	}
	noRecoveredPanics(t, h)
}

// migratingIngressNginx: an Ingress's limit-rps (burst rps × multiplier,
// nodelay) and limit-connections, its whitelist and its host.
func migratingIngressNginx(t *testing.T, start Starter) {
	h := startExample(t, start, "ingress-nginx", noon)
	from := func(addr, host string) Request { return req("@ip", addr+":1", ":authority", host) }
	client := from("198.51.100.7", "shop.example.com")

	passed, rejected, held := burst(t, h, 17, client)
	if len(passed) != 16 || len(rejected) != 1 || len(held) != 0 || rejected[0].Status != 503 {
		t.Fatalf("one client at once: %d passed, %d rejected, %d held; want 16, 1 (503), 0", len(passed), len(rejected), len(held))
	}
	h.Advance(200 * time.Millisecond)
	if got := admitted(t, h, 2, client); got != 1 {
		t.Errorf("200 ms later: %d of 2 admitted, want 1", got)
	}
	for _, r := range []Request{from("10.1.2.3", "shop.example.com"), from("198.51.100.7", "other.example.com")} {
		if got := admitted(t, h, 40, r); got != 40 {
			t.Errorf("%s for %s: %d of 40 admitted; the Ingress's limits do not apply to it", header(r.Headers, "@ip"), header(r.Headers, ":authority"), got)
		}
	}

	// Ten in flight from another client, the eleventh refused, and its
	// token given back.
	other := from("203.0.113.5", "shop.example.com")
	other.HoldUpstream = true
	for i := range 10 {
		if res := do(t, h, other); res.Rejected || res.Stream == nil {
			t.Fatalf("in flight %d: rejected %v", i+1, res.Rejected)
		}
	}
	other.HoldUpstream = false
	if res := do(t, h, other); !res.Rejected || res.Status != 503 {
		t.Fatalf("an 11th in flight: rejected %v status %d, want 503", res.Rejected, res.Status)
	}
	if n := metric(h, "sluice.rule.shop-rps.allowed"); n != 10+1+16 {
		t.Errorf("shop-rps allowed %d; want 27 (the refused 11th in flight takes no token)", n)
	}
	noRecoveredPanics(t, h)
}

// nginxQueue sends a burst of one more than nginx takes (1 + burst): now
// pass at once, the others are held until their times (ms), the last is
// rejected.
func nginxQueue(t *testing.T, h Host, r Request, now int, heldFor []time.Duration) {
	t.Helper()
	n := now + len(heldFor) + 1
	passed, rejected, held := burst(t, h, n, r)
	if len(passed) != now || len(held) != len(heldFor) || len(rejected) != 1 {
		t.Fatalf("%s: %d passed, %d held, %d rejected; want %d, %d, 1", header(r.Headers, ":path"),
			len(passed), len(held), len(rejected), now, len(heldFor))
	}
	settled := stepUntilSettled(t, h, held, 50*time.Millisecond, heldFor[len(heldFor)-1]*time.Millisecond)
	for i, s := range held {
		if settled[i] != heldFor[i]*time.Millisecond {
			t.Errorf("%s: held request %d went at %v, want %v", header(r.Headers, ":path"), i+1, settled[i], heldFor[i]*time.Millisecond)
		}
		if res, err := s.Complete(); err != nil || res.Rejected {
			t.Fatalf("completing held request %d: rejected %v, %v", i+1, res.Rejected, err)
		}
	}
}

func migratingKong(t *testing.T, start Starter) {
	h := startExample(t, start, "kong", noon)
	key := req("@ip", "203.0.113.9:1", "x-api-key", "k")
	kongMessage := `{"message":"API rate limit exceeded"}`
	// 100 a minute, for ten minutes: the hour's 1,000.
	for m := range 10 {
		fields := []string{"content-type", "application/json", "ratelimit-remaining", "0"}
		if m < 9 { // in the tenth minute the hour is used up too
			fields = append(fields, "ratelimit-policy", `"global-minute";q=100;w=60`)
		}
		wantRejection(t, "the 101st of a minute", lastOf(t, h, 101, key), 429, kongMessage, fields...)
		if m < 9 {
			h.Advance(time.Minute)
		}
	}
	h.Advance(time.Minute) // 12:10: a new minute, but the hour is used up
	res := do(t, h, key)
	wantRejection(t, "the 1,001st of the hour", res, 429, kongMessage, "ratelimit-policy", `"global-hour";q=1000;w=3600`)
	if ra := atoi(t, "retry-after", header(res.ResponseHeaders, "retry-after")); ra < 50*60 {
		t.Errorf("Retry-After %d, want at least the 50 minutes to 13:00", ra)
	}
	// Without a key, the client address is limited the same way.
	if got := admitted(t, h, 101, req("@ip", "203.0.113.9:1")); got != 100 {
		t.Errorf("without a key: %d of 101 admitted, want the address's 100", got)
	}
	noRecoveredPanics(t, h)
}

func migratingHigressKey(t *testing.T, start Starter) {
	h := startExample(t, start, "higress-key-rate-limit", noon)
	if got := admitted(t, h, 200, req("x-api-key", "unlisted")); got != 200 {
		t.Errorf("an unlisted key: %d of 200 admitted, want all (no rule names it)", got)
	}
	trial := req("x-api-key", "trial-key")
	wantRejection(t, "the trial key's second request in a second", lastOf(t, h, 2, trial), 429, "Too many requests",
		"content-type", "text/plain; charset=utf-8")
	h.Advance(time.Second)
	if got := admitted(t, h, 2, trial); got != 1 {
		t.Errorf("the next second: %d of 2 admitted, want 1", got)
	}
	if got := admitted(t, h, 101, req("x-api-key", "gold-key")); got != 100 {
		t.Errorf("the gold key: %d of 101 admitted in a minute, want 100", got)
	}
	noRecoveredPanics(t, h)
}

func migratingHigressCluster(t *testing.T, start Starter) {
	h := startExample(t, start, "higress-cluster-key-rate-limit", noon)
	alpha := req(":path", "/v1/items?apikey=alpha")
	wantRejection(t, "an a-key's 11th in a second", lastOf(t, h, 11, alpha), 503,
		"Too many requests", "ratelimit-policy", `"apikey-a";q=10;w=1`)
	if got := admitted(t, h, 101, req(":path", "/v1/items?apikey=beta")); got != 100 {
		t.Errorf("another key: %d of 101 admitted in a minute, want the 100 of the \"*\" item", got)
	}
	noRecoveredPanics(t, h)
}

// migratingHigressAIToken runs the guide's ai-token-ratelimit conversion
// as -scope local writes it (one process's budget); the same rule global
// is GlobalBudgetChargedFromResponses.
func migratingHigressAIToken(t *testing.T, start Starter) {
	cfg, err := DocExample(MigrationGuide, "higress-ai-token-ratelimit")
	if err != nil {
		t.Fatal(err)
	}
	h := mustStart(t, start, Options{Config: []byte(asLocal(t, cfg)), Start: noon})
	used := func(k, tokens string) Request {
		return llmAnswer("/v1/chat/completions", k, "application/json", `{"usage":{"total_tokens":`+tokens+`}}`)
	}
	admittedLeaving(t, h, "the first call", used("k", "600"), "1000")
	admittedLeaving(t, h, "a call with 400 tokens left", used("k", "600"), "400")
	// The refill takes 12 s to pay 200 tokens back.
	wantRefusedInDebt(t, h, "200 tokens in debt", used("k", "1"), 12, 13)
	admittedLeaving(t, h, "another key", used("other", "1"), "1000")
	noRecoveredPanics(t, h)
}

// migratingRatelimitStreamDone runs the guide's conversion of Envoy AI
// Gateway's pair of rate_limits entries: each user's tokens per minute as
// a token bucket charged from the answer's usage, acme's per day as a
// calendar quota.
func migratingRatelimitStreamDone(t *testing.T, start Starter) {
	h := startExample(t, start, "envoyproxy-ratelimit-stream-done", noon)
	used := func(user, tokens string) Request {
		r := req(":path", "/v1/chat/completions", "x-user-id", user)
		r.ResponseHeaders = []Header{{":status", "200"}, {"content-type", "application/json"}}
		r.ResponseBody = [][]byte{[]byte(`{"usage":{"prompt_tokens":10,"total_tokens":` + tokens + `}}`)}
		return r
	}
	admittedLeaving(t, h, "a user's first call", used("u1", "5000"), "6000")
	admittedLeaving(t, h, "a call with 1,000 tokens left", used("u1", "2000"), "1000")
	// The refill of 100 a second takes 10 s to pay 1,000 tokens back, and
	// Retry-After adds its jitter.
	res := wantRefusedInDebt(t, h, "1,000 tokens in debt", used("u1", "1"), 10, 16)
	// As Envoy's ratelimit filter, the refusal says so to an Envoy calling this one.
	wantHeaders(t, "the refusal", res.ResponseHeaders, "x-envoy-ratelimited", "true")
	admittedLeaving(t, h, "another user", used("u2", "1"), "6000")

	// acme's day: a million tokens, then refused until midnight UTC.
	wantAdmitted(t, h, "acme's first call", used("acme", "999999"))
	wantAdmitted(t, h, "acme's call with one token left", used("acme", "5"))
	res = do(t, h, used("acme", "1"))
	if !res.Rejected || header(res.ResponseHeaders, "retry-after") != "43200" {
		t.Fatalf("acme over its day: rejected %v, retry-after %q; want refused until midnight, 43200 s", res.Rejected,
			header(res.ResponseHeaders, "retry-after"))
	}
	noRecoveredPanics(t, h)
}

// asLocal is a configuration with its global rules (top-level, or of its
// policies) made local and its fleet block removed.
func asLocal(t *testing.T, cfg string) string {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal([]byte(cfg), &doc); err != nil {
		t.Fatal(err)
	}
	if _, ok := doc["fleet"]; !ok {
		t.Fatal("the example has no fleet block: it is local already")
	}
	delete(doc, "fleet")
	rules, _ := doc["rules"].([]any)
	policies, _ := doc["policies"].([]any)
	for _, p := range policies {
		if m, ok := p.(map[string]any); ok {
			more, _ := m["rules"].([]any)
			rules = append(rules, more...)
		}
	}
	for _, r := range rules {
		if m, ok := r.(map[string]any); ok {
			delete(m, "scope")
		}
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// migratingEnvoyGatewayLocal: the guide's HTTPRoute policy, 10 a second
// per API key and the route's default bucket of 100 a second for the
// requests without one; other hosts and paths not limited.
func migratingEnvoyGatewayLocal(t *testing.T, start Starter) {
	h := startExample(t, start, "envoy-gateway-local", noon)
	at := func(host, path string, kv ...string) Request {
		return req(append([]string{":authority", host, ":path", path}, kv...)...)
	}
	key := at("api.example.com", "/v1/orders", "x-api-key", "k1")
	wantRejection(t, "a key's 11th at once", lastOf(t, h, 11, key), 429, `{"error":"rate_limited","rule":"shop-api-rule-0",...`,
		"x-ratelimit-limit", "10", "ratelimit-policy", `"shop-api-rule-0";q=10;w=1`)
	h.Advance(100 * time.Millisecond)
	if got := admitted(t, h, 2, key); got != 1 {
		t.Errorf("100 ms later: %d of 2 admitted, want 1", got)
	}
	// Keyed requests took nothing from the default bucket: its 100 are
	// whole for the requests without a key.
	anon := at("api.example.com", "/v1")
	wantRejection(t, "the 101st without a key", lastOf(t, h, 101, anon), 429, `{"error":"rate_limited","rule":"shop-api-default",...`,
		"ratelimit-policy", `"shop-api-default";q=100;w=1`)
	if got := admitted(t, h, 10, at("api.example.com", "/v1/orders", "x-api-key", "k2")); got != 10 {
		t.Errorf("another key while the default bucket is empty: %d of 10 admitted", got)
	}
	for _, r := range []Request{at("api.example.com", "/v10"), at("www.example.com", "/v1/orders")} {
		if got := admitted(t, h, 150, r); got != 150 {
			t.Errorf("%s%s: %d of 150 admitted; not the route's", header(r.Headers, ":authority"), header(r.Headers, ":path"), got)
		}
	}
	noRecoveredPanics(t, h)
}

// migratingEnvoyGatewayGlobal runs the guide's global conversion as
// -scope local writes it (one process's counts): a user's hourly token
// budget for one model, charged from the answers, and 600 requests a
// minute per address on each Envoy route.
func migratingEnvoyGatewayGlobal(t *testing.T, start Starter) {
	cfg, err := DocExample(MigrationGuide, "envoy-gateway-global")
	if err != nil {
		t.Fatal(err)
	}
	h := mustStart(t, start, Options{Config: []byte(asLocal(t, cfg)), Start: noon})
	call := func(user, model, route, tokens string) Request {
		r := llmAnswer("/v1/chat/completions", "k", "application/json", `{"usage":{"total_tokens":`+tokens+`}}`)
		r.Headers = append(r.Headers, Header{"x-user-id", user}, Header{"x-ai-eg-model", model}, Header{"@route", route})
		return r
	}
	const route = "httproute/ai/chat/rule/0/match/0/llm_example_com"
	admittedLeaving(t, h, "the first call", call("u1", "gpt-4o-mini", route, "60000"), "100000")
	admittedLeaving(t, h, "a call with 40,000 tokens left", call("u1", "gpt-4o-mini", route, "50000"), "40000")
	res := do(t, h, call("u1", "gpt-4o-mini", route, "1"))
	if !res.Rejected || res.Status != 429 {
		t.Fatalf("10,000 tokens over the hour's budget: rejected %v status %d, want 429", res.Rejected, res.Status)
	}
	if ra := atoi(t, "retry-after", header(res.ResponseHeaders, "retry-after")); ra != 3600 {
		t.Errorf("retry-after %d, want the hour to 13:00", ra)
	}
	admittedLeaving(t, h, "another user", call("u2", "gpt-4o-mini", route, "1"), "100000")
	if res := do(t, h, call("u1", "gpt-4o", route, "1")); res.Rejected {
		t.Error("another model is not under the budget")
	}
	// 600 a minute per address on one route; another route counts apart.
	other := req(":path", "/v1/models", "@route", "httproute/ai/models/rule/0/match/0/llm_example_com")
	if got := admitted(t, h, 601, other); got != 600 {
		t.Errorf("one address on one route: %d of 601 admitted in a minute, want 600", got)
	}
	if got := admitted(t, h, 10, req(":path", "/v1/files", "@route", "httproute/ai/files/rule/0/match/0/llm_example_com")); got != 10 {
		t.Errorf("the same address on another route: %d of 10 admitted", got)
	}
	noRecoveredPanics(t, h)
}
