package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-rl/sluice/admin/telemetry"
)

const telToken = "test-telemetry-token-0123456789"

// fakeTokens is a telemetry token holder: one token, rotatable.
type fakeTokens struct {
	mu   sync.Mutex
	tok  string
	prev string
}

func (f *fakeTokens) Check(t string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return t != "" && (t == f.tok || t == f.prev)
}

func (f *fakeTokens) Rotate(_ context.Context, grace time.Duration) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.prev = ""
	if grace > 0 {
		f.prev = f.tok
	}
	f.tok = telemetry.GenerateToken()
	return f.tok, nil
}

func (f *fakeTokens) Info() telemetry.TokenInfo {
	f.mu.Lock()
	defer f.mu.Unlock()
	return telemetry.TokenInfo{Hint: f.tok[:4] + "…", Created: time.Unix(1700000000, 0)}
}

type telEnv struct {
	*env
	state   *telemetry.State
	metrics *telemetry.Metrics
	tokens  *fakeTokens
	clock   *testClock
}

type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *testClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func newTelEnv(t *testing.T, mod func(*Telemetry)) *telEnv {
	t.Helper()
	te := &telEnv{tokens: &fakeTokens{tok: telToken}, clock: &testClock{t: time.Unix(1763770000, 0)}}
	te.state = telemetry.NewState(telemetry.Options{Now: te.clock.Now})
	te.metrics = telemetry.NewMetrics(te.state)
	te.env = newEnv(t, func(c *Config) {
		c.Telemetry = &Telemetry{State: te.state, Tokens: te.tokens, Metrics: te.metrics,
			MetricsHandler: te.metrics.Handler(), MetricsURL: "/metrics", Now: te.clock.Now}
		if mod != nil {
			mod(c.Telemetry)
		}
	})
	return te
}

// report builds a report of node/vm with cumulative counters per rule and
// some buckets.
func report(node, vm string, seq uint64, allowed, rejected uint64, buckets ...telemetry.Bucket) string {
	r := telemetry.Report{
		V: 1, Node: node, VM: vm, VMStartMS: 1763770000000, Seq: seq, SentAtMS: 1763770000000 + int64(seq)*1000,
		IntervalMS: 1000, ConfigHash: "00000000000000aa",
		Rules:   []telemetry.RuleCounters{{Rule: "per-ip", Allowed: allowed, Rejected: rejected}},
		Buckets: buckets,
	}
	if r.Buckets == nil {
		r.Buckets = []telemetry.Bucket{}
	}
	b, _ := json.Marshal(r)
	return string(b)
}

func (te *telEnv) send(t *testing.T, token, contentType, body string) (*http.Response, map[string]any) {
	t.Helper()
	return te.call(t, "POST", "/api/v1/telemetry", token, contentType, body)
}

func TestTelemetryIngestStatuses(t *testing.T) {
	te := newTelEnv(t, nil)
	good := report("envoy-1", "a1", 1, 10, 2)

	// 401: no token, a wrong one, the admin token (it is not the telemetry token).
	for _, tok := range []string{"", "wrong-wrong-wrong-wrong", testToken} {
		resp, body := te.send(t, tok, "application/json", good)
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(resp.Header.Get("WWW-Authenticate"), `realm="sluice-telemetry"`) {
			t.Errorf("token %q: %d %v", tok, resp.StatusCode, body)
		}
	}
	// 415.
	for _, ct := range []string{"", "text/plain", "application/x-www-form-urlencoded"} {
		if resp, _ := te.send(t, telToken, ct, good); resp.StatusCode != http.StatusUnsupportedMediaType {
			t.Errorf("content type %q: %d", ct, resp.StatusCode)
		}
	}
	// 413: by Content-Length, and streamed without one.
	big := `{"v":1,"node":"` + strings.Repeat("x", telemetry.MaxBodyBytes) + `"}`
	if resp, body := te.send(t, telToken, "application/json", big); resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(fmt.Sprint(body["error"]), "1048576") {
		t.Errorf("too large: %d %v", resp.StatusCode, body)
	}
	req, _ := http.NewRequest("POST", te.srv.URL+"/api/v1/telemetry", io.MultiReader(strings.NewReader(big)))
	req.Header.Set("Authorization", "Bearer "+telToken)
	req.Header.Set("Content-Type", "application/json")
	req.ContentLength = -1
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("too large, chunked: %v %v", resp.StatusCode, err)
	}
	// A report of exactly the limit is read (and judged on its content).
	exact := `{"v":1,"node":"n","vm":"a","vm_start_ms":1,"seq":1,"sent_at_ms":2,"rules":[]}`
	exact += strings.Repeat(" ", telemetry.MaxBodyBytes-len(exact))
	if resp, _ := te.send(t, telToken, "application/json; charset=utf-8", exact); resp.StatusCode != http.StatusNoContent {
		t.Errorf("a report of exactly 1 MiB: %d", resp.StatusCode)
	}

	// 400: every problem, by path; nothing stored, not even the valid parts.
	before := te.state.Stats()
	bad := strings.Replace(report("envoy-2", "a b", 1, 10, 2, telemetry.Bucket{Rule: "per-ip", Identity: "k", Tokens: 9, Burst: 5, LastRefill: 1}), `"rejected":2`, `"rejected":-2`, 1)
	resp, body := te.send(t, telToken, "application/json", bad)
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("invalid: %d %v", resp.StatusCode, body)
	}
	var paths []string
	for _, e := range body["errors"].([]any) {
		paths = append(paths, e.(map[string]any)["path"].(string))
	}
	if strings.Join(paths, " ") != "vm rules[0].rejected buckets[0].tokens" || !strings.Contains(fmt.Sprint(body["error"]), "3 problems; nothing was stored") {
		t.Errorf("errors %v: %v", paths, body)
	}
	if after := te.state.Stats(); after.Nodes != before.Nodes || after.Accepted != before.Accepted || after.Buckets != before.Buckets || after.Rejected != before.Rejected+1 {
		t.Errorf("an invalid report changed the state: %+v -> %+v", before, after)
	}
	if resp, body := te.send(t, telToken, "application/json", "{"); resp.StatusCode != 400 || !strings.Contains(fmt.Sprint(body["errors"]), "not valid JSON") {
		t.Errorf("syntax: %d %v", resp.StatusCode, body)
	}

	// 204, then a duplicate (also 204, ignored).
	if resp, body := te.send(t, telToken, "application/json", good); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("valid report: %d %v", resp.StatusCode, body)
	}
	if resp, _ := te.send(t, telToken, "application/json", good); resp.StatusCode != http.StatusNoContent {
		t.Errorf("duplicate: %d", resp.StatusCode)
	}
	te.clock.Add(time.Second)
	te.send(t, telToken, "application/json", report("envoy-1", "a1", 2, 15, 3))
	te.clock.Add(time.Second)

	want := `
# HELP sluice_telemetry_reports_total Telemetry reports received by the admin, by result: accepted, duplicate (seq already seen), invalid (400), unauthorized (401), too_large (413), unsupported (415 media type), refused (a new node or VM beyond the telemetry bounds).
# TYPE sluice_telemetry_reports_total counter
sluice_telemetry_reports_total{result="accepted"} 3
sluice_telemetry_reports_total{result="duplicate"} 1
sluice_telemetry_reports_total{result="invalid"} 2
sluice_telemetry_reports_total{result="refused"} 0
sluice_telemetry_reports_total{result="too_large"} 2
sluice_telemetry_reports_total{result="unauthorized"} 3
sluice_telemetry_reports_total{result="unsupported"} 3
`
	if err := testutil.GatherAndCompare(te.metrics.Registry(), strings.NewReader(want), "sluice_telemetry_reports_total"); err != nil {
		t.Error(err)
	}

	// The API shows what was ingested.
	resp, ov := te.apiJSON(t, "GET", "/api/v1/telemetry?window=1m", "")
	if resp.StatusCode != 200 {
		t.Fatalf("GET telemetry: %d %v", resp.StatusCode, ov)
	}
	rules := ov["rules"].([]any)
	var perIP map[string]any
	for _, r := range rules {
		if r.(map[string]any)["rule"] == "per-ip" {
			perIP = r.(map[string]any)
		}
	}
	if perIP == nil || perIP["total"].(map[string]any)["allowed"] != 15.0 || perIP["total"].(map[string]any)["rejected"] != 3.0 {
		t.Errorf("per-ip: %v", perIP)
	}
}

func TestTelemetryAPIAuthAndMetrics(t *testing.T) {
	te := newTelEnv(t, nil)
	for _, p := range []string{"/api/v1/telemetry", "/api/v1/telemetry/token", "/metrics"} {
		for _, tok := range []string{"", telToken} {
			if resp, _ := te.call(t, "GET", p, tok, "", ""); resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("GET %s with %q: %d, want 401", p, tok, resp.StatusCode)
			}
		}
	}
	te.send(t, telToken, "application/json", report("envoy-1", "a1", 1, 7, 1))
	resp, body := te.call(t, "GET", "/metrics", testToken, "", "")
	raw := fmt.Sprint(body["_raw"])
	if resp.StatusCode != 200 || !strings.Contains(raw, `sluice_requests_total{decision="allowed",node="envoy-1",rule="per-ip"} 7`) {
		t.Errorf("/metrics: %d\n%s", resp.StatusCode, raw)
	}

	// Without a metrics handler on this listener, /metrics is not there.
	te2 := newTelEnv(t, func(tc *Telemetry) { tc.MetricsHandler = nil })
	if resp, _ := te2.call(t, "GET", "/metrics", testToken, "", ""); resp.StatusCode != http.StatusNotFound {
		t.Errorf("/metrics without a handler: %d", resp.StatusCode)
	}
}

func TestTelemetryTokenRotation(t *testing.T) {
	te := newTelEnv(t, nil)
	// API: rotate without grace: the old token stops at once.
	resp, body := te.apiJSON(t, "POST", "/api/v1/telemetry/token/rotate", `{"grace_seconds":0}`)
	newTok, _ := body["token"].(string)
	if _, graced := body["previous_valid_until"]; resp.StatusCode != 200 || !strings.HasPrefix(newTok, telemetry.TokenPrefix) || graced {
		t.Fatalf("rotate: %d %v", resp.StatusCode, body)
	}
	if r, _ := te.send(t, telToken, "application/json", report("n", "a", 1, 1, 0)); r.StatusCode != 401 {
		t.Errorf("old token after rotation: %d", r.StatusCode)
	}
	if r, _ := te.send(t, newTok, "application/json", report("n", "a", 1, 1, 0)); r.StatusCode != 204 {
		t.Errorf("new token: %d", r.StatusCode)
	}
	if r, _ := te.apiJSON(t, "POST", "/api/v1/telemetry/token/rotate", `{"grace_seconds":-1}`); r.StatusCode != 400 {
		t.Errorf("negative grace: %d", r.StatusCode)
	}
	if r, _ := te.apiJSON(t, "GET", "/api/v1/telemetry/token", ""); r.StatusCode != 200 {
		t.Errorf("token info: %d", r.StatusCode)
	}

	// Page: the form needs the session's CSRF token; the new token is shown once.
	c := login(t, te.env, "ops")
	page := get(t, c, te.srv.URL+"/telemetry")
	if !strings.Contains(page, `id="token-hint"`) || !strings.Contains(page, "/api/v1/telemetry") {
		t.Errorf("telemetry page:\n%s", page)
	}
	if r, _ := post(t, c, te.srv.URL+"/telemetry/token", url.Values{"grace": {"1"}}); r.StatusCode != http.StatusForbidden {
		t.Errorf("rotation without CSRF: %d", r.StatusCode)
	}
	cur := te.tokens.tok
	r, html := post(t, c, te.srv.URL+"/telemetry/token", url.Values{"csrf": {csrfOf(t, page)}, "grace": {"1"}})
	if r.StatusCode != 200 || te.tokens.tok == cur || !strings.Contains(html, te.tokens.tok) || !strings.Contains(html, "keeps working for 10m0s") {
		t.Errorf("rotation from the page: %d", r.StatusCode)
	}
	if again := get(t, c, te.srv.URL+"/telemetry"); strings.Contains(again, te.tokens.tok) {
		t.Error("the new token is shown again")
	}
	if !te.tokens.Check(cur) {
		t.Error("grace: the previous token was refused")
	}
}

func TestDashboardPage(t *testing.T) {
	te := newTelEnv(t, nil)
	for seq := uint64(1); seq <= 5; seq++ {
		body := report("envoy-1", "a1", seq, 10*seq, 3*seq,
			telemetry.Bucket{Rule: "per-ip", Identity: "ip:address=203.0.113.7", Tokens: 0.5, Burst: 10, LastRefill: 1763770000, Rejects: 3},
			telemetry.Bucket{Rule: "per-ip", Identity: "header:x-api-key=sk_l…9f3a", Tokens: 8, Burst: 10, LastRefill: 1763770000})
		if r, _ := te.send(t, telToken, "application/json", body); r.StatusCode != 204 {
			t.Fatal(r.StatusCode)
		}
		te.clock.Add(time.Second)
	}

	// Logging in without a destination lands on the dashboard.
	jar := newJar()
	c := noRedirect(jar)
	lp := get(t, c, te.srv.URL+"/login")
	resp, _ := post(t, c, te.srv.URL+"/login", url.Values{"csrf": {csrfOf(t, lp)}, "token": {testToken}, "name": {"ops"}, "next": {formValue(lp, "next")}})
	if loc := resp.Header.Get("Location"); loc != "/dashboard" {
		t.Errorf("landing after login: %q", loc)
	}

	page := get(t, c, te.srv.URL+"/dashboard")
	for _, want := range []string{
		`id="dash-live"`, `data-events="/dashboard/events?fragment=1&amp;window=5m"`, `data-rule="per-ip"`,
		`data-count="allowed">50<`, `data-count="rejected">15<`, `class="line allowed"`, `class="line rejected"`,
		`data-identity="ip:address=203.0.113.7"`, `class="fillbar low"`, `data-node="envoy-1"`, `aria-current="page">Dashboard`,
		`dashboard.js?v=`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("dashboard lacks %s", want)
		}
	}
	// The fragment is the live part alone.
	frag := get(t, c, te.srv.URL+"/dashboard?fragment=1&window=1m")
	if !strings.HasPrefix(frag, `<div id="dash-live"`) || strings.Contains(frag, "<html") || !strings.Contains(frag, "last 1m") {
		t.Errorf("fragment:\n%.300s", frag)
	}
	// Search: a substring, and the clear value of a masked key.
	for q, want := range map[string]string{"113.7": "ip:address=203.0.113.7", "sk_live_123": "header:x-api-key=sk_l…9f3a"} {
		f := get(t, c, te.srv.URL+"/dashboard?fragment=1&q="+url.QueryEscape(q))
		i := strings.Index(f, `id="search-results"`)
		if i < 0 || !strings.Contains(f[i:], `data-identity="`+want+`"`) {
			t.Errorf("search %q did not find %s", q, want)
		}
	}
	if f := get(t, c, te.srv.URL+"/dashboard?fragment=1&q=nothing-like-it"); !strings.Contains(f, `id="search-empty"`) {
		t.Error("an empty search result is not said")
	}
	if r, err := c.Get(te.srv.URL + "/dashboard?window=2h"); err != nil || r.StatusCode != 400 {
		t.Errorf("bad window: %v", r.StatusCode)
	}
	// Without a session, the fragment answers 401 (the script stops), the page redirects.
	if r, _ := noRedirect(nil).Get(te.srv.URL + "/dashboard?fragment=1"); r.StatusCode != 401 {
		t.Errorf("fragment without a session: %d", r.StatusCode)
	}
}

func TestDashboardWithoutTelemetry(t *testing.T) {
	e := newEnv(t, nil)
	c := login(t, e, "ops")
	if page := get(t, c, e.srv.URL+"/dashboard"); !strings.Contains(page, "Telemetry is not enabled") {
		t.Error("the dashboard does not say telemetry is off")
	}
	if r, _ := e.call(t, "POST", "/api/v1/telemetry", telToken, "application/json", "{}"); r.StatusCode != 401 {
		t.Errorf("ingest without telemetry: %d", r.StatusCode)
	}
}

func TestDashboardEventStream(t *testing.T) {
	saved := []time.Duration{eventsTick, eventsIdle}
	eventsTick, eventsIdle = 20*time.Millisecond, time.Hour
	t.Cleanup(func() { eventsTick, eventsIdle = saved[0], saved[1] })
	done := make(chan struct{})
	te := newTelEnv(t, func(tc *Telemetry) { tc.Done = done })
	c := login(t, te.env, "ops")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", te.srv.URL+"/dashboard/events?fragment=1&window=1m", nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("events: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	events := make(chan string, 16)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var ev bytes.Buffer
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "" && ev.Len() > 0:
				events <- ev.String()
				ev.Reset()
			case strings.HasPrefix(line, "data: "):
				ev.WriteString(strings.TrimPrefix(line, "data: "))
				ev.WriteByte('\n')
			}
		}
	}()
	next := func() string {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatal("the stream ended")
			}
			return ev
		case <-ctx.Done():
			t.Fatal("no event")
		}
		return ""
	}
	first := next() // the state's first generation
	if !strings.HasPrefix(first, `<div id="dash-live"`) {
		t.Fatalf("event data:\n%.200s", first)
	}
	te.send(t, telToken, "application/json", report("envoy-9", "a1", 1, 42, 0))
	te.clock.Add(2 * time.Second)
	var ev string
	for !strings.Contains(ev, `data-count="allowed">42<`) {
		ev = next()
	}
	if !strings.Contains(ev, `data-node="envoy-9"`) {
		t.Error("the update lacks the new node")
	}
	// Shutting down ends the stream.
	close(done)
	for range events {
	}
}

// The stream outlives the server's ReadTimeout and WriteTimeout.
func TestDashboardEventStreamOutlivesServerTimeouts(t *testing.T) {
	saved := []time.Duration{eventsTick, eventsIdle}
	eventsTick, eventsIdle = 50*time.Millisecond, 100*time.Millisecond
	t.Cleanup(func() { eventsTick, eventsIdle = saved[0], saved[1] })
	te := newTelEnv(t, nil)
	h, err := New(Config{Policies: te.svc, Auth: te.auth, Telemetry: &Telemetry{State: te.state, Tokens: te.tokens, Now: te.clock.Now}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ReadTimeout, srv.Config.WriteTimeout = 300*time.Millisecond, 300*time.Millisecond
	srv.Start()
	defer srv.Close()
	id, _, err := te.auth.Login(context.Background(), testToken, "ops")
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", srv.URL+"/dashboard/events?window=1m", nil)
	req.AddCookie(&http.Cookie{Name: sessionCookie, Value: id})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	start := time.Now()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	events := 0
	for sc.Scan() && time.Since(start) < 1200*time.Millisecond {
		if sc.Text() == "event: update" {
			events++
		}
	}
	if time.Since(start) < 1200*time.Millisecond || events < 5 {
		t.Errorf("the stream ended after %s with %d events: %v", time.Since(start), events, sc.Err())
	}
}

func newJar() http.CookieJar {
	j, _ := cookiejar.New(nil)
	return j
}

// formValue returns the value of the hidden input name in a page.
func formValue(html, name string) string {
	i := strings.Index(html, `name="`+name+`" value="`)
	if i < 0 {
		return ""
	}
	rest := html[i+len(`name="`+name+`" value="`):]
	return rest[:strings.IndexByte(rest, '"')]
}

// TestKeyRowWindowLabel: a window's fill shows the quota left of its limit;
// a token bucket's its tokens of its burst.
func TestKeyRowWindowLabel(t *testing.T) {
	now := time.Unix(1_763_770_000, 0)
	tb := keyRow(telemetry.KeyView{Rule: "r", Tokens: 3.5, Burst: 20, Seen: now}, now)
	fw := keyRow(telemetry.KeyView{Rule: "r", Tokens: 250, Burst: 1000, Algorithm: "fixed_window", Seen: now}, now)
	if tb.Tokens != "3.5 / 20" || fw.Tokens != "250 / 1,000 left" && fw.Tokens != "250 / 1000 left" {
		t.Errorf("labels %q, %q", tb.Tokens, fw.Tokens)
	}
	if fw.FillPct != "25 %" {
		t.Errorf("window fill %q, want 25 %%", fw.FillPct)
	}
}

// overflowReport is a report of envoy-1 whose rules per-ip and per-user
// have requests decided by an overflow limit, per-ip with identities
// sharing one, and whose rule calm has none.
func overflowReport(seq, overflowed, identities uint64) string {
	r := telemetry.Report{
		V: 1, Node: "envoy-1", VM: "a1", VMStartMS: 1763770000000, Seq: seq, SentAtMS: 1763770000000 + int64(seq)*1000,
		IntervalMS: 1000, Buckets: []telemetry.Bucket{},
		Rules: []telemetry.RuleCounters{
			{Rule: "per-ip", Allowed: 100 * seq, Rejected: seq, Overflowed: overflowed, OverflowIdentities: identities},
			{Rule: "per-user", Allowed: 10 * seq, Overflowed: seq},
			{Rule: "calm", Allowed: seq},
		},
	}
	b, _ := json.Marshal(r)
	return string(b)
}

// ruleCard returns the dashboard card of rule.
func ruleCard(t *testing.T, page, rule string) string {
	t.Helper()
	card := regexp.MustCompile(`(?s)<article class="rule-card" data-rule="` + regexp.QuoteMeta(rule) + `">.*?</article>`).FindString(page)
	if card == "" {
		t.Fatalf("no card for rule %q:\n%s", rule, page)
	}
	return card
}

func TestDashboardOverflow(t *testing.T) {
	te := newTelEnv(t, nil)
	for seq := uint64(1); seq <= 3; seq++ {
		if r, body := te.send(t, telToken, "application/json", overflowReport(seq, 40*seq, 1234)); r.StatusCode != 204 {
			t.Fatalf("report %d: %d %v", seq, r.StatusCode, body)
		}
		te.clock.Add(time.Second)
	}
	c := login(t, te.env, "ops")
	page := get(t, c, te.srv.URL+"/dashboard?fragment=1")

	perIP := ruleCard(t, page, "per-ip")
	for _, want := range []string{`class="rule-overflow sharing"`, `<b>12/s</b> decided by an overflow limit (120 in the window)`,
		`class="overflow-hint" data-overflow-identities="1,234"`, `≈1,234 identities</b> share an overflow limit`, `<code>max_keys</code> is too small`} {
		if !strings.Contains(perIP, want) {
			t.Errorf("per-ip lacks %s:\n%s", want, perIP)
		}
	}
	perUser := ruleCard(t, page, "per-user")
	if !strings.Contains(perUser, `<b>0.3/s</b> decided by an overflow limit (3 in the window)`) || strings.Contains(perUser, "overflow-hint") || strings.Contains(perUser, "max_keys") {
		t.Errorf("per-user: an overflow rate and no hint (no identities share a limit):\n%s", perUser)
	}
	if calm := ruleCard(t, page, "calm"); strings.Contains(calm, "overflow") {
		t.Errorf("calm: nothing about overflow limits:\n%s", calm)
	}

	// The JSON API and Prometheus carry the same numbers.
	_, api := te.apiJSON(t, "GET", "/api/v1/telemetry?window=1m", "")
	var overflow map[string]any
	for _, r := range api["rules"].([]any) {
		if r.(map[string]any)["rule"] == "per-ip" {
			overflow, _ = r.(map[string]any)["overflow"].(map[string]any)
		}
	}
	if overflow["total"] != 120.0 || overflow["window"] != 120.0 || overflow["rate"] != 12.0 || overflow["identities"] != 1234.0 {
		t.Errorf("API per-ip overflow: %v", overflow)
	}
	_, metrics := te.call(t, "GET", "/metrics", testToken, "", "")
	for _, want := range []string{`sluice_rule_overflowed_total{node="envoy-1",rule="per-ip"} 120`,
		`sluice_rule_overflow_identities{node="envoy-1",rule="per-ip"} 1234`, `sluice_rule_overflow_identities{node="envoy-1",rule="calm"} 0`} {
		if !strings.Contains(fmt.Sprint(metrics["_raw"]), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	// Once no identities share an overflow limit, the hint goes; the
	// rate stays while the window holds overflowed requests.
	te.send(t, telToken, "application/json", overflowReport(4, 160, 0))
	perIP = ruleCard(t, get(t, c, te.srv.URL+"/dashboard?fragment=1"), "per-ip")
	if strings.Contains(perIP, "overflow-hint") || strings.Contains(perIP, "identities") || !strings.Contains(perIP, `decided by an overflow limit (120 in the window)`) {
		t.Errorf("per-ip without identities sharing a limit:\n%s", perIP)
	}
}

func TestDashboardNoticesRefusalsAtTheTelemetryBounds(t *testing.T) {
	var st *telemetry.State
	te := newTelEnv(t, func(tel *Telemetry) {
		st = telemetry.NewState(telemetry.Options{MaxNodes: 1, Now: tel.Now})
		m := telemetry.NewMetrics(st)
		tel.State, tel.Metrics, tel.MetricsHandler = st, m, m.Handler()
	})
	c := login(t, te.env, "ops")
	if r, body := te.send(t, telToken, "application/json", report("envoy-1", "a1", 1, 5, 0)); r.StatusCode != 204 {
		t.Fatalf("first node: %d %v", r.StatusCode, body)
	}
	if page := get(t, c, te.srv.URL+"/dashboard?fragment=1"); strings.Contains(page, "bounds-notice") {
		t.Errorf("a notice before anything was refused:\n%s", page)
	}
	// A second node does not fit: refused, answered 204 like a duplicate.
	if r, body := te.send(t, telToken, "application/json", report("envoy-2", "b1", 1, 5, 0)); r.StatusCode != 204 {
		t.Fatalf("refused node: %d %v", r.StatusCode, body)
	}
	page := get(t, c, te.srv.URL+"/dashboard?fragment=1")
	if !strings.Contains(page, `class="flash flash-warn bounds-notice"`) || !strings.Contains(page, "1 new nodes, 0 VMs and 0 rules of VMs refused") {
		t.Errorf("no notice of the refused node:\n%s", page)
	}
	if strings.Contains(page, "envoy-2") {
		t.Error("the refused node is shown")
	}
	if tp := get(t, c, te.srv.URL+"/telemetry"); !strings.Contains(tp, "of 64 MiB (-telemetry-max-bytes); refused: 1 nodes, 0 VMs, 0 rules of VMs") {
		t.Errorf("the Telemetry page lacks the memory and refusals:\n%s", tp)
	}
	_, metrics := te.call(t, "GET", "/metrics", testToken, "", "")
	for _, want := range []string{`sluice_telemetry_reports_total{result="refused"} 1`, `sluice_telemetry_refused_total{what="node"} 1`} {
		if !strings.Contains(fmt.Sprint(metrics["_raw"]), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// The notice goes five minutes after the last refusal.
	te.clock.Add(boundsNoticeFor + time.Second)
	if page := get(t, c, te.srv.URL+"/dashboard?fragment=1"); strings.Contains(page, "bounds-notice") {
		t.Errorf("the notice outlived its five minutes")
	}
}
