package e2e

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestBrowserConvertFromEnvoyRatelimit converts an envoyproxy/ratelimit
// configuration from the policy page: the link below the editor opens the
// form, Convert lists the rules in words with the notes, Save stores the
// current policy with the converted policies added. Its screenshot is
// docs/img/admin-migrate.png (SLUICE_UPDATE_SCREENSHOTS=1).
func TestBrowserConvertFromEnvoyRatelimit(t *testing.T) {
	chromium := chromiumPath(t)
	adminURL := startAdminWith(t, quotaPolicy, "quotas")
	b := openBrowser(t, chromium, "migrate")
	run, eval := b.run, b.eval
	run("log in", append(loginSteps(adminURL+"/", "e2e-migrator"), chromedp.WaitVisible(chromedp.ID("migrate-link")))...)
	run("open the conversion", chromedp.Click(chromedp.Search(`//*[@id="migrate-link"]/a`)), chromedp.WaitVisible(chromedp.ID("migrate-form")))
	// The form shows the fields the chosen source reads.
	shown := func(from string) string {
		return eval(`(() => { const s = document.getElementById("mg-from"); s.value = "` + from + `"; s.dispatchEvent(new Event("change"));
			return [...document.querySelectorAll("[data-field]")].filter((p) => !p.hidden).map((p) => p.dataset.field).join(" "); })()`)
	}
	if got := shown("ingress-nginx"); got != "status annotations_prefix" {
		t.Errorf("ingress-nginx's fields: %q", got)
	}
	if got := eval(`[...document.querySelectorAll("#mg-from option")].map((o) => o.value).join(" ")`); got != "envoy-ratelimit envoy-local-ratelimit ingress-nginx nginx kong higress envoy-gateway" {
		t.Errorf("the sources offered: %q", got)
	}
	if got := shown("higress"); got != "scope plugin default_cost fleet_cluster" {
		t.Errorf("Higress's fields: %q", got)
	}
	if got := shown("envoy-gateway"); got != "scope fleet_cluster" {
		t.Errorf("Envoy Gateway's fields: %q", got)
	}
	if got := shown("envoy-ratelimit"); got != "rate_limits scope fleet_cluster" {
		t.Errorf("envoyproxy/ratelimit's fields: %q", got)
	}
	run("convert",
		chromedp.SetValue(chromedp.ID("mg-config"), migrateConfig),
		chromedp.SetValue(chromedp.ID("mg-rate-limits"), migrateActions),
		chromedp.Click(chromedp.ID("mg-convert")),
		chromedp.WaitVisible(chromedp.ID("mg-rules")))
	if row := eval(`document.querySelector('#mg-rules tr[data-rule="api_key"]')?.textContent ?? ""`); !strings.Contains(row, "1 override") || strings.Contains(row, "1 overrides") {
		t.Errorf("the per-key rule's row: %q", row)
	}
	if notes := eval(`document.getElementById("mg-notes").textContent`); !strings.Contains(notes, "xff_trusted_hops") {
		t.Errorf("notes: %q", notes)
	}
	b.screenshotOf("main", "01-converted", "admin-migrate.png")

	run("save", chromedp.SetValue(chromedp.ID("mg-message"), "from envoyproxy/ratelimit"),
		chromedp.Click(chromedp.ID("mg-save")), flashSays("Saved v3"))
	p := string(policyJSON(t, adminURL))
	for _, want := range []string{`"name":"monthly-api"`, `"name":"api_key"`, `"name":"tenant-gold-user"`, `"fleet":{"cluster":"sluice_rls",`} {
		if !strings.Contains(p, want) {
			t.Errorf("the saved policy lacks %s: %s", want, p)
		}
	}
}
