package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluice-rl/sluice/admin/fleet/fleettest"
	"github.com/sluice-rl/sluice/internal/poll"
)

// resetPolicy gives each client address a burst of 3, refilled once in
// 100 s, and keeps a refused client out for 10 minutes.
const resetPolicy = `{"rules":[{"name":"e2e","limit_keys":["ip:address"],"algorithm":"token_bucket",
  "algorithm_config":{"tokens_per_second":0.01,"burst":3,"block_seconds":600}}]}`

// TestAResetLetsALockedOutClientBackIn runs the admin and gateway
// binaries (the compiled filter, subscribed over ECDS): a client spends
// its burst and is blocked; a reset through the API pushes the policy
// again with the reset, and its next requests start from a full bucket.
// A later version still carries the reset, which the gateway does not
// apply a second time.
func TestAResetLetsALockedOutClientBackIn(t *testing.T) {
	adminURL, gw := startResetStack(t)
	if got := hit(t, gw, 5); got != "200 200 200 429 429" {
		t.Fatalf("before the reset: %s, want a burst of 3, then refused", got)
	}
	postCreated(t, "reset", adminURL+"/api/v1/resets", []byte(`{"rule":"e2e","key":"127.0.0.1"}`))
	waitAckedPrefix(t, adminURL, "1+resets.")
	resp := apiDo(t, "GET", adminURL+"/api/v1/resets", token, nil)
	var list struct{ Envoys map[string]int }
	json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if list.Envoys["connected"] != 1 || list.Envoys["with_latest"] != 1 {
		t.Errorf("GET /api/v1/resets: envoys %v, want the gateway connected and with the latest resets", list.Envoys)
	}
	if got := hit(t, gw, 5); got != "200 200 200 429 429" {
		t.Fatalf("after the reset: %s, want a full burst again, then refused", got)
	}

	// Version 2 is pushed with the same reset: already applied, so the
	// client stays blocked.
	v2 := strings.Replace(resetPolicy, `{"rules"`, `{"response_headers":false,"rules"`, 1)
	save, _ := json.Marshal(map[string]any{"base_version": 1, "policy": json.RawMessage(v2)})
	postCreated(t, "saving v2", adminURL+"/api/v1/policy", save)
	waitAckedPrefix(t, adminURL, "2+resets.")
	if got := hit(t, gw, 2); got != "429 429" {
		t.Errorf("after v2 carried the same reset: %s, want the client still refused (a reset applies once)", got)
	}
}

// postCreated POSTs body to url with the admin token and wants 201.
func postCreated(t *testing.T, what, url string, body []byte) {
	t.Helper()
	resp := apiDo(t, "POST", url, token, body)
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("%s: %d %s", what, resp.StatusCode, got)
	}
}

// waitAckedPrefix waits until the gateway has ACKed a resource version
// starting with prefix.
func waitAckedPrefix(t *testing.T, adminURL, prefix string) {
	t.Helper()
	poll.Watch(t, 15*time.Second, 100*time.Millisecond, "the gateway to ACK "+prefix+"…", func() (bool, string) {
		resp := apiDo(t, "GET", adminURL+"/api/v1/nodes", token, nil)
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var out struct {
			Nodes []struct {
				ID    string `json:"id"`
				Acked string `json:"acked_version"`
			} `json:"nodes"`
		}
		json.Unmarshal(raw, &out)
		for _, n := range out.Nodes {
			if n.ID == "e2e-gateway" && strings.HasPrefix(n.Acked, prefix) {
				return true, ""
			}
		}
		return false, "nodes " + string(raw)
	})
}

// startResetStack runs the admin binary on resetPolicy and the gateway
// binary subscribed to it, and returns their URLs.
func startResetStack(t *testing.T) (adminURL, gatewayURL string) {
	t.Helper()
	root, bin, wasmFile := buildStack(t)
	policyFile, bootFile := filepath.Join(bin, "policy.json"), filepath.Join(bin, "boot.json")
	os.WriteFile(policyFile, []byte(resetPolicy), 0o644)
	os.WriteFile(bootFile, []byte(bootConfig), 0o644)
	admin := start(t, "admin", root, filepath.Join(bin, "ratelimit-admin"),
		[]string{"-listen", "127.0.0.1:0", "-xds-listen", "127.0.0.1:0", "-data-dir", t.TempDir(), "-wasm-path", wasmFile,
			"-initial-policy", policyFile},
		[]string{"SLUICE_ADMIN_TOKEN=" + token, "SLUICE_TELEMETRY_TOKEN=" + telemetryToken, "SLUICE_METRICS_LISTEN="},
		regexp.MustCompile(`dashboard (http://\S+)/\s+xDS (\S+)`))
	return admin[1], startGateway(t, root, bin, wasmFile, bootFile, admin[2], admin[1])
}

// TestBrowserResetAClientFromTheDashboard: an on-call engineer lets a
// blocked client back in from the dashboard's form (confirming the
// dialog); the outcome and the reset appear on the page, and the client's
// next requests pass.
func TestBrowserResetAClientFromTheDashboard(t *testing.T) {
	chromium := chromiumPath(t)
	adminURL, gw := startResetStack(t)
	if got := hit(t, gw, 4); got != "200 200 200 429" {
		t.Fatalf("before the reset: %s", got)
	}
	b := openBrowser(t, chromium, "reset")
	b.run("log in", append(loginSteps(adminURL+"/login", "e2e-oncall"), chromedp.WaitVisible(chromedp.ID("reset-form")))...)
	b.acceptNextDialog()
	b.run("reset the client",
		chromedp.SetValue(chromedp.ID("reset-rule"), "e2e"),
		chromedp.SetValue(chromedp.ID("reset-key"), "127.0.0.1"),
		chromedp.Click(chromedp.CSS(`#reset-form button[type="submit"]`)),
		flashSays("Reset ip:address=127.0.0.1 under e2e"))
	if row := b.eval(`document.querySelector('.recent-resets tbody tr').textContent`); !strings.Contains(row, "e2e-oncall") || !strings.Contains(row, "ip:address=127.0.0.1") {
		t.Errorf("the recent resets' first row: %q, want the rule, the key and who", row)
	}
	waitAckedPrefix(t, adminURL, "1+resets.")
	// The dashboard again: the gateway has the push with the reset.
	b.run("the dashboard again", chromedp.Navigate(adminURL+"/dashboard"), chromedp.WaitVisible(chromedp.ID("reset-in-force")))
	if got := b.eval(`document.getElementById('reset-in-force').textContent`); !strings.Contains(got, "in force on 1 of 1 connected Envoys") {
		t.Errorf("the dashboard says %q, want the gateway counted as having the latest resets", got)
	}
	b.screenshotOf("#reset-client", "reset-client", "admin-reset-client.png")
	if got := hit(t, gw, 4); got != "200 200 200 429" {
		t.Errorf("after the reset: %s, want a full burst again", got)
	}
}

// globalResetPolicy is a burst of 3 per client address, refilled once in
// 1000 s, counted across Envoys by the admin's rate limit service.
const globalResetPolicy = `{"fleet":{"cluster":"rls","timeout_ms":500,"sync_interval_ms":1000,"lease_ttl_ms":5000,"lease_max":3},
 "rules":[{"name":"g","scope":"global","limit_keys":["ip:address"],"algorithm":"token_bucket",
   "algorithm_config":{"tokens_per_second":0.001,"burst":3}}]}`

// TestAResetOfAGlobalRuleStartsItOverAcrossTheFleet: the admin serves
// the rate limit service on Redis and pushes over xDS; a client spends
// its global burst, and a reset through the API has the service forget
// its bucket and the gateway drop its lease pool: its burst is whole again.
func TestAResetOfAGlobalRuleStartsItOverAcrossTheFleet(t *testing.T) {
	adminURL, gw := startGlobalResetStack(t)
	// Leases are asked for as requests come (a request may be refused
	// while its process's ask is out): count what 20 spaced requests get.
	if got := admittedOf(t, gw, 20); got != 3 {
		t.Fatalf("before the reset: %d of 20 admitted, want the burst of 3", got)
	}
	postCreated(t, "reset", adminURL+"/api/v1/resets", []byte(`{"rule":"g","key":"127.0.0.1"}`))
	waitAckedPrefix(t, adminURL, "1+resets.")
	if got := admittedOf(t, gw, 20); got != 3 {
		t.Fatalf("after the reset: %d of 20 admitted, want the burst of 3 again", got)
	}
}

// startGlobalResetStack runs the admin binary on globalResetPolicy, its
// rate limit service on a Redis of its own, and the gateway binary
// subscribed to it, and returns their URLs.
func startGlobalResetStack(t *testing.T) (adminURL, gatewayURL string) {
	t.Helper()
	root, bin, wasmFile := buildStack(t)
	policyFile, bootFile := filepath.Join(bin, "global-policy.json"), filepath.Join(bin, "boot.json")
	os.WriteFile(policyFile, []byte(globalResetPolicy), 0o644)
	os.WriteFile(bootFile, []byte(bootConfig), 0o644)
	rls := "127.0.0.1:" + strconv.Itoa(fleettest.FreePort(t))
	admin := start(t, "admin", root, filepath.Join(bin, "ratelimit-admin"),
		[]string{"-listen", "127.0.0.1:0", "-xds-listen", "127.0.0.1:0", "-data-dir", t.TempDir(), "-wasm-path", wasmFile,
			"-initial-policy", policyFile, "-rls-listen", rls, "-redis-addrs", fleettest.StartRedis(t).Addr},
		[]string{"SLUICE_ADMIN_TOKEN=" + token, "SLUICE_TELEMETRY_TOKEN=" + telemetryToken, "SLUICE_METRICS_LISTEN="},
		regexp.MustCompile(`dashboard (http://\S+)/\s+xDS (\S+)`))
	return admin[1], startGateway(t, root, bin, wasmFile, bootFile, admin[2], admin[1], "rls=h2c://"+rls)
}

// admittedOf sends n requests 50 ms apart and counts the 200s.
func admittedOf(t *testing.T, gw string, n int) int {
	t.Helper()
	ok := 0
	for range n {
		if hit(t, gw, 1) == "200" {
			ok++
		}
		time.Sleep(50 * time.Millisecond)
	}
	return ok
}

// TestAResetOfEveryIdentityLetsEveryLockedOutClientBackIn: a client
// spends its burst and is blocked; a reset of every identity of the rule
// (the gateway walks the rule's groups) lets it back in with a full
// burst.
func TestAResetOfEveryIdentityLetsEveryLockedOutClientBackIn(t *testing.T) {
	adminURL, gw := startResetStack(t)
	if got := hit(t, gw, 5); got != "200 200 200 429 429" {
		t.Fatalf("before the reset: %s, want a burst of 3, then refused", got)
	}
	postCreated(t, "reset of every identity", adminURL+"/api/v1/resets", []byte(`{"rule":"e2e","all":true}`))
	waitAckedPrefix(t, adminURL, "1+resets.")
	poll.Watch(t, 5*time.Second, 50*time.Millisecond, "the walk to reach the client's group…", func() (bool, string) {
		got := hit(t, gw, 1)
		return got == "200", "still " + got
	})
	if got := hit(t, gw, 3); got != "200 200 429" {
		t.Errorf("after the reset: the rest of a full burst %s, want 200 200 429", got)
	}
}

// TestAResetOfEveryIdentityOfAGlobalRuleStartsItOver: the admin's rate
// limit service on Redis forgets every identity of the global rule, and
// the gateway drops the rule's lease pools: the client's burst is whole
// again.
func TestAResetOfEveryIdentityOfAGlobalRuleStartsItOver(t *testing.T) {
	adminURL, gw := startGlobalResetStack(t)
	if got := admittedOf(t, gw, 20); got != 3 {
		t.Fatalf("before the reset: %d of 20 admitted, want the burst of 3", got)
	}
	postCreated(t, "reset of every identity", adminURL+"/api/v1/resets", []byte(`{"rule":"g","all":true}`))
	waitAckedPrefix(t, adminURL, "1+resets.")
	time.Sleep(200 * time.Millisecond) // the walk's last turns, on the gateway's ticks
	if got := admittedOf(t, gw, 20); got != 3 {
		t.Fatalf("after the reset: %d of 20 admitted, want the burst of 3 again", got)
	}
}
