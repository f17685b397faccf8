// Package e2e drives the admin dashboard in a real headless Chromium
// (Debian's chromium package) with chromedp, against the real admin binary,
// with a development gateway subscribed to the admin over xDS: a policy
// saved or rolled back in the browser must change the gateway's behaviour.
//
// Without /usr/bin/chromium the test is skipped, unless CI is set: then it
// fails. Screenshots go to $SLUICE_ARTIFACTS (else a temporary directory);
// with SLUICE_UPDATE_SCREENSHOTS=1 the editor screenshot also replaces
// docs/img/admin-editor.png.
package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluice-rl/sluice/internal/poll"
	"github.com/sluice-rl/sluice/plugin/wasmhost/wasmtest"
)

const token = "e2e-admin-token-0123456789"

// The invalid draft: burst below the rate, on line 7.
const invalidDraft = `{
  "rules": [
    {
      "name": "e2e",
      "limit_keys": ["ip:address"],
      "algorithm": "token_bucket",
      "algorithm_config": {"tokens_per_second": 10, "burst": 3}
    }
  ]
}`

// The fix: 3 requests, then (almost) nothing.
var validDraft = strings.Replace(invalidDraft, `"tokens_per_second": 10`, `"tokens_per_second": 0.01`, 1)

// The gateway's configuration until the admin's first push: never rejects.
const bootConfig = `{"mode":"shadow","rules":[{"name":"boot","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":1}}]}`

func chromiumPath(t *testing.T) string {
	p := os.Getenv("SLUICE_CHROMIUM")
	if p == "" {
		p = "/usr/bin/chromium"
	}
	if _, err := os.Stat(p); err != nil {
		if ci := strings.ToLower(os.Getenv("CI")); ci != "" && ci != "0" && ci != "false" {
			t.Fatalf("CI is set but Chromium is missing (%v): install Debian's chromium package", err)
		}
		t.Skipf("Chromium not found at %s (apt-get install chromium, or set SLUICE_CHROMIUM); skipped outside CI", p)
	}
	return p
}

func TestBrowserEditSaveRollback(t *testing.T) {
	chromium := chromiumPath(t)
	root, bin, wasmFile := buildStack(t)
	// The budget covers the run, not the (cached) builds above.
	deadline := time.Now().Add(60 * time.Second)
	bootFile := filepath.Join(bin, "boot.json")
	os.WriteFile(bootFile, []byte(bootConfig), 0o644)

	admin := start(t, "admin", root, filepath.Join(bin, "ratelimit-admin"),
		[]string{"-listen", "127.0.0.1:0", "-xds-listen", "127.0.0.1:0", "-data-dir", t.TempDir(), "-wasm-path", wasmFile},
		[]string{"SLUICE_ADMIN_TOKEN=" + token},
		regexp.MustCompile(`dashboard (http://\S+)/\s+xDS (\S+)`))
	adminURL, xdsAddr := admin[1], admin[2]
	gw := start(t, "gateway", root, filepath.Join(bin, "ratelimit-gateway"),
		[]string{"-listen", "127.0.0.1:0", "-upstream", "demo", "-wasm", wasmFile, "-config", bootFile, "-xds", xdsAddr, "-node-id", "e2e-gateway", "-vms", "1"},
		nil, regexp.MustCompile(`gateway is running: (http://\S+)`))
	gwURL := gw[1]
	waitAcked(t, adminURL, "1")

	b := openBrowser(t, chromium, "editor")
	run, eval := b.run, b.eval

	// Log in.
	run("log in", append(loginSteps(adminURL+"/", "e2e-user"),
		chromedp.Click(chromedp.CSS(`.view-tabs button[data-tab="json-view"]`)), // the policy page opens on its Rules tab
		chromedp.WaitVisible(chromedp.ID("policy")))...)
	if got := eval(`document.querySelector(".who").textContent`); got != "e2e-user" {
		t.Errorf("logged in as %q", got)
	}
	if got := eval(`document.getElementById("current-version").textContent`); !strings.Contains(got, "v1") {
		t.Errorf("editor shows %q, want v1", got)
	}

	// Save an invalid policy: the error appears next to the offending line.
	run("save invalid",
		chromedp.SetValue(chromedp.ID("policy"), invalidDraft),
		chromedp.SetValue(chromedp.ID("message"), "too fast"),
		chromedp.Click(chromedp.ID("save")),
		chromedp.WaitVisible(chromedp.CSS("#listing li.bad .inline-error")),
	)
	line := eval(`document.querySelector("#listing li.bad").dataset.line`)
	lineText := eval(`document.querySelector("#listing li.bad code").textContent`)
	inline := eval(`document.querySelector("#listing li.bad .inline-error").textContent`)
	if line != "7" || !strings.Contains(lineText, `"burst": 3`) ||
		!strings.Contains(inline, "rules[0].algorithm_config.burst") || !strings.Contains(inline, "3 is below tokens_per_second 10") {
		t.Errorf("inline error at line %s (%q): %q", line, lineText, inline)
	}
	if draft := eval(`document.getElementById("policy").value`); draft != invalidDraft {
		t.Errorf("the draft was not kept:\n%s", draft)
	}
	// The "line 7" link selects that line in the editor.
	run("jump to line", chromedp.Click(chromedp.CSS("a.lineref")))
	if sel := eval(`(() => { const t = document.getElementById("policy"); return t.value.substring(t.selectionStart, t.selectionEnd); })()`); !strings.Contains(sel, `"burst": 3`) {
		t.Errorf("line link selected %q", sel)
	}
	b.screenshot("01-invalid-policy", "admin-editor.png")
	if codes := hit(t, gwURL, 5); strings.Contains(codes, "429") {
		t.Errorf("the refused policy reached the gateway: %s", codes)
	}

	// Fix it and save: v2, enforced by the gateway within seconds.
	run("save valid",
		chromedp.SetValue(chromedp.ID("policy"), validDraft),
		chromedp.SetValue(chromedp.ID("message"), "e2e: 3 requests then 429"),
		chromedp.Click(chromedp.ID("save")),
		flashSays("Saved v2"),
	)
	b.screenshot("02-saved", "")
	waitAcked(t, adminURL, "2")
	if codes := hit(t, gwURL, 5); codes != "200 200 200 429 429" {
		t.Errorf("gateway under v2 answered %s, want 200 200 200 429 429", codes)
	}

	// History shows v2 with its author and message.
	run("history", chromedp.Navigate(adminURL+"/history"), chromedp.WaitVisible(chromedp.CSS(`tr[data-version="2"]`)))
	if row := eval(`document.querySelector('tr[data-version="2"]').textContent`); !strings.Contains(row, "e2e-user") || !strings.Contains(row, "e2e: 3 requests then 429") || !strings.Contains(row, "current") {
		t.Errorf("history row of v2: %q", row)
	}
	b.screenshot("03-history", "")

	// Roll back to v1 (confirming the dialog): v3, and the gateway stops rejecting.
	b.acceptNextDialog()
	run("rollback",
		chromedp.Click(chromedp.CSS(`tr[data-version="1"] form.rollback button`)),
		flashSays("v3 restores v1"),
	)
	if row := eval(`document.querySelector('tr[data-version="3"]').textContent`); !strings.Contains(row, "rollback to v1") {
		t.Errorf("history row of v3: %q", row)
	}
	b.screenshot("04-rolled-back", "")
	waitAcked(t, adminURL, "3")
	if codes := hit(t, gwURL, 5); strings.Contains(codes, "429") {
		t.Errorf("gateway after the rollback answered %s, want no 429", codes)
	}

	// The nodes page shows the gateway up to date with v3.
	run("nodes", chromedp.Navigate(adminURL+"/nodes"), chromedp.WaitVisible(chromedp.CSS(`tr[data-node="e2e-gateway"]`)))
	if row := eval(`document.querySelector('tr[data-node="e2e-gateway"]').textContent`); !strings.Contains(row, "v3") || !strings.Contains(row, "up to date") || !strings.Contains(row, "connected") {
		t.Errorf("nodes row: %q", row)
	}
	b.screenshot("05-nodes", "")

	// The diff of v3 against its parent, and the Istio export.
	run("diff", chromedp.Navigate(adminURL+"/history/3"), chromedp.WaitVisible(chromedp.CSS("table.diff")))
	if del := eval(`Array.from(document.querySelectorAll("table.diff tr.del")).map(r => r.textContent).join("\n")`); !strings.Contains(del, `"tokens_per_second": 0.01`) {
		t.Errorf("diff v2 -> v3 removes %q", del)
	}
	b.screenshot("06-diff", "")
	run("istio", chromedp.Navigate(adminURL+"/istio"), chromedp.WaitVisible(chromedp.ID("manifest")))
	if m := eval(`document.getElementById("manifest").textContent`); !strings.Contains(m, "kind: WasmPlugin") || !strings.Contains(m, "default-per-ip") {
		t.Errorf("istio manifest: %q", m)
	}
	b.screenshot("07-istio", "")
	if time.Now().After(deadline) {
		t.Errorf("the browser test took longer than its 60 s budget")
	}
}

// buildStack builds the admin and the gateway binaries and the plugin
// into a temporary directory, and returns the module root, that directory
// and the plugin's path.
func buildStack(t *testing.T) (root, bin, wasmFile string) {
	t.Helper()
	root, bin = wasmtest.ModuleRoot(t), t.TempDir()
	buildBinaries(t, root, bin)
	wasmFile = filepath.Join(bin, "ratelimit.wasm")
	if err := os.WriteFile(wasmFile, wasmtest.Build(t, "./plugin"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root, bin, wasmFile
}

// loginSteps log in with the admin token from the login form at url.
func loginSteps(url, name string) []chromedp.Action[chromedp.Void] {
	return []chromedp.Action[chromedp.Void]{
		chromedp.Navigate(url),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SetValue(chromedp.ID("token"), token),
		chromedp.SetValue(chromedp.ID("name"), name),
		chromedp.Submit(chromedp.ID("token")),
	}
}

// buildBinaries builds the admin and the gateway into dir.
func buildBinaries(t *testing.T, root, dir string) {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	for name, pkg := range map[string]string{"ratelimit-admin": "./admin", "ratelimit-gateway": "./plugin/gateway"} {
		cmd := exec.Command(goBin, "build", "-o", filepath.Join(dir, name), pkg)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", pkg, err, out)
		}
	}
}

// start runs a binary until the test ends and returns the submatches of
// the first output line matching ready.
func start(t *testing.T, name, dir, bin string, args, env []string, ready *regexp.Regexp) []string {
	t.Helper()
	return launch(t, name, dir, bin, args, env, ready)()
}

// launch is start without waiting: the binary starts at once, and wait
// (called on the test's goroutine) returns the submatches of the first
// output line matching ready. Several binaries can start together.
func launch(t *testing.T, name, dir, bin string, args, env []string, ready *regexp.Regexp) (wait func() []string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var log strings.Builder
	cmd.Stderr = writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return log.Write(p)
	})
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			mu.Lock()
			t.Logf("%s output:\n%s", name, log.String())
			mu.Unlock()
		}
	})
	found := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			mu.Lock()
			log.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if m := ready.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- m:
				default:
				}
			}
		}
	}()
	deadline := time.Now().Add(30 * time.Second)
	return func() []string {
		t.Helper()
		select {
		case m := <-found:
			return m
		case <-time.After(time.Until(deadline)):
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("%s did not start:\n%s", name, log.String())
		}
		return nil
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func newBrowser(t *testing.T, chromium string) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1000),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil { // start the browser
		t.Fatalf("starting Chromium: %v", err)
	}
	return ctx
}

// hit sends n requests through the gateway and returns the statuses.
func hit(t *testing.T, base string, n int) string {
	t.Helper()
	var codes []string
	for range n {
		resp, err := http.Get(base + "/e2e")
		if err != nil {
			t.Fatalf("gateway: %v", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		codes = append(codes, fmt.Sprint(resp.StatusCode))
	}
	return strings.Join(codes, " ")
}

// waitAcked waits until the gateway has ACKed policy version v.
func waitAcked(t *testing.T, adminURL, v string) {
	t.Helper()
	poll.Watch(t, 15*time.Second, 100*time.Millisecond, "the gateway to ACK v"+v, func() (bool, string) {
		req, _ := http.NewRequest("GET", adminURL+"/api/v1/nodes", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var body struct {
			Nodes []map[string]any `json:"nodes"`
		}
		json.Unmarshal(raw, &body)
		for _, n := range body.Nodes {
			if n["id"] == "e2e-gateway" && n["acked_version"] == v {
				return true, ""
			}
		}
		return false, "nodes " + string(raw)
	})
}
