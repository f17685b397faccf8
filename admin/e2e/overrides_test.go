package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/sluice-rl/sluice/plugin/wasmhost/wasmtest"
)

// A monthly API quota per key: the rule a customer table is imported into.
const quotaPolicy = `{"policies":[{"name":"billing","rules":[
 {"name":"monthly-api","limit_keys":["header:x-api-key"],"algorithm":"quota","algorithm_config":{"limit":10000,"period":"month","time_zone":"Europe/Berlin"}},
 {"name":"anonymous","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"tokens_per_second":1,"burst":3}}]}]}`

// startAdminWith builds and starts the admin, saves policy as v2 and
// returns the admin's address.
func startAdminWith(t *testing.T, policy, message string) string {
	t.Helper()
	root, bin := wasmtest.ModuleRoot(t), t.TempDir()
	buildAdmin(t, root, filepath.Join(bin, "ratelimit-admin"))
	admin := start(t, "admin", root, filepath.Join(bin, "ratelimit-admin"),
		[]string{"-listen", "127.0.0.1:0", "-xds-listen", "127.0.0.1:0", "-data-dir", t.TempDir()},
		[]string{"SLUICE_ADMIN_TOKEN=" + token},
		regexp.MustCompile(`dashboard (http://\S+)/\s+xDS (\S+)`))
	resp := apiDo(t, "POST", admin[1]+"/api/v1/policy", token, []byte(`{"base_version":1,"message":"`+message+`","policy":`+policy+`}`))
	resp.Body.Close()
	if resp.StatusCode != 201 {
		t.Fatalf("saving %s: %d", message, resp.StatusCode)
	}
	return admin[1]
}

// TestBrowserImportOverridesFromCSV imports a customer table into a
// monthly quota from the policy page: a pasted CSV with a bad line is
// refused with its line and column, the uploaded file is previewed, saved
// as a new version and shows in the rule list.
func TestBrowserImportOverridesFromCSV(t *testing.T) {
	chromium := chromiumPath(t)
	adminURL := startAdminWith(t, quotaPolicy, "quotas")
	table := filepath.Join(t.TempDir(), "customers.csv")
	if err := os.WriteFile(table, []byte("key,limit\nacme-prod-7f3a,5000000\nglobex-2291,250000\ntrial-0042,500\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	b := openBrowser(t, chromium, "import-overrides")
	run, eval := b.run, b.eval
	run("log in", append(loginSteps(adminURL+"/", "e2e-importer"), chromedp.WaitVisible(chromedp.ID("overrides-form")))...)
	run("preview a pasted CSV with a bad line",
		chromedp.SetValue(chromedp.ID("ov-rule"), "monthly-api"),
		chromedp.SetValue(chromedp.ID("ov-csv"), "key,limit\nacme-prod-7f3a,5000000\nglobex-2291,lots\n"),
		chromedp.Click(chromedp.ID("ov-preview")),
		chromedp.WaitVisible(chromedp.ID("ov-problems")))
	if p := eval(`document.querySelector('#ov-problems li[data-line="3"][data-column="limit"]')?.textContent ?? ""`); !strings.Contains(p, `"lots" is not a number`) {
		t.Errorf("the bad line's problem: %q", p)
	}
	if eval(`String(document.getElementById("ov-save") === null)`) != "true" {
		t.Error("a refused import offers Save")
	}

	eval(`document.getElementById("ov-csv").value = ""; ""`) // the file replaces the pasted text anyway
	run("preview the uploaded file",
		chromedp.SetUploadFiles(chromedp.ID("ov-file"), []string{table}),
		chromedp.Click(chromedp.ID("ov-preview")),
		chromedp.WaitVisible(chromedp.ID("ov-summary")))
	if s := eval(`document.getElementById("ov-summary").textContent`); !strings.Contains(s, "3 rows read: 3 added, 0 replaced; the rule will have 3 overrides.") {
		t.Errorf("summary %q", s)
	}
	if r := eval(`document.querySelector('#ov-rows tr[data-key="globex-2291"]').textContent`); !strings.Contains(r, "250000") {
		t.Errorf("globex's row: %q", r)
	}
	b.screenshotOf("main", "01-preview", "admin-import-overrides.png")

	run("save", chromedp.SetValue(chromedp.ID("ov-message"), "customer quotas from billing"),
		chromedp.Click(chromedp.ID("ov-save")), flashSays("Saved v3"))
	if row := eval(`document.querySelector('tr[data-rule="monthly-api"] .overrides').textContent`); !strings.Contains(row, "3 overrides") {
		t.Errorf("the rule list: %q", row)
	}
	if p := string(policyJSON(t, adminURL)); !strings.Contains(p, `"key":"globex-2291","algorithm_config":{"limit":250000}`) {
		t.Errorf("saved policy: %s", p)
	}
}
