package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluice-rl/sluice/plugin/wasmhost/wasmtest"
)

const telemetryToken = "e2e-telemetry-token-0123456789"

// The policy the simulated nodes run (v2); one node still runs v1.
const dashPolicy = `{"policies":[
  {"name":"edge","rules":[{"name":"per-ip","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":50,"burst":100}}]},
  {"name":"api","rules":[{"name":"api-key","match":{"path_prefix":"/api/"},"limit_keys":["header:x-api-key"],"algorithm":"token_bucket","algorithm_config":{"rps":10,"burst":20}}]},
  {"name":"auth","rules":[{"name":"login","mode":"shadow","match":{"path_prefix":"/login"},"limit_keys":["jwt:sub"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":5}}]}
]}`

// The throttled key, masked as the plugin shows header values, and the
// clear value an operator would paste into the search.
const throttledClear = "sk_live_9f3a2c77"

var throttledKey = "header:x-api-key=" + mask(throttledClear)

// mask is the plugin's masking of a header or JWT value: the first 4
// characters (for values longer than 8), "…#", and the low 32 bits of
// FNV-1a 64 of the value in hex.
func mask(v string) string {
	h := fnv.New64a()
	h.Write([]byte(v))
	shown := ""
	if r := []rune(v); len(r) > 8 {
		shown = string(r[:4])
	}
	return fmt.Sprintf("%s…#%08x", shown, h.Sum64()&0xffffffff)
}

// TestBrowserDashboardLive: the admin receives telemetry reports over HTTP
// (the wire format of docs/telemetry.md, from a simulator: three nodes of
// two VMs each, one report per VM per second), and a real Chromium shows
// the dashboard's numbers and charts changing without a reload, finds the
// throttled key by its clear value, and switches the chart span in place.
func TestBrowserDashboardLive(t *testing.T) {
	chromium := chromiumPath(t)
	root := wasmtest.ModuleRoot(t)
	bin := t.TempDir()
	adminBin := filepath.Join(bin, "ratelimit-admin")
	buildAdmin(t, root, adminBin)
	deadline := time.Now().Add(45 * time.Second)

	admin := start(t, "admin", root, adminBin,
		[]string{"-listen", "127.0.0.1:0", "-xds-listen", "off", "-data-dir", t.TempDir()},
		[]string{"SLUICE_ADMIN_TOKEN=" + token, "SLUICE_TELEMETRY_TOKEN=" + telemetryToken, "SLUICE_METRICS_LISTEN="},
		regexp.MustCompile(`dashboard (http://\S+)/\s+xDS`))
	adminURL := admin[1]

	// v1 is the default policy; save v2. Nodes report the hash of the
	// bytes the admin pushes, the version's JSON.
	v1 := policyJSON(t, adminURL)
	saveBody, _ := json.Marshal(map[string]any{"base_version": 1, "message": "three rules", "author": "e2e", "policy": json.RawMessage(dashPolicy)})
	if resp := apiDo(t, "POST", adminURL+"/api/v1/policy", token, saveBody); resp.StatusCode != http.StatusCreated {
		t.Fatalf("saving v2: %d", resp.StatusCode)
	}
	v2 := policyJSON(t, adminURL)

	ctx, stopSim := context.WithCancel(context.Background())
	sim := newSimulator(adminURL, map[string][]byte{"edge-1": v2, "edge-2": v2, "edge-3": v1})
	go sim.run(ctx, t)
	defer func() { stopSim(); sim.wait() }()
	sim.waitReports(t, 6)

	b := openBrowser(t, chromium, "dashboard-simulated")
	run, eval := b.run, b.eval
	b.loginToDashboard(adminURL, `article.rule-card[data-rule="api-key"] polyline.line.allowed`)
	// Numbers and chart change in place, twice.
	b.expectLiveUpdates(`document.querySelector('[data-count="allowed"]').textContent`,
		`document.querySelector('article.rule-card[data-rule="api-key"] polyline.line.allowed').getAttribute("points")`, 12*time.Second)
	mark := eval(`window.__sluiceMark`) // set by expectLiveUpdates: lost on a reload
	if nodes := eval(`Array.from(document.querySelectorAll("table.nodes-health tr[data-node]")).map(r => r.dataset.node).join(",")`); nodes != "edge-1,edge-2,edge-3" {
		t.Errorf("nodes %q", nodes)
	}
	if row := eval(`document.querySelector('tr[data-node="edge-3"] td.policy').textContent`); !strings.Contains(row, "v1") || !strings.Contains(row, "behind") {
		t.Errorf("edge-3 policy cell %q, want v1 behind", row)
	}
	if row := eval(`document.querySelector('tr[data-node="edge-1"] td.policy').textContent`); !strings.Contains(row, "v2") || !strings.Contains(row, "current") {
		t.Errorf("edge-1 policy cell %q, want v2 current", row)
	}

	// Search the throttled key by its clear value: found (the admin hashes
	// the value as the plugin masks it), without leaving the page.
	if got := b.searchKey(throttledClear, throttledKey); got == "0" || got == "" {
		t.Errorf("the throttled key shows %q rejects in the last minute", got)
	}
	if got := eval(`document.querySelector('#search-results .fillbar').getAttribute("class")`); !strings.Contains(got, "low") {
		t.Errorf("the throttled key's bucket bar is %q, want low", got)
	}
	if got := eval(`location.search`); !strings.Contains(got, "q=sk_live_9f3a2c77") {
		t.Errorf("the URL does not carry the search: %s", got)
	}
	if n := eval(`String(document.querySelectorAll("#search-results tr[data-identity]").length)`); n != "1" {
		t.Errorf("%s keys match the clear value, want exactly the throttled one", n)
	}
	// The search results stay through live updates.
	updates := eval(`document.getElementById("dash-live").dataset.updates`)
	run("search survives updates",
		chromedp.Poll[chromedp.Void](fmt.Sprintf(`document.getElementById("dash-live").dataset.updates !== %q &&
			document.querySelector('#search-results tr[data-identity="%s"]') !== null`, updates, throttledKey),
			chromedp.WithPollingTimeout(8*time.Second), chromedp.WithPollingInterval(100*time.Millisecond)),
	)
	// A substring search.
	run("search an address",
		chromedp.SetValue(chromedp.ID("key-q"), "203.0.113"),
		chromedp.Click(chromedp.CSS("#key-search button")),
		chromedp.WaitVisible(chromedp.CSS(`#search-results tr[data-identity="ip:address=203.0.113.7"]`)),
	)

	// Clear the search and show the last minute: the screenshot.
	b.showLastMinute()
	if got := eval(`window.__sluiceMark`); got != mark {
		t.Errorf("searching or changing the span reloaded the page")
	}
	// Let a little more history accumulate for the picture, within budget.
	for time.Until(deadline) > 12*time.Second && sim.seconds() < 26 {
		time.Sleep(250 * time.Millisecond)
	}
	// The picture in the docs comes from the full-stack test
	// (TestBrowserDashboardFullStack); this one is an artifact only.
	b.screenshot("dashboard-simulated", "")

	// The telemetry page shows the token's hint, never the token.
	run("telemetry page", chromedp.Navigate(adminURL+"/telemetry"), chromedp.WaitVisible(chromedp.ID("token-hint")))
	if hint := eval(`document.getElementById("token-hint").textContent`); hint != telemetryToken[:4]+"…" {
		t.Errorf("token hint %q", hint)
	}
	if strings.Contains(eval(`document.body.textContent`), telemetryToken) {
		t.Error("the telemetry page shows the token")
	}
	b.screenshot("telemetry", "")

	// The admin's numbers add up to what the simulator sent.
	stopSim()
	sim.wait()
	sent := sim.totals()
	var ov struct {
		Rules []struct {
			Rule  string            `json:"rule"`
			Total map[string]uint64 `json:"total"`
		} `json:"rules"`
	}
	resp := apiDo(t, "GET", adminURL+"/api/v1/telemetry?window=1m", token, nil)
	json.NewDecoder(resp.Body).Decode(&ov)
	resp.Body.Close()
	for _, r := range ov.Rules {
		want := sent[r.Rule]
		if r.Total["allowed"] != want[0] || r.Total["rejected"] != want[1] || r.Total["shadow_rejected"] != want[2] || r.Total["fail_open"] != want[3] {
			t.Errorf("rule %s: admin counted %v, the simulator sent %v", r.Rule, r.Total, want)
		}
	}
	if len(ov.Rules) != 3 {
		t.Errorf("%d rules in the admin's view", len(ov.Rules))
	}
	if time.Now().After(deadline) {
		t.Errorf("the dashboard browser test took longer than its 45 s budget")
	}
}

func buildAdmin(t *testing.T, root, out string) {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	cmd := exec.Command(goBin, "build", "-o", out, "./admin")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the admin: %v\n%s", err, b)
	}
}

func apiDo(t *testing.T, method, url, tok string, body []byte) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(method, url, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tok)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// policyJSON returns the current version's configuration as the admin
// pushes it (the API indents it; compacting restores the stored bytes).
func policyJSON(t *testing.T, adminURL string) []byte {
	t.Helper()
	resp := apiDo(t, "GET", adminURL+"/api/v1/policy", token, nil)
	defer resp.Body.Close()
	var v struct {
		Policy json.RawMessage `json:"policy"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := json.Compact(&b, v.Policy); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// simulator plays the plugins of three nodes, two VMs each: cumulative
// counters per rule, the hottest buckets, one report per VM per second.
type simulator struct {
	url    string
	hashes map[string]string // node -> config_hash
	done   chan struct{}

	mu      sync.Mutex
	sent    map[string][4]uint64 // rule -> what the admin accepted
	reports int
	secs    int
}

func newSimulator(url string, configs map[string][]byte) *simulator {
	s := &simulator{url: url, hashes: map[string]string{}, sent: map[string][4]uint64{}, done: make(chan struct{})}
	for node, cfg := range configs {
		h := fnv.New64a()
		h.Write(cfg)
		s.hashes[node] = fmt.Sprintf("%016x", h.Sum64())
	}
	return s
}

type simVM struct {
	node, id string
	startMS  int64
	seq      uint64
	counts   map[string]*[4]uint64
	dropped  uint64
}

var simRules = []string{"per-ip", "api-key", "login"}

func (s *simulator) run(ctx context.Context, t *testing.T) {
	defer close(s.done)
	var vms []*simVM
	now := time.Now()
	for _, node := range []string{"edge-1", "edge-2", "edge-3"} {
		for v := range 2 {
			vm := &simVM{node: node, id: fmt.Sprintf("%s%02x", strings.TrimPrefix(node, "edge-"), 0xa0+v), startMS: now.UnixMilli(), counts: map[string]*[4]uint64{}}
			for _, r := range simRules {
				vm.counts[r] = new([4]uint64)
			}
			if node == "edge-3" {
				vm.dropped = 2 // it could not reach the admin for a while
			}
			vms = append(vms, vm)
		}
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for sec := 0; ; sec++ {
		for i, vm := range vms {
			s.report(t, vm, sec, i)
		}
		s.mu.Lock()
		s.secs = sec + 1
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// traffic is the per-VM traffic of second sec: smooth waves with some
// texture, different per rule and node.
func traffic(rule string, sec, vm int) [4]uint64 {
	x := float64(sec) + float64(vm)*1.7
	wave := func(base, amp, period, phase float64) uint64 {
		v := base + amp*math.Sin(x/period+phase) + 0.15*amp*math.Sin(x*1.9+phase)
		return uint64(math.Max(0, math.Round(v)))
	}
	switch rule {
	case "per-ip":
		return [4]uint64{wave(140, 45, 5, 0), wave(6, 7, 3.5, 1), 0, 0}
	case "api-key":
		fail := uint64(0)
		if vm/2 == 2 && sec%7 == 3 {
			fail = 4 // edge-3's shared data hiccups
		}
		return [4]uint64{wave(70, 25, 6, 2), wave(18, 14, 4, 0.5), 0, fail}
	default: // login, a shadow-mode rule
		return [4]uint64{wave(22, 8, 7, 1), 0, wave(4, 4, 4.5, 2), 0}
	}
}

func (s *simulator) report(t *testing.T, vm *simVM, sec, i int) {
	deltas := map[string][4]uint64{}
	for _, r := range simRules {
		d := traffic(r, sec, i)
		deltas[r] = d
		for k := range d {
			vm.counts[r][k] += d[k]
		}
	}
	vm.seq++
	nowMS := time.Now().UnixMilli()
	refill := float64(nowMS) / 1000
	type bucket struct {
		Rule       string  `json:"rule"`
		Identity   string  `json:"identity"`
		Tokens     float64 `json:"tokens"`
		Burst      float64 `json:"burst"`
		LastRefill float64 `json:"last_refill"`
		Rejects    uint64  `json:"rejects"`
	}
	rej := deltas["api-key"][1]
	buckets := []bucket{
		{"api-key", throttledKey, 0.4 * float64(sec%3) / 2, 20, refill, rej*2/3 + 1},
		{"api-key", "header:x-api-key=" + mask("pk_test_41d00b5a"), 11 + float64(sec%5), 20, refill, rej / 3},
		{"api-key", "header:x-api-key=" + mask(fmt.Sprintf("sk_test_%02x7e5d", i)), 17, 20, refill, 0},
		{"per-ip", "ip:address=203.0.113.7", 7, 100, refill, deltas["per-ip"][1]},
		{"per-ip", "ip:address=198.51.100.23", 42 + float64(sec%4), 100, refill, 0},
		{"per-ip", fmt.Sprintf("ip:address=10.0.%d.%d", i, 20+sec%7), 88, 100, refill, 0},
		{"login", "jwt:sub=" + mask("user-4821"), 1.2, 5, refill, deltas["login"][2]},
	}
	rules := []map[string]any{}
	for _, r := range simRules {
		c := vm.counts[r]
		rules = append(rules, map[string]any{"rule": r, "allowed": c[0], "rejected": c[1], "shadow_rejected": c[2], "fail_open": c[3]})
	}
	body, _ := json.Marshal(map[string]any{
		"v": 1, "node": vm.node, "vm": vm.id, "vm_start_ms": vm.startMS, "seq": vm.seq, "sent_at_ms": nowMS,
		"interval_ms": 1000, "config_hash": s.hashes[vm.node], "rules": rules, "buckets": buckets,
		"reports_dropped": vm.dropped,
	})
	if !postTelemetry(t, s.url, body) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reports++
	for r, d := range deltas {
		tot := s.sent[r]
		for k := range d {
			tot[k] += d[k]
		}
		s.sent[r] = tot
	}
}

// postTelemetry sends one telemetry report to the admin at url, as a plugin
// does; it reports (as a test error) and returns false if it was refused.
func postTelemetry(t *testing.T, url string, body []byte) bool {
	req, _ := http.NewRequest("POST", url+"/api/v1/telemetry", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+telemetryToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("report: %v", err)
		return false
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Errorf("report refused: %d %s", resp.StatusCode, msg)
		return false
	}
	return true
}

func (s *simulator) waitReports(t *testing.T, n int) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		s.mu.Lock()
		got := s.reports
		s.mu.Unlock()
		if got >= n {
			return
		}
	}
	t.Fatalf("the admin did not accept %d reports in time", n)
}

func (s *simulator) seconds() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.secs
}

func (s *simulator) wait() { <-s.done }

func (s *simulator) totals() map[string][4]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string][4]uint64{}
	for k, v := range s.sent {
		out[k] = v
	}
	return out
}
