package e2e

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fullStackPolicy is version 1 of the full-stack test: a per-key limit that
// the throttled key exceeds, a shadow per-address limit, and telemetry to
// the admin with the token in the VM environment (never in the policy).
const fullStackPolicy = `{"mode": "enforce",
  "telemetry": {"cluster": "sluice_admin", "token_env": "SLUICE_TELEMETRY_TOKEN", "interval_ms": 1000},
  "policies": [
    {"name": "api", "rules": [{"name": "api-key", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
      "algorithm_config": {"tokens_per_second": 1, "burst": 5}}]},
    {"name": "edge", "rules": [{"name": "per-ip", "mode": "shadow", "limit_keys": ["ip:address"], "algorithm": "token_bucket",
      "algorithm_config": {"tokens_per_second": 20, "burst": 40}}]}
  ]}`

// fullStackThrottled sends 6 requests a second, the other keys 1: only it
// is throttled by api-key (1 per second, burst 5).
const fullStackThrottled = "sk_live_fullstack_hot1"

// TestBrowserDashboardFullStack runs the real stack: the admin binary
// (given the telemetry token, it pushes it in the ECDS vm_config
// environment), the gateway binary running the compiled plugin on two VMs,
// subscribed over ECDS and reporting telemetry to the admin through its
// callouts, the gateway's demo upstream, and traffic sent by this test.
// Chromium then sees the dashboard's numbers and charts change without a
// reload and finds the throttled key by its clear value. Its screenshot is
// docs/img/dashboard.png (SLUICE_UPDATE_SCREENSHOTS=1).
func TestBrowserDashboardFullStack(t *testing.T) {
	chromium := chromiumPath(t)
	root, bin, wasmFile := buildStack(t)
	policyFile, bootFile := filepath.Join(bin, "policy.json"), filepath.Join(bin, "boot.json")
	os.WriteFile(policyFile, []byte(fullStackPolicy), 0o644)
	os.WriteFile(bootFile, []byte(bootConfig), 0o644)
	// The budget covers the run, not the (cached) builds above.
	deadline := time.Now().Add(30 * time.Second)

	admin := start(t, "admin", root, filepath.Join(bin, "ratelimit-admin"),
		[]string{"-listen", "127.0.0.1:0", "-xds-listen", "127.0.0.1:0", "-data-dir", t.TempDir(), "-wasm-path", wasmFile,
			"-initial-policy", policyFile},
		[]string{"SLUICE_ADMIN_TOKEN=" + token, "SLUICE_TELEMETRY_TOKEN=" + telemetryToken, "SLUICE_METRICS_LISTEN="},
		regexp.MustCompile(`dashboard (http://\S+)/\s+xDS (\S+)`))
	adminURL, xdsAddr := admin[1], admin[2]
	gwURL := startGateway(t, root, bin, wasmFile, bootFile, xdsAddr, adminURL)
	tr := sendTraffic(t, gwURL)
	trafficStart := time.Now()

	b := openBrowser(t, chromium, "dashboard-fullstack")
	b.loginToDashboard(adminURL, `article.rule-card[data-rule="api-key"] polyline.line.allowed`)
	b.expectLiveUpdates(`document.querySelector('[data-count="allowed"]').textContent`,
		`document.querySelector('article.rule-card[data-rule="api-key"] polyline.line.allowed').getAttribute("points")`, 10*time.Second)
	if row := b.eval(`(document.querySelector('tr[data-node="e2e-gateway"] td.policy') || {textContent: ""}).textContent`); !strings.Contains(row, "v1") || !strings.Contains(row, "current") {
		t.Errorf("the gateway's policy cell is %q, want v1 current", row)
	}
	if n := b.eval(`String(document.querySelector('[data-count="rejected"]').textContent)`); n == "0" || n == "" {
		t.Errorf("rejected total %q", n)
	}

	// The throttled key, found by the value a customer would quote.
	identity := "header:x-api-key=" + mask(fullStackThrottled)
	if got := b.searchKey(fullStackThrottled, identity); got == "0" || got == "" {
		t.Errorf("the throttled key shows %q rejects in the last minute", got)
	}
	if n := b.eval(`String(document.querySelectorAll("#search-results tr[data-identity]").length)`); n != "1" {
		t.Errorf("%s keys match the throttled key's value, want 1", n)
	}
	if rule := b.eval(`document.querySelector('#search-results tr[data-identity]').dataset.rule`); rule != "api-key" {
		t.Errorf("the throttled key's row is of rule %q, want api-key", rule)
	}
	if strings.Contains(b.eval(`document.documentElement.outerHTML`), telemetryToken) {
		t.Error("the dashboard shows the telemetry token")
	}

	// What the test saw: the throttled key got 429s, the others none.
	codes := tr.snapshot()
	if codes[fullStackThrottled][429] == 0 || codes[fullStackThrottled][200] == 0 {
		t.Errorf("throttled key statuses %v", codes[fullStackThrottled])
	}
	for key, c := range codes {
		if key != fullStackThrottled && (c[429] != 0 || c[200] == 0) {
			t.Errorf("key %s statuses %v", key, c)
		}
	}

	// The picture for the docs: the last minute, no search, with some
	// history (within the budget).
	b.showLastMinute()
	for time.Until(deadline) > 5*time.Second && time.Since(trafficStart) < 18*time.Second {
		time.Sleep(250 * time.Millisecond)
	}
	b.screenshot("dashboard", "dashboard.png")
	if time.Now().After(deadline) {
		// Not a failure: timings are for benchmarks, and a loaded machine
		// is slow. Said so that a slow run is visible.
		t.Logf("the full-stack dashboard test took longer than its 30 s budget")
	}
}

// testTraffic sends requests through the gateway until stopped: the
// throttled key 6 times a second, three other keys once a second each, and
// counts the statuses per key.
type testTraffic struct {
	url  string
	done sync.WaitGroup

	mu    sync.Mutex
	codes map[string]map[int]int
}

func (tr *testTraffic) start(ctx context.Context) {
	tr.done.Add(1)
	go tr.run(ctx)
}

func (tr *testTraffic) run(ctx context.Context) {
	defer tr.done.Done()
	keys := []string{fullStackThrottled, "sk_live_fullstack_ok_a", fullStackThrottled, "sk_live_fullstack_ok_b",
		fullStackThrottled, "sk_live_fullstack_ok_c", fullStackThrottled, fullStackThrottled}
	tick := time.NewTicker(time.Second / time.Duration(len(keys)+1))
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		key := keys[i%len(keys)]
		req, _ := http.NewRequestWithContext(ctx, "GET", tr.url+"/api/items", nil)
		req.Header.Set("X-Api-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			continue
		}
		resp.Body.Close()
		tr.mu.Lock()
		if tr.codes[key] == nil {
			tr.codes[key] = map[int]int{}
		}
		tr.codes[key][resp.StatusCode]++
		tr.mu.Unlock()
	}
}

func (tr *testTraffic) wait() { tr.done.Wait() }

// startGateway runs the gateway binary on two VMs, subscribed to the
// admin's xDS at xdsAddr and reporting telemetry to adminURL (with the
// token the admin pushes: it knows none), plus the other clusters given
// as name=url; it waits until the gateway ACKs the admin's current version
// and returns the gateway's URL.
func startGateway(t *testing.T, root, bin, wasmFile, bootFile, xdsAddr, adminURL string, clusters ...string) string {
	t.Helper()
	args := []string{"-listen", "127.0.0.1:0", "-upstream", "demo", "-wasm", wasmFile, "-config", bootFile, "-xds", xdsAddr,
		"-node-id", "e2e-gateway", "-vms", "2", "-cluster", "sluice_admin=" + adminURL}
	for _, c := range clusters {
		args = append(args, "-cluster", c)
	}
	gw := start(t, "gateway", root, filepath.Join(bin, "ratelimit-gateway"), args,
		[]string{"SLUICE_TELEMETRY_TOKEN=", "SLUICE_VM_ENV="},
		regexp.MustCompile(`gateway is running: (http://\S+)`))
	waitAcked(t, adminURL, strconv.FormatInt(policyVersion(t, adminURL), 10)) // 1, or the policy file's version
	return gw[1]
}

// sendTraffic sends testTraffic to url until the test ends.
func sendTraffic(t *testing.T, url string) *testTraffic {
	ctx, stop := context.WithCancel(context.Background())
	tr := &testTraffic{url: url, codes: map[string]map[int]int{}}
	tr.start(ctx)
	t.Cleanup(func() { stop(); tr.wait() })
	return tr
}

func (tr *testTraffic) snapshot() map[string]map[int]int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	out := map[string]map[int]int{}
	for k, c := range tr.codes {
		out[k] = map[int]int{}
		for code, n := range c {
			out[k][code] = n
		}
	}
	return out
}
