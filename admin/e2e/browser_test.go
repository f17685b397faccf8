package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/sluice-rl/sluice/plugin/wasmhost/wasmtest"
)

// browser is a Chromium tab with the steps the dashboard tests share.
type browser struct {
	t         *testing.T
	ctx       context.Context
	artifacts string // where screenshots go ($SLUICE_ARTIFACTS, else a temporary directory)
	prefix    string // of this test's screenshot names
}

func openBrowser(t *testing.T, chromium, prefix string) *browser {
	t.Helper()
	artifacts := os.Getenv("SLUICE_ARTIFACTS")
	if artifacts == "" {
		artifacts = t.TempDir()
	}
	os.MkdirAll(artifacts, 0o755)
	return &browser{t: t, ctx: newBrowser(t, chromium), artifacts: artifacts, prefix: prefix}
}

// run performs steps within 15 s; on failure it saves <prefix>-failure.png
// and fails the test.
func (b *browser) run(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	sctx, cancel := context.WithTimeout(b.ctx, 15*time.Second)
	defer cancel()
	if err := chromedp.Do(sctx, steps...); err != nil {
		if png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100)); err == nil {
			os.WriteFile(filepath.Join(b.artifacts, b.prefix+"-failure.png"), png, 0o644)
		}
		b.t.Fatalf("%s: %v", what, err)
	}
}

// flashSays waits until a success notice containing want is visible (want
// has no double quote). After a click that submits a form, waiting for any
// notice is not enough: the page being left may show one already (a
// preview's summary, an applied rule), and reading the notice then races
// the navigation. An element wait, unlike a script poll, outlasts it.
func flashSays(want string) chromedp.Action[chromedp.Void] {
	return chromedp.WaitVisible(chromedp.Search(
		fmt.Sprintf(`//*[contains(concat(" ", @class, " "), " flash-ok ") and contains(., "%s")]`, want)))
}

// eval evaluates a JavaScript expression whose value is a string.
func (b *browser) eval(expr string) string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		b.t.Fatalf("evaluating %s: %v", expr, err)
	}
	return s
}

// screenshot saves the page as <name>.png among the artifacts; with
// SLUICE_UPDATE_SCREENSHOTS=1 and a docName it also replaces
// docs/img/<docName> (each picture in the docs has one test as its source).
func (b *browser) screenshot(name, docName string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Errorf("screenshot %s: %v", name, err)
		return
	}
	b.save(png, name, docName)
}

// screenshotOf is screenshot of the element sel only.
func (b *browser) screenshotOf(sel, name, docName string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.Screenshot(chromedp.CSS(sel)))
	if err != nil {
		b.t.Errorf("screenshot %s: %v", name, err)
		return
	}
	b.save(png, name, docName)
}

func (b *browser) save(png []byte, name, docName string) {
	b.t.Helper()
	p := filepath.Join(b.artifacts, name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		b.t.Error(err)
	}
	b.t.Logf("screenshot: %s", p)
	if docName == "" || os.Getenv("SLUICE_UPDATE_SCREENSHOTS") != "1" {
		return
	}
	dst := filepath.Join(wasmtest.ModuleRoot(b.t), "docs", "img", docName)
	if err := os.WriteFile(dst, png, 0o644); err != nil {
		b.t.Error(err)
	}
	b.t.Logf("updated %s", dst)
}

// loginToDashboard logs in from the login page (no destination: one lands
// on the dashboard) and waits for ready, a selector of the live part.
func (b *browser) loginToDashboard(adminURL, ready string) {
	b.t.Helper()
	b.run("log in", append(loginSteps(adminURL+"/login", "e2e-ops"),
		chromedp.WaitVisible(chromedp.ID("dash-live")), chromedp.WaitVisible(chromedp.CSS(ready)))...)
	if loc := b.eval(`location.pathname`); loc != "/dashboard" {
		b.t.Errorf("landed on %s, want /dashboard", loc)
	}
}

// expectLiveUpdates waits until the page has taken two updates and both
// expressions (a number, a chart) changed, and checks that this happened in
// place: same document, no navigation, through server-sent events.
func (b *browser) expectLiveUpdates(countExpr, chartExpr string, timeout time.Duration) {
	b.t.Helper()
	// Mark this document: a reload or a navigation would lose the mark.
	b.eval(`(window.__sluiceMark = "m" + Math.random(), performance.timeOrigin.toString())`)
	mark, origin := b.eval(`window.__sluiceMark`), b.eval(`performance.timeOrigin.toString()`)
	count0, chart0 := b.eval(countExpr), b.eval(chartExpr)
	b.run("live update",
		chromedp.Poll[chromedp.Void](fmt.Sprintf(`(() => {
			const live = document.getElementById("dash-live");
			return parseInt(live.dataset.updates || "0", 10) >= 2 && %s !== %q && %s !== %q;
		})()`, countExpr, count0, chartExpr, chart0), chromedp.WithPollingTimeout(timeout), chromedp.WithPollingInterval(100*time.Millisecond)),
	)
	if got := b.eval(`window.__sluiceMark`); got != mark {
		b.t.Errorf("the page was reloaded (mark %q, want %q)", got, mark)
	}
	if got := b.eval(`document.getElementById("dash-live").dataset.transport`); got != "events" {
		b.t.Errorf("the updates came by %q, want server-sent events", got)
	}
	if got := b.eval(`performance.timeOrigin.toString()`); got != origin {
		b.t.Errorf("a navigation happened (time origin %s, was %s)", got, origin)
	}
	if n := b.eval(`String(performance.getEntriesByType("navigation").length)`); n != "1" {
		b.t.Errorf("%s navigations", n)
	}
}

// searchKey searches query in the key search and waits for the row of
// identity; it returns that row's rejects in the last minute.
func (b *browser) searchKey(query, identity string) string {
	b.t.Helper()
	b.run("search "+query,
		chromedp.SetValue(chromedp.ID("key-q"), query),
		chromedp.Click(chromedp.CSS("#key-search button")),
		chromedp.WaitVisible(chromedp.CSS(`#search-results tr[data-identity="`+identity+`"]`)),
	)
	return b.eval(`document.querySelector('#search-results tr[data-identity="` + identity + `"] td.recent').textContent`)
}

// showLastMinute clears the key search and shows the last minute, in place.
func (b *browser) showLastMinute() {
	b.t.Helper()
	b.run("1m window",
		chromedp.Click(chromedp.CSS("#search-results a.clear-search")),
		chromedp.WaitNotPresent(chromedp.ID("search-results")),
		chromedp.Click(chromedp.CSS(`.windows a[data-window="1m"]`)),
		chromedp.Poll[chromedp.Void](`document.querySelector(".live-meta").textContent.includes("last 1m")`,
			chromedp.WithPollingTimeout(5*time.Second)),
	)
}

// acceptNextDialog accepts the next JavaScript dialog the page opens (a
// confirmation before a rollback or a reset).
func (b *browser) acceptNextDialog() {
	dialogs := chromedp.Events(b.ctx, page.JavascriptDialogOpening)
	go func() {
		for _, err := range dialogs {
			if err != nil {
				return
			}
			chromedp.Call(b.ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
			return
		}
	}()
}
