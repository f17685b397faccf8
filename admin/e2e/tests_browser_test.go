package e2e

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// tiersTests pin the tiers: a premium key's burst of 20, a free key's of 5.
const tiersTests = `tests:
  - name: a premium key gets a burst of 20
    request:
      path: /v1/items
      headers: {x-plan: premium, x-api-key: premium-key-1}
    steps:
      - repeat: 20
        expect: {status: 200, rule: premium}
      - expect: {status: 429, rule: premium}
  - name: a free key gets a burst of 5
    request:
      headers: {x-api-key: free-key-1}
    steps:
      - repeat: 5
        expect: {status: 200, rule: free}
      - expect: {status: 429, rule: free, headers: {retry-after: "1"}}
`

// TestBrowserSavedTestsGuardASave writes tests on the Tests page, runs
// and saves them, then saves a policy that breaks one from the policy
// page: refused, with the failing test and how the draft decided it;
// saved on purpose without the tests.
func TestBrowserSavedTestsGuardASave(t *testing.T) {
	chromium := chromiumPath(t)
	adminURL := startAdminWith(t, tiersPolicy, "tiers")
	b := openBrowser(t, chromium, "policy-tests")
	run, eval := b.run, b.eval
	run("log in", append(loginSteps(adminURL+"/tests", "e2e-tester"), chromedp.WaitVisible(chromedp.ID("tests-body")))...)
	if saved := eval(`document.getElementById("tests-saved").textContent`); !strings.Contains(saved, "No tests are saved") {
		t.Errorf("before any: %q", saved)
	}
	run("run the tests", chromedp.SetValue(chromedp.ID("tests-body"), tiersTests), chromedp.Click(chromedp.ID("tests-run")),
		chromedp.WaitVisible(chromedp.ID("test-report")))
	if r := eval(`document.querySelector("#test-report h2").textContent`); !strings.Contains(r, "2 tests pass against the current policy (v2)") {
		t.Errorf("the run: %q", r)
	}
	b.screenshot("01-tests-page", "admin-tests.png")
	run("save the tests", chromedp.Click(chromedp.ID("tests-save")), flashSays("Tests saved (revision 1)"))

	// The premium burst raised to 40 by mistake, in the JSON.
	raised := strings.Replace(tiersPolicy, `"tokens_per_second":10,"burst":20`, `"tokens_per_second":10,"burst":40`, 1)
	run("save a draft that breaks a test", chromedp.Navigate(adminURL+"/"), chromedp.WaitVisible(chromedp.ID("save")),
		chromedp.SetValue(chromedp.ID("policy"), raised), chromedp.SetValue(chromedp.ID("message"), "premium burst 40"),
		chromedp.Click(chromedp.ID("save")), chromedp.WaitVisible(chromedp.ID("test-report")))
	if f := eval(`document.querySelector(".flash-error").textContent`); !strings.Contains(f, `Not saved: the policy fails 1 of 2 saved tests ("a premium key gets a burst of 20")`) {
		t.Errorf("the refusal: %q", f)
	}
	failed := eval(`document.querySelector('#test-report li.test-failed').textContent`)
	if !strings.Contains(failed, "status: got 200, want 429") || !strings.Contains(failed, `rule "premium" applies to header:x-api-key=prem…#`) {
		t.Errorf("the failing test: %q", failed)
	}
	if strings.Contains(failed, "premium-key-1") {
		t.Errorf("the report shows the API key unmasked: %q", failed)
	}
	b.screenshotOf("#test-report", "02-save-refused", "admin-tests-refused.png")
	if got := eval(`document.getElementById("policy").value.includes('"burst": 40') || document.getElementById("policy").value.includes('"burst":40') ? "kept" : "lost"`); got != "kept" {
		t.Errorf("the draft was %s", got)
	}
	run("save without the tests", chromedp.Click(chromedp.ID("skip_tests")), chromedp.Click(chromedp.ID("save")), flashSays("Saved v3"))
	if p := string(policyJSON(t, adminURL)); !strings.Contains(p, `"burst":40`) {
		t.Errorf("saved policy: %s", p)
	}
}
