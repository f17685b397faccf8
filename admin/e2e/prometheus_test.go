package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/admin/auth"
	"github.com/sluice-rl/sluice/admin/fleet/fleettest"
	"github.com/sluice-rl/sluice/deploy/monitoringtest"
	"github.com/sluice-rl/sluice/internal/poll"
)

// monitoredPolicy has a rule that the throttled key exceeds (and is
// blocked by), a shadow
// rule, a global rule in fleet mode, and a rule charged from the demo
// upstream's LLM answers, so that every dashboard panel has something to
// show.
const monitoredPolicy = `{"mode": "enforce",
  "telemetry": {"cluster": "sluice_admin", "token_env": "SLUICE_TELEMETRY_TOKEN", "interval_ms": 1000},
  "fleet": {"cluster": "sluice_rls", "sync_interval_ms": 1000},
  "policies": [
    {"name": "api", "rules": [{"name": "api-key", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
      "algorithm_config": {"tokens_per_second": 1, "burst": 5, "block_seconds": 30}}]},
    {"name": "edge", "rules": [{"name": "per-ip", "mode": "shadow", "limit_keys": ["ip:address"], "algorithm": "token_bucket",
      "algorithm_config": {"tokens_per_second": 2, "burst": 4}}]},
    {"name": "fleet", "rules": [{"name": "per-tenant", "scope": "global", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
      "algorithm_config": {"tokens_per_second": 100, "burst": 200}}]},
    {"name": "llm", "rules": [{"name": "llm-tokens", "match": {"path_prefix": "/v1/chat/"}, "limit_keys": ["header:x-api-key"],
      "algorithm": "token_bucket", "algorithm_config": {"tokens_per_second": 10000, "burst": 100000,
      "cost_source": "response_json:usage.total_tokens"}}]}
  ]}`

// TestPrometheusSeesEveryDashboardQueryAndTheAlertsOnTheRunningStack runs
// Debian's Prometheus against the real stack (the admin binary in fleet
// mode on Redis with change notifications, following its policy file, the gateway binary on the
// compiled plugin over xDS, traffic), with the shipped rules file loaded. Every query of the shipped
// dashboard returns data, every metric an alert reads exists, no alert
// fires on the healthy stack, and the one problem the test causes (a
// client locked out after failed logins) fires its alert.
func TestPrometheusSeesEveryDashboardQueryAndTheAlertsOnTheRunningStack(t *testing.T) {
	prometheus := monitoringtest.Prometheus(t)
	redis := fleettest.StartRedis(t)
	root, bin, wasmFile := buildStack(t)
	policyFile, bootFile := filepath.Join(bin, "policy.json"), filepath.Join(bin, "boot.json")
	os.WriteFile(policyFile, []byte(monitoredPolicy), 0o644)
	os.WriteFile(bootFile, []byte(bootConfig), 0o644)
	local := func() string { return fmt.Sprintf("127.0.0.1:%d", fleettest.FreePort(t)) }
	xdsAddr, rlsAddr, metricsAddr, promAddr := local(), local(), local(), local()
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(hook.Close)

	admin := start(t, "admin", root, filepath.Join(bin, "ratelimit-admin"),
		[]string{"-listen", "127.0.0.1:0", "-xds-listen", xdsAddr, "-rls-listen", rlsAddr, "-redis-addrs", redis.Addr,
			"-metrics-listen", metricsAddr, "-data-dir", t.TempDir(), "-wasm-path", wasmFile, "-policy-file", policyFile, "-policy-file-interval", "1s",
			"-notify-url", hook.URL},
		[]string{"SLUICE_ADMIN_TOKEN=" + token, "SLUICE_TELEMETRY_TOKEN=" + telemetryToken},
		regexp.MustCompile(`dashboard (http://\S+)/\s`))
	adminURL := admin[1]
	gwURL := startGateway(t, root, bin, wasmFile, bootFile, xdsAddr, adminURL, "sluice_rls=h2c://"+rlsAddr)
	sendTraffic(t, gwURL)
	sendChats(t, gwURL)
	// A few requests without an API key: the per-key rule skips them
	// (sluice_rule_key_missing_total) while it limits the others.
	for range 5 {
		if resp, err := http.Get(gwURL + "/api/items"); err == nil {
			resp.Body.Close()
		}
	}

	promURL := startPrometheus(t, prometheus, promAddr, metricsAddr)
	// The admin follows the policy file (version 2, over the default
	// version 1). A change of the file, once Prometheus has seen version
	// 2, is the next version: the dashboard's annotation of policy pushes
	// has something to show.
	poll.Watch(t, 30*time.Second, 200*time.Millisecond, "Prometheus to scrape version 2", func() (bool, string) {
		return len(promQuery(t, promURL, "sluice_xds_published_version == 2")) > 0, "not yet"
	})
	v3 := strings.Replace(monitoredPolicy, `"tokens_per_second": 100`, `"tokens_per_second": 99`, 1)
	if err := os.WriteFile(policyFile, []byte(v3), 0o644); err != nil {
		t.Fatal(err)
	}
	waitAcked(t, adminURL, "3")
	var missing []string
	poll.Watch(t, 45*time.Second, time.Second, "every dashboard query to return data", func() (bool, string) {
		missing = missing[:0]
		for _, q := range monitoringtest.ReadDashboard(t).Queries("1m") {
			if len(promQuery(t, promURL, q.Expr)) == 0 {
				missing = append(missing, q.Panel+": "+q.Expr)
			}
		}
		return len(missing) == 0, "no data for:\n" + strings.Join(missing, "\n")
	})

	// The series every alert reads exist (a renamed metric would leave an
	// alert that can never fire). This stack's backend is Redis, so
	// PostgreSQL's health series is absent.
	for _, a := range monitoringtest.Alerts(t) {
		for _, name := range monitoringtest.MetricNames(a.Expr) {
			if name == "sluice_fleet_postgres_up" {
				continue
			}
			if len(promQuery(t, promURL, name)) == 0 {
				t.Errorf("alert %s reads %s, which the admin does not export", a.Name, name)
			}
		}
	}

	// Bad admin tokens from one address, until the address is locked out
	// (the admin's throttle), once Prometheus has seen the counter at 0.
	// The test needs no API call after.
	for i := 0; i < auth.DefaultThrottle.AddressLockAfter; i++ {
		req, _ := http.NewRequest("GET", adminURL+"/api/v1/policy", nil)
		req.Header.Set("Authorization", "Bearer sluice_not-the-admin-token-0123456789")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}

	// The healthy stack fires nothing but the lockout the test caused.
	poll.Watch(t, 20*time.Second, time.Second, "the lockout alert alone to fire", func() (bool, string) {
		alerts := promAlerts(t, promURL)
		return len(alerts) == 1 && alerts[0] == "SluiceAdminLoginLockouts firing", fmt.Sprintf("alerts %v", alerts)
	})
}

// startPrometheus runs Prometheus on addr, scraping the admin's metrics
// every second and evaluating the shipped rules file, and returns its URL.
func startPrometheus(t *testing.T, bin, addr, target string) string {
	t.Helper()
	dir := t.TempDir()
	config := fmt.Sprintf(`global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: [%q]
scrape_configs:
  - job_name: sluice-admin
    static_configs: [{targets: [%q]}]
`, monitoringtest.AlertsFile(), target)
	file := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(file, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	base := "http://" + addr
	// It logs to stderr only: readiness is asked over HTTP below.
	launch(t, "prometheus", dir, bin, []string{"--config.file", file, "--storage.tsdb.path", filepath.Join(dir, "data"),
		"--web.listen-address", addr}, nil, regexp.MustCompile(`^$`))
	poll.Watch(t, 30*time.Second, 200*time.Millisecond, "Prometheus to be ready", func() (bool, string) {
		resp, err := http.Get(base + "/-/ready")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	return base
}

// promQuery evaluates expr now and returns the result's series.
func promQuery(t *testing.T, base, expr string) []json.RawMessage {
	t.Helper()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []json.RawMessage `json:"result"`
		} `json:"data"`
	}
	promGet(t, base+"/api/v1/query?query="+url.QueryEscape(expr), &body)
	if body.Status != "success" {
		t.Fatalf("query %s: %s", expr, body.Error)
	}
	return body.Data.Result
}

// promAlerts returns Prometheus's pending and firing alerts as
// "name state", sorted.
func promAlerts(t *testing.T, base string) []string {
	t.Helper()
	var body struct {
		Data struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			} `json:"alerts"`
		} `json:"data"`
	}
	promGet(t, base+"/api/v1/alerts", &body)
	var out []string
	for _, a := range body.Data.Alerts {
		out = append(out, a.Labels["alertname"]+" "+a.State)
	}
	sort.Strings(out)
	return out
}

func promGet(t *testing.T, u string, v any) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("GET %s: %v\n%s", u, err, raw)
	}
}

// sendChats posts a chat request to the demo upstream's LLM API through
// the gateway every 200 ms, plain and streamed in turn, until the test
// ends.
func sendChats(t *testing.T, gwURL string) {
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { stop(); <-done })
	go func() {
		defer close(done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			body := fmt.Sprintf(`{"model": "demo", "stream": %v, "messages": [{"role": "user", "content": "hi"}]}`, i%2 == 1)
			req, _ := http.NewRequestWithContext(ctx, "POST", gwURL+"/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("X-Api-Key", "sk_live_llm_client")
			if resp, err := http.DefaultClient.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
	}()
}
