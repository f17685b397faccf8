package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The tiers the structured editor and the simulator are driven on.
const tiersPolicy = `{"policies":[{"name":"tiers","rules":[
 {"name":"premium","match":{"header:x-plan":"premium"},"limit_keys":["header:x-api-key"],"algorithm":"token_bucket","algorithm_config":{"tokens_per_second":10,"burst":20}},
 {"name":"free","limit_keys":["header:x-api-key"],"algorithm":"token_bucket","algorithm_config":{"tokens_per_second":1,"burst":5}},
 {"name":"anonymous","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"tokens_per_second":1,"burst":3}}]}]}`

// TestBrowserRaiseATierAndSimulate raises the premium tier's rate in the
// structured editor without touching the JSON (edit, type, apply, save),
// then simulates a premium request against the saved policy.
func TestBrowserRaiseATierAndSimulate(t *testing.T) {
	chromium := chromiumPath(t)
	adminURL := startAdminWith(t, tiersPolicy, "tiers") // overrides_test.go

	b := openBrowser(t, chromium, "structured-editor")
	run, eval := b.run, b.eval
	run("log in", append(loginSteps(adminURL+"/", "e2e-editor"), chromedp.WaitVisible(chromedp.CSS(`table.rule-list tr[data-rule="premium"]`)))...)
	if row := eval(`document.querySelector('tr[data-rule="premium"]').textContent`); !strings.Contains(row, "10/s, burst 20, per header:x-api-key") ||
		!strings.Contains(row, "header:x-plan is premium") {
		t.Errorf("the premium tier in words: %q", row)
	}
	b.screenshotOf("#rules-view", "01-rules", "admin-rules.png")

	// Four actions: Edit, type the new rate, Apply, Save.
	started := time.Now()
	run("edit the premium tier", chromedp.Click(chromedp.CSS(`tr[data-rule="premium"] button.edit-rule`)), chromedp.WaitVisible(chromedp.ID("rf_rate")))
	if got := eval(`document.getElementById("rf_rate").value`); got != "10" {
		t.Errorf("the rate field shows %q", got)
	}
	// Every field is in view beside its label, however long the labels.
	if off := eval(`[...document.querySelectorAll("#rule-form input:not([type=hidden]), #rule-form select, #rule-form textarea")]
		.filter(e => e.getBoundingClientRect().right > document.documentElement.clientWidth).map(e => e.name).join(" ")`); off != "" {
		t.Errorf("fields out of view to the right: %s", off)
	}
	// The rejection body belongs to limit and deny rules: an exempt rule's
	// form hides it.
	shown := func(action string) string {
		return eval(`(() => { const a = document.getElementById("rf_action"); a.value = "` + action + `";
			a.dispatchEvent(new Event("change"));
			return String(!document.getElementById("rf_reject_body").closest("[data-action]").hidden); })()`)
	}
	for action, want := range map[string]string{"deny": "true", "exempt": "false", "": "true"} {
		if got := shown(action); got != want {
			t.Errorf("action %q: the rejection body shown %s, want %s", action, got, want)
		}
	}
	shown("") // limit again, for the rest of the test
	run("raise the rate", chromedp.SetValue(chromedp.ID("rf_rate"), "50"), chromedp.SetValue(chromedp.ID("rf_burst"), "5"),
		chromedp.Click(chromedp.ID("apply-rule")), chromedp.WaitVisible(chromedp.ID("rf-err-burst")))
	if msg := eval(`document.getElementById("rf-err-burst").textContent`); !strings.Contains(msg, "5 is below tokens_per_second 50") {
		t.Errorf("the burst's error from the filter's parser: %q", msg)
	}
	b.screenshotOf("#rule-form", "02-rule-form-error", "admin-rule-form.png")
	run("fix the burst and apply", chromedp.SetValue(chromedp.ID("rf_burst"), "100"), chromedp.Click(chromedp.ID("apply-rule")),
		chromedp.WaitVisible(chromedp.CSS(".flash-ok")))
	if row := eval(`document.querySelector('tr[data-rule="premium"]').textContent`); !strings.Contains(row, "50/s, burst 100") {
		t.Errorf("after applying: %q", row)
	}
	run("save", chromedp.Click(chromedp.ID("save")), flashSays("Saved v3"))
	t.Logf("raised the premium tier in %v", time.Since(started).Round(time.Millisecond))
	if p := string(policyJSON(t, adminURL)); !strings.Contains(p, `"tokens_per_second":50`) || !strings.Contains(p, `"burst":100`) {
		t.Errorf("saved policy: %s", p)
	}

	// Simulate a premium request against the saved version.
	run("simulate",
		chromedp.SetValue(chromedp.ID("sim_against"), "current"),
		chromedp.SetValue(chromedp.ID("sim_path"), "/v1/items"),
		chromedp.SetValue(chromedp.ID("sim_headers"), "x-plan: premium\nx-api-key: key-0123456789"),
		chromedp.SetValue(chromedp.ID("sim_client"), "203.0.113.7:51234"),
		chromedp.Click(chromedp.ID("simulate")),
		chromedp.WaitVisible(chromedp.ID("sim-verdict")),
	)
	if v := eval(`document.getElementById("sim-verdict").textContent`); !strings.Contains(v, "Allowed by the current policy (v3)") {
		t.Errorf("verdict %q", v)
	}
	row := eval(`document.querySelector('#sim-result tr.applies[data-rule="premium"]').textContent`)
	if !strings.Contains(row, "key-…#") || strings.Contains(row, "key-0123456789") || !strings.Contains(row, "allowed, 99 left") {
		t.Errorf("the premium row: %q", row)
	}
	if h := eval(`document.getElementById("sim-headers").textContent`); !strings.Contains(h, `ratelimit: "premium";r=99;t=1`) {
		t.Errorf("headers %q", h)
	}
	b.screenshotOf("#simulator", "03-simulator", "admin-simulator.png")

	// What would a model's answer cost? A draft charged from the response
	// body, and a sample answer pasted under the request.
	run("simulate a sample answer",
		chromedp.SetValue(chromedp.ID("policy"), llmDraft),
		chromedp.SetValue(chromedp.ID("sim_against"), "draft"),
		chromedp.Click(chromedp.CSS("details.sim-response summary")),
		chromedp.WaitVisible(chromedp.ID("sim_resp_body")),
		chromedp.SetValue(chromedp.ID("sim_resp_headers"), "content-type: text/event-stream"),
		chromedp.SetValue(chromedp.ID("sim_resp_body"), "data: {\"usage\":null}\n\ndata: {\"usage\":{\"total_tokens\":120}}\n\ndata: [DONE]\n\n"),
		chromedp.Click(chromedp.ID("simulate")),
		chromedp.WaitVisible(chromedp.CSS(`#sim-result tr.sim-charge[data-rule="llm"]`)),
	)
	if c := eval(`document.querySelector('#sim-result tr.sim-charge[data-rule="llm"]').textContent`); !strings.Contains(c, "charged 120 (response body usage.total_tokens), leaving 99880") {
		t.Errorf("the sample answer's charge: %q", c)
	}
	b.screenshotOf("#simulator", "04-simulator-response", "admin-simulator-response.png")
}

// llmDraft limits LLM tokens per key, charged from the answer's usage.
const llmDraft = `{"rules":[{"name":"llm","limit_keys":["header:x-api-key"],"algorithm":"token_bucket",
 "algorithm_config":{"tokens_per_second":50,"burst":100000,"cost_source":"response_json:usage.total_tokens","default_cost":500}}]}`
