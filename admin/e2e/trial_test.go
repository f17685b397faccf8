package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// trialDraft tightens the per-key limit of fullStackPolicy to one request
// every two seconds: the keys sending one a second, which the current
// policy admits, would be rejected.
var trialDraft = strings.Replace(fullStackPolicy, `"tokens_per_second": 1, "burst": 5`, `"tokens_per_second": 0.5, "burst": 2`, 1)

// TestBrowserTryADraftInShadowAndPromote runs the real stack (the admin and
// the gateway binaries, telemetry through the gateway's callouts, traffic
// from this test): from the editor, Try in shadow pushes the tighter
// draft in shadow; the Trial page shows its would-reject rate appear next
// to the current rule's rates, and the keys only the draft would reject,
// while the gateway's answers do not change; Promote saves it as v2.
// Its screenshot is docs/img/admin-trial.png (SLUICE_UPDATE_SCREENSHOTS=1).
func TestBrowserTryADraftInShadowAndPromote(t *testing.T) {
	chromium := chromiumPath(t)
	root, bin, wasmFile := buildStack(t)
	policyFile, bootFile := filepath.Join(bin, "policy.json"), filepath.Join(bin, "boot.json")
	os.WriteFile(policyFile, []byte(fullStackPolicy), 0o644)
	os.WriteFile(bootFile, []byte(bootConfig), 0o644)
	deadline := time.Now().Add(45 * time.Second) // the run, not the (cached) builds

	admin := start(t, "admin", root, filepath.Join(bin, "ratelimit-admin"),
		[]string{"-listen", "127.0.0.1:0", "-xds-listen", "127.0.0.1:0", "-data-dir", t.TempDir(), "-wasm-path", wasmFile,
			"-initial-policy", policyFile},
		[]string{"SLUICE_ADMIN_TOKEN=" + token, "SLUICE_TELEMETRY_TOKEN=" + telemetryToken, "SLUICE_METRICS_LISTEN="},
		regexp.MustCompile(`dashboard (http://\S+)/\s+xDS (\S+)`))
	adminURL, xdsAddr := admin[1], admin[2]
	gwURL := startGateway(t, root, bin, wasmFile, bootFile, xdsAddr, adminURL)
	tr := sendTraffic(t, gwURL)

	b := openBrowser(t, chromium, "trial")
	run, eval := b.run, b.eval
	run("log in and open the JSON", append(loginSteps(adminURL+"/", "e2e-trial"),
		chromedp.Click(chromedp.CSS(`.view-tabs button[data-tab="json-view"]`)),
		chromedp.WaitVisible(chromedp.ID("policy")))...)
	run("try the draft in shadow",
		chromedp.SetValue(chromedp.ID("policy"), trialDraft),
		chromedp.SetValue(chromedp.ID("trial_duration"), "10m"),
		chromedp.Click(chromedp.ID("try-shadow")),
		chromedp.WaitVisible(chromedp.ID("trial-rules")))
	waitAcked(t, adminURL, "1+trial1")

	// The draft's would-reject rate appears (the page is reloaded, as a
	// person would press Refresh).
	wouldReject := `document.querySelector('#trial-rules tr[data-rule="api-key"] td.would-reject').textContent`
	for {
		run("refresh", chromedp.Navigate(adminURL+"/trial"), chromedp.WaitVisible(chromedp.ID("trial-rules")))
		if v := eval(wouldReject); v != "—" && v != "0/s" && eval(`String(!!document.getElementById("trial-identities"))`) == "true" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no would-reject rate and identities on the trial page: %q", eval(`document.getElementById("trial").textContent`))
		}
		time.Sleep(time.Second)
	}
	ids := eval(`document.getElementById("trial-identities").textContent`)
	if !strings.Contains(ids, "api-key") || strings.Contains(ids, mask(fullStackThrottled)) {
		t.Errorf("identities only the draft rejects: %q (the throttled key is rejected by the current policy too)", ids)
	}
	if strings.Contains(ids, "sk_live_fullstack_ok") {
		t.Errorf("an API key is shown unmasked: %q", ids)
	}
	b.screenshot("trial", "admin-trial.png")

	// Enforcement did not change: the keys at one request a second still
	// pass.
	for key, c := range tr.snapshot() {
		if key != fullStackThrottled && c[429] != 0 {
			t.Errorf("during the trial key %s got %v", key, c)
		}
	}

	run("promote", chromedp.Click(chromedp.ID("trial-promote")), flashSays("Saved v2"))
	waitAcked(t, adminURL, "2")
	if p := string(policyJSON(t, adminURL)); !strings.Contains(p, `"tokens_per_second":0.5`) || strings.Contains(p, "trial-") {
		t.Errorf("v2 is not the draft: %s", p)
	}
}
