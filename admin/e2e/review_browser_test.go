package e2e

import (
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/sluice-rl/sluice/plugin/wasmhost/wasmtest"
)

// TestBrowserAReviewedChangeIsApprovedByAnotherEditor runs an admin that
// requires review: one editor proposes a raised tier from the policy
// page, another sees the change's diff on the Changes page and approves
// it, which saves it as the next version.
func TestBrowserAReviewedChangeIsApprovedByAnotherEditor(t *testing.T) {
	chromium := chromiumPath(t)
	root, bin := wasmtest.ModuleRoot(t), t.TempDir()
	buildAdmin(t, root, filepath.Join(bin, "ratelimit-admin"))
	admin := start(t, "admin", root, filepath.Join(bin, "ratelimit-admin"),
		[]string{"-listen", "127.0.0.1:0", "-xds-listen", "127.0.0.1:0", "-data-dir", t.TempDir(), "-require-review"},
		[]string{"SLUICE_ADMIN_TOKEN=" + token},
		regexp.MustCompile(`dashboard (http://\S+)/\s+xDS (\S+)`))
	adminURL := admin[1]

	ann := openBrowser(t, chromium, "review-author")
	ann.run("log in", append(loginSteps(adminURL+"/", "ann"), chromedp.WaitVisible(chromedp.ID("save")))...)
	if label := ann.eval(`document.getElementById("save").textContent`); label != "Propose for review" {
		t.Errorf("the save button says %q", label)
	}
	ann.run("propose", chromedp.SetValue(chromedp.ID("policy"), tiersPolicy), chromedp.SetValue(chromedp.ID("message"), "tiers for the public API"),
		chromedp.Click(chromedp.ID("save")), flashSays("Proposed as change 1"))
	if ann.eval(`document.getElementById("approve") ? "shown" : "hidden"`) != "hidden" || ann.eval(`document.getElementById("withdraw") ? "shown" : "hidden"`) != "shown" {
		t.Error("the author may approve their own change, or not withdraw it")
	}
	if v := policyVersion(t, adminURL); v != 1 {
		t.Fatalf("the proposal saved v%d", v)
	}

	bob := openBrowser(t, chromium, "review-approver")
	bob.run("log in and open the change", append(loginSteps(adminURL+"/changes", "bob"),
		chromedp.WaitVisible(chromedp.CSS(`#open-changes tr[data-change="1"] a`)),
		chromedp.Click(chromedp.CSS(`#open-changes tr[data-change="1"] a`)), chromedp.WaitVisible(chromedp.ID("approve")))...)
	if d := bob.eval(`document.querySelector(".diff").textContent`); !strings.Contains(d, `"premium"`) {
		t.Errorf("the diff: %q", d)
	}
	bob.screenshot("01-change", "admin-change-review.png")
	bob.run("approve", chromedp.Click(chromedp.ID("approve")), flashSays("Saved v2"))
	if v := policyVersion(t, adminURL); v != 2 {
		t.Fatalf("after the approval: v%d", v)
	}
	if p := string(policyJSON(t, adminURL)); !strings.Contains(p, `"premium"`) {
		t.Errorf("saved policy: %s", p)
	}
}

// policyVersion is the admin's current version number.
func policyVersion(t *testing.T, adminURL string) int64 {
	t.Helper()
	resp := apiDo(t, "GET", adminURL+"/api/v1/policy", token, nil)
	defer resp.Body.Close()
	var v struct {
		Version int64 `json:"version"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v.Version
}
