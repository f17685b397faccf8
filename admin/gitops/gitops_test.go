package gitops

import (
	"bytes"
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/admin/auth"
	"github.com/sluice-rl/sluice/admin/httpapi"
	"github.com/sluice-rl/sluice/admin/policies"
	"github.com/sluice-rl/sluice/admin/store"
)

const testToken = "gitops-test-token-0123456789"

const (
	perIP = `{"rules":[{"name":"per-ip","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":5,"burst":10}}]}`
	tiers = `{"rules":[{"name":"free","limit_keys":["header:x-api-key"],"algorithm":"token_bucket","algorithm_config":{"rps":10,"burst":20}}]}`
	bad   = `{"rules":[{"name":"free","limit_keys":["header:x-api-key"],"algorithm":"token_bucket","algorithm_config":{"rps":10,"burst":5}}]}`
)

type admin struct {
	url string
	svc *policies.Service
}

// startAdmin runs the admin's real HTTP API in process on a fresh store.
func startAdmin(t *testing.T) *admin {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	svc := policies.New(st, nil, nil)
	svc.SetInitialConfig([]byte(perIP))
	if _, err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	am, _, err := auth.Setup(ctx, st, testToken)
	if err != nil {
		t.Fatal(err)
	}
	h, err := httpapi.New(httpapi.Config{Policies: svc, Auth: am})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &admin{url: srv.URL, svc: svc}
}

func writeFile(t *testing.T, content string) string {
	p := filepath.Join(t.TempDir(), "policy.json")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func (a *admin) run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	full := append([]string{args[0], "-url", a.url, "-token", testToken}, args[1:]...)
	code := Main(full, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

func TestValidateExitsZeroForAValidPolicyAndOneWithFieldPaths(t *testing.T) {
	a := startAdmin(t)
	if code, out, errs := a.run(t, "validate", writeFile(t, tiers)); code != ExitOK || !strings.Contains(out, "valid") {
		t.Errorf("valid policy: exit %d, %q %q", code, out, errs)
	}
	code, out, _ := a.run(t, "validate", writeFile(t, bad))
	if code != ExitChanges || !strings.Contains(out, "rules[0].algorithm_config.burst") {
		t.Errorf("invalid policy: exit %d, output %q; want 1 and the field path", code, out)
	}
	if code, out, _ := a.run(t, "validate", writeFile(t, "{not json")); code != ExitChanges || !strings.Contains(out, "not valid JSON") {
		t.Errorf("not JSON: exit %d, %q", code, out)
	}
}

func TestDiffShowsTheChangeAndExitsOneOnlyWhenThereIsOne(t *testing.T) {
	a := startAdmin(t)
	code, out, _ := a.run(t, "diff", writeFile(t, tiers))
	if code != ExitChanges || !strings.Contains(out, "--- v1") || !regexp.MustCompile(`(?m)^\+\s+"name": "free",$`).MatchString(out) || !regexp.MustCompile(`(?m)^-\s+"name": "per-ip",$`).MatchString(out) || !strings.Contains(out, "current version: 1") {
		t.Errorf("changed policy: exit %d, output:\n%s", code, out)
	}
	// The same policy, written differently (spacing, key order), is no change.
	same := `{"rules": [{"algorithm_config": {"burst": 10, "rps": 5}, "algorithm": "token_bucket", "limit_keys": ["ip:address"], "name": "per-ip"}]}`
	if code, out, _ := a.run(t, "diff", writeFile(t, same)); code != ExitOK || !strings.Contains(out, "no changes") {
		t.Errorf("same policy: exit %d, %q", code, out)
	}
}

func TestApplySavesANewVersionWithTheMessageAndExportReadsItBack(t *testing.T) {
	a := startAdmin(t)
	code, out, errs := a.run(t, "apply", writeFile(t, tiers), "-m", "free tier from git", "-author", "ci")
	if code != ExitOK || !strings.Contains(out, "applied: v2 (based on v1)") {
		t.Fatalf("apply: exit %d, %q %q", code, out, errs)
	}
	cur, err := a.svc.Current(context.Background())
	if err != nil || cur.Number != 2 || cur.Message != "free tier from git" || cur.Author != "ci" {
		t.Fatalf("current %+v %v: want v2 with the message and author", cur, err)
	}
	// Applying it again changes nothing.
	if code, out, _ := a.run(t, "apply", writeFile(t, tiers), "-m", "again"); code != ExitOK || !strings.Contains(out, "no changes") {
		t.Errorf("re-apply: exit %d, %q", code, out)
	}
	dst := filepath.Join(t.TempDir(), "exported.json")
	if code, _, errs := a.run(t, "export", "-o", dst); code != ExitOK || !strings.Contains(errs, "exported v2") {
		t.Fatalf("export: exit %d %q", code, errs)
	}
	if code, out, _ := a.run(t, "diff", dst); code != ExitOK {
		t.Errorf("the exported policy differs from the current one: exit %d\n%s", code, out)
	}
}

func TestApplyRefusesAStaleBaseWithTheConflict(t *testing.T) {
	a := startAdmin(t)
	if code, _, _ := a.run(t, "apply", writeFile(t, tiers), "-m", "first"); code != ExitOK {
		t.Fatal("first apply failed")
	}
	// A pipeline that diffed against v1 applies after someone else saved v2.
	other := strings.Replace(tiers, `"rps":10`, `"rps":11`, 1)
	var out, errb bytes.Buffer
	code := Main([]string{"apply", "-url", a.url, "-token", testToken, "-base", "1", "-m", "late", writeFile(t, other)}, nil, &out, &errb)
	if code != ExitError || !strings.Contains(errb.String(), "409") || !strings.Contains(errb.String(), "current version is v2") {
		t.Errorf("stale base: exit %d, %q", code, errb.String())
	}
	if cur, _ := a.svc.Current(context.Background()); cur.Number != 2 {
		t.Errorf("a stale apply saved v%d", cur.Number)
	}
}

func TestErrorsExitTwoNamingTheInput(t *testing.T) {
	a := startAdmin(t)
	f := writeFile(t, tiers)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"validate", "-url", "http://127.0.0.1:1", "-token", testToken, f}, "the admin at http://127.0.0.1:1"},
		{[]string{"validate", "-url", a.url, "-token", "wrong-token-wrong-token", f}, "refused the token (401)"},
		{[]string{"validate", "-url", a.url, "-token", ""}, "-token: empty"},
		{[]string{"validate", "-url", "ftp://x", "-token", testToken, f}, "-url:"},
		{[]string{"validate", "-url", a.url, "-token", testToken, filepath.Join(t.TempDir(), "missing.json")}, "reading the policy"},
		{[]string{"apply", "-url", a.url, "-token", testToken, f}, "-m MESSAGE is required"},
		{[]string{"frobnicate", "-url", a.url, "-token", testToken}, `unknown command "frobnicate"`},
	} {
		t.Setenv("SLUICE_ADMIN_TOKEN", "")
		var out, errb bytes.Buffer
		code := Main(tc.args, strings.NewReader(""), &out, &errb)
		if code != ExitError || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v: exit %d, %q; want 2 naming %q", tc.args, code, errb.String(), tc.want)
		}
	}
}

func TestURLAndTokenComeFromTheEnvironment(t *testing.T) {
	a := startAdmin(t)
	t.Setenv("SLUICE_ADMIN_URL", a.url)
	t.Setenv("SLUICE_ADMIN_TOKEN", testToken)
	var out, errb bytes.Buffer
	if code := Main([]string{"validate", "-"}, strings.NewReader(tiers), &out, &errb); code != ExitOK {
		t.Errorf("exit %d, %q %q", code, out.String(), errb.String())
	}
}

// FuzzArgs: any arguments give an exit code and never a panic; without a
// reachable admin nothing but parsing and file errors can happen.
func FuzzArgs(f *testing.F) {
	f.Add("apply policy.json -m msg -base 3")
	f.Add("diff - -url http://127.0.0.1:1")
	f.Add("export -o")
	f.Add("validate -timeout x")
	f.Add("overrides - -rule r -replace -m msg")
	f.Fuzz(func(t *testing.T, line string) {
		args := strings.Fields(line)
		args = append(args, "-url", "http://127.0.0.1:1", "-token", "fuzz-token-0123456789", "-timeout", "50ms")
		var out, errb bytes.Buffer
		code := Main(args, strings.NewReader("{}"), &out, &errb)
		if code < ExitOK || code > ExitError {
			t.Fatalf("exit %d", code)
		}
	})
}

func TestValidatePrintsWarningsAndStillExitsZero(t *testing.T) {
	a := startAdmin(t)
	catchAll := `{"rules":[{"name":"per-ip","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":2}},
		{"name":"per-key","limit_keys":["header:x-api-key"],"algorithm":"token_bucket","algorithm_config":{"rps":5,"burst":10}}]}`
	code, out, errs := a.run(t, "validate", writeFile(t, catchAll))
	if code != ExitOK || !strings.Contains(out, `warning: rule "per-key": never applies: rule "per-ip" before it`) {
		t.Errorf("exit %d, output %q %q; want 0 and the warning", code, out, errs)
	}
	if _, out, _ := a.run(t, "validate", writeFile(t, tiers)); strings.Contains(out, "warning") {
		t.Errorf("the tiers policy warns: %q", out)
	}
}

// tiersTests pass against tiers (a burst of 20 per key).
const tiersTests = `
tests:
  - name: a key gets a burst of 20
    request: {headers: {x-api-key: k1}}
    steps:
      - repeat: 20
        expect: {status: 200, rule: free}
      - expect: {status: 429, rule: free}
`

func writeTests(t *testing.T, content string) string {
	p := filepath.Join(t.TempDir(), "policy.tests.yaml")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func runOffline(stdin string, args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := Main(args, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

func TestTestRunsThePolicysTestsWithoutAnAdmin(t *testing.T) {
	t.Setenv("SLUICE_ADMIN_TOKEN", "")
	demo, demoTests := "../../plugin/gateway/demo-config.json", "../../plugin/gateway/demo-config.tests.yaml"
	if code, out, errs := runOffline("", "test", demo, demoTests); code != ExitOK || !strings.HasPrefix(out, "PASS: 7 tests, ") {
		t.Errorf("demo policy: exit %d, %q %q", code, out, errs)
	}
	if code, out, _ := runOffline("", "test", "-v", writeFile(t, tiers), writeTests(t, tiersTests)); code != ExitOK ||
		out != "ok    a key gets a burst of 20 (21 requests)\nPASS: 1 test, 21 requests\n" {
		t.Errorf("-v: exit %d, %q", code, out)
	}
	burst30 := strings.Replace(tiers, `"burst":20`, `"burst":30`, 1)
	code, out, _ := runOffline(burst30, "test", "-", writeTests(t, tiersTests))
	if code != ExitChanges || !strings.Contains(out, "FAIL  a key gets a burst of 20 (line 3)\n      tests[0].steps[1] (line 8), request 1 of 1, at +0s:\n        status: got 200, want 429\n") {
		t.Errorf("failing test: exit %d, %q", code, out)
	}
	if code, out, _ := runOffline(perIP, "test", "-", writeTests(t, tiersTests)); code != ExitChanges || !strings.Contains(out, `rule: no rule is named "free"`) {
		t.Errorf("a rule the policy lacks: exit %d, %q", code, out)
	}
	if code, out, _ := runOffline("", "test", writeFile(t, bad), writeTests(t, tiersTests)); code != ExitChanges || !strings.Contains(out, "rules[0].algorithm_config.burst: ") {
		t.Errorf("invalid policy: exit %d, %q", code, out)
	}
	code, _, errs := runOffline("", "test", writeFile(t, tiers), writeTests(t, "tests:\n  - name: a\n    expect: {status: 2000}\n"))
	if code != ExitError || !strings.Contains(errs, `tests[0].expect.status (line 3): "2000" is not a whole number from 100 to 599`) {
		t.Errorf("invalid tests: exit %d, %q", code, errs)
	}
	junit := filepath.Join(t.TempDir(), "report.xml")
	if code, _, _ := runOffline(burst30, "test", "-junit", junit, "-", writeTests(t, tiersTests)); code != ExitChanges {
		t.Errorf("-junit: exit %d", code)
	}
	if x, err := os.ReadFile(junit); err != nil || !strings.Contains(string(x), `<testsuite name="policy.tests.yaml" tests="1" failures="1">`) ||
		!strings.Contains(string(x), `<failure message="status: got 200, want 429">`) {
		t.Errorf("the JUnit report: %v\n%s", err, x)
	}
	if code, _, errs := runOffline("", "test", writeFile(t, tiers)); code != ExitError || !strings.Contains(errs, "give the policy file and its test file") {
		t.Errorf("one file: exit %d, %q", code, errs)
	}
}

func TestApplyWithTestsSavesNothingUnlessTheyPass(t *testing.T) {
	a := startAdmin(t)
	failing := writeTests(t, strings.Replace(tiersTests, "repeat: 20", "repeat: 21", 1))
	code, out, _ := a.run(t, "apply", writeFile(t, tiers), "-m", "free tier", "-tests", failing)
	if code != ExitChanges || !strings.Contains(out, "FAIL: 1 of 1 test failed") {
		t.Fatalf("failing tests: exit %d, %q", code, out)
	}
	if cur, _ := a.svc.Current(context.Background()); cur.Number != 1 {
		t.Fatalf("a failing test saved v%d", cur.Number)
	}
	if code, out, _ := a.run(t, "diff", writeFile(t, tiers), "-tests", failing); code != ExitChanges || strings.Contains(out, "--- v1") {
		t.Errorf("diff with failing tests: exit %d, %q; want the failure, no diff", code, out)
	}
	code, out, errs := a.run(t, "apply", writeFile(t, tiers), "-m", "free tier", "-tests", writeTests(t, tiersTests))
	if code != ExitOK || !strings.Contains(out, "PASS: 1 test, 21 requests") || !strings.Contains(out, "applied: v2") {
		t.Fatalf("passing tests: exit %d, %q %q", code, out, errs)
	}
	if code, out, _ := a.run(t, "validate", writeFile(t, tiers), "-tests", failing); code != ExitChanges || strings.Contains(out, "valid\n") {
		t.Errorf("validate with failing tests: exit %d, %q", code, out)
	}
}

func TestApplyWithTestsMakesThemTheAdminsAndTheAdminsTestsGuardApply(t *testing.T) {
	a := startAdmin(t)
	passing := writeTests(t, tiersTests)
	if code, out, errs := a.run(t, "apply", writeFile(t, tiers), "-m", "free tier", "-tests", passing); code != ExitOK {
		t.Fatalf("apply: exit %d, %q %q", code, out, errs)
	}
	saved, err := a.svc.Tests(context.Background())
	if err != nil || saved.Revision != 1 || saved.Body != tiersTests {
		t.Fatalf("the admin's tests: %+v, %v", saved, err)
	}
	// Without -tests, the admin's saved tests still guard the save.
	burst30 := strings.Replace(tiers, `"burst":20`, `"burst":30`, 1)
	code, out, _ := a.run(t, "apply", writeFile(t, burst30), "-m", "burst 30")
	if code != ExitChanges || !strings.Contains(out, "refused: the policy fails 1 of 1 saved tests") || !strings.Contains(out, "status: got 200, want 429") {
		t.Fatalf("a save the admin's tests refuse: exit %d, %q", code, out)
	}
	if code, out, errs := a.run(t, "apply", writeFile(t, burst30), "-m", "burst 30", "-skip-tests"); code != ExitOK || !strings.Contains(out, "applied: v3") {
		t.Fatalf("-skip-tests: exit %d, %q %q", code, out, errs)
	}
	if code, _, errs := a.run(t, "apply", writeFile(t, tiers), "-m", "x", "-skip-tests", "-tests", passing); code != ExitError || !strings.Contains(errs, "give one") {
		t.Fatalf("both: exit %d, %q", code, errs)
	}
}

func TestApplyOnAnAdminRequiringReviewProposesTheChange(t *testing.T) {
	a := startAdmin(t)
	a.svc.SetReviewRequired(true)
	code, out, errs := a.run(t, "apply", writeFile(t, tiers), "-m", "free tier")
	if code != ExitOK || !strings.Contains(out, "proposed as change 1 (based on v1)") || strings.Contains(out, "applied") {
		t.Fatalf("apply under review: exit %d, %q %q", code, out, errs)
	}
	if cur, _ := a.svc.Current(context.Background()); cur.Number != 1 {
		t.Fatalf("a proposal saved v%d", cur.Number)
	}
	if code, out, _ := a.run(t, "changes"); code != ExitOK || !strings.Contains(out, "change 1 on v1 by gitops") || !strings.Contains(out, "free tier") || strings.Contains(out, "stale") {
		t.Fatalf("changes: exit %d, %q", code, out)
	}
	// The admin token proposed it as "gitops" and approves it as "api":
	// with accounts' tokens, each is its account.
	code, out, errs = a.run(t, "approve", "1")
	if code != ExitOK || !strings.Contains(out, "approved: change 1 saved as v2") {
		t.Fatalf("approve: exit %d, %q %q", code, out, errs)
	}
	if code, _, errs := a.run(t, "reject", "1", "-m", "late"); code != ExitError || !strings.Contains(errs, "409") {
		t.Fatalf("rejecting a decided change: exit %d, %q", code, errs)
	}
	if code, out, _ := a.run(t, "changes"); code != ExitOK || !strings.Contains(out, "no change waits for review") {
		t.Fatalf("changes after: exit %d, %q", code, out)
	}
	if code, _, errs := a.run(t, "approve", "x"); code != ExitError || !strings.Contains(errs, `"x" is not a change number`) {
		t.Fatalf("a bad number: exit %d, %q", code, errs)
	}
}

func writeCSV(t *testing.T, content string) string {
	p := filepath.Join(t.TempDir(), "plans.csv")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// overrides merges a CSV into a rule as the admin's import does: without
// -m it shows the change and exits 1; with -m it saves on the version the
// merge read; a bad CSV names its line, an unknown rule exits 2.
func TestOverridesMergesACSVIntoARuleAndSavesItWithAMessage(t *testing.T) {
	a := startAdmin(t)
	csv := writeCSV(t, "key,burst,until\n10.0.0.1,40,2199-01-01T00:00:00Z\n10.0.0.2,30,\n")
	code, out, errs := a.run(t, "overrides", csv, "-rule", "per-ip")
	if code != ExitChanges || !strings.Contains(out, `rule "per-ip": 2 added, 0 replaced, 2 overrides`) ||
		!regexp.MustCompile(`(?m)^\+\s+"until": "2199-01-01T00:00:00Z"$`).MatchString(out) || !strings.Contains(out, "current version: 1") {
		t.Fatalf("preview: exit %d, %q %q", code, out, errs)
	}
	if cur, _ := a.svc.Current(context.Background()); cur.Number != 1 {
		t.Fatalf("the preview saved v%d", cur.Number)
	}
	code, out, errs = a.run(t, "overrides", csv, "-rule", "per-ip", "-m", "contracts from billing")
	if code != ExitOK || !strings.Contains(out, "applied: v2 (based on v1)") {
		t.Fatalf("save: exit %d, %q %q", code, out, errs)
	}
	cur, err := a.svc.Current(context.Background())
	if err != nil || cur.Message != "contracts from billing" || !strings.Contains(string(cur.JSON), `"until":"2199-01-01T00:00:00Z"`) {
		t.Fatalf("current %s %v", cur.JSON, err)
	}
	if code, out, _ := a.run(t, "overrides", csv, "-rule", "per-ip", "-m", "again"); code != ExitOK || !strings.Contains(out, "no changes against the current version v2") {
		t.Errorf("the same table again: exit %d, %q", code, out)
	}
	// A save based on a version someone else saved after is refused.
	if code, _, errs := a.run(t, "overrides", writeCSV(t, "key,burst\n10.0.0.3,50\n"), "-rule", "per-ip", "-m", "late", "-base", "1"); code != ExitError || !strings.Contains(errs, "stale") {
		t.Errorf("stale base: exit %d, %q", code, errs)
	}
	for _, c := range []struct {
		args     []string
		code     int
		out, err string
	}{
		{[]string{writeCSV(t, "key,burst\n10.0.0.1,ten\n"), "-rule", "per-ip"}, ExitChanges, `csv: line 2: burst: "ten" is not a number`, ""},
		{[]string{writeCSV(t, "key,burst,until\n10.0.0.1,40,soon\n"), "-rule", "per-ip"}, ExitChanges, `until: "soon" is not an RFC 3339 time`, ""},
		{[]string{writeCSV(t, "key,burst\n10.0.0.1,4\n"), "-rule", "per-ip"}, ExitChanges, "rules[0].overrides[0].algorithm_config.burst", ""},
		{[]string{csv, "-rule", "nope"}, ExitError, "", `-rule: no rule named "nope"`},
		{[]string{csv}, ExitError, "", "-rule: give the rule"},
		{[]string{"-rule", "per-ip"}, ExitError, "", "give one CSV file"},
	} {
		code, out, errs := a.run(t, append([]string{"overrides"}, c.args...)...)
		if code != c.code || !strings.Contains(out, c.out) || !strings.Contains(errs, c.err) {
			t.Errorf("%v: exit %d, %q %q; want %d with %q %q", c.args, code, out, errs, c.code, c.out, c.err)
		}
	}
}

// changes marks a change whose base is no longer the current version:
// approving it would be refused.
func TestChangesMarksAChangeOnAStaleBase(t *testing.T) {
	a := startAdmin(t)
	a.svc.SetReviewRequired(true)
	if code, out, errs := a.run(t, "apply", writeFile(t, tiers), "-m", "free tier"); code != ExitOK || !strings.Contains(out, "proposed as change 1") {
		t.Fatalf("apply under review: exit %d, %q %q", code, out, errs)
	}
	a.svc.SetReviewRequired(false)
	if code, out, errs := a.run(t, "apply", writeFile(t, `{"rules":[{"name":"per-ip","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":5,"burst":20}}]}`), "-m", "shadow"); code != ExitOK || !strings.Contains(out, "applied: v2") {
		t.Fatalf("a save meanwhile: exit %d, %q %q", code, out, errs)
	}
	if code, out, _ := a.run(t, "changes"); code != ExitOK || !strings.Contains(out, "change 1 on v1 by gitops, ") || !strings.Contains(out, "free tier [stale: a newer version was saved") {
		t.Errorf("changes: exit %d, %q", code, out)
	}
}

func TestResetLetsAClientBackInAndResetsListsIt(t *testing.T) {
	a := startAdmin(t)
	if code, out, errs := a.run(t, "apply", writeFile(t, tiers), "-m", "tiers"); code != ExitOK {
		t.Fatalf("apply: exit %d, %q %q", code, out, errs)
	}
	code, out, errs := a.run(t, "reset", "-rule", "free", "sk-live-0123456789")
	if code != ExitOK || !strings.Contains(out, "under free") || strings.Contains(out, "0123456789") {
		t.Fatalf("reset: exit %d, %q %q; want it done, the key masked", code, out, errs)
	}
	if code, out, _ := a.run(t, "reset", "-rule", "nope", "k"); code != ExitChanges || !strings.Contains(out, "not reset: rule:") {
		t.Errorf("a rule that does not exist: exit %d, %q; want 1 naming the field", code, out)
	}
	if code, _, errs := a.run(t, "reset", "k"); code != ExitError || !strings.Contains(errs, "-rule RULE") {
		t.Errorf("without -rule: exit %d, %q", code, errs)
	}
	code, out, _ = a.run(t, "resets")
	if code != ExitOK || strings.Count(out, "under free") != 1 || strings.Contains(out, "0123456789") {
		t.Errorf("resets: exit %d, %q; want the one reset, its key masked", code, out)
	}
}

// reset -all starts every identity of the rule over, and resets lists it
// as every identity; a key with -all, and a rule whose identities the
// filter cannot list, are refused.
func TestResetAllStartsTheRuleOverAndResetsListsIt(t *testing.T) {
	a := startAdmin(t)
	exact := `{"rules":[{"name":"free","limit_keys":["header:x-api-key"],"algorithm":"token_bucket","algorithm_config":{"rps":10,"burst":20}},
	  {"name":"exact","limit_keys":["header:x-api-key"],"algorithm":"token_bucket","max_keys":0,"algorithm_config":{"rps":10,"burst":20}}]}`
	if code, out, errs := a.run(t, "apply", writeFile(t, exact), "-m", "tiers"); code != ExitOK {
		t.Fatalf("apply: exit %d, %q %q", code, out, errs)
	}
	code, out, errs := a.run(t, "reset", "-rule", "free", "-all")
	if code != ExitOK || !strings.Contains(out, "reset every identity under free (") {
		t.Fatalf("reset -all: exit %d, %q %q", code, out, errs)
	}
	if code, out, _ := a.run(t, "reset", "-rule", "exact", "-all"); code != ExitChanges || !strings.Contains(out, `not reset: all: "exact" keeps exact storage`) {
		t.Errorf("a rule of exact storage: exit %d, %q; want 1 naming all", code, out)
	}
	if code, _, errs := a.run(t, "reset", "-rule", "free", "-all", "k"); code != ExitError || !strings.Contains(errs, "give no key with it") {
		t.Errorf("-all with a key: exit %d, %q", code, errs)
	}
	if code, _, errs := a.run(t, "reset", "-all"); code != ExitError || !strings.Contains(errs, "-rule RULE -all") {
		t.Errorf("-all without -rule: exit %d, %q", code, errs)
	}
	if code, out, errs := a.run(t, "reset", "-rule", "free", "sk-live-0123456789"); code != ExitOK {
		t.Fatalf("reset of one key: exit %d, %q %q", code, out, errs)
	}
	code, out, _ = a.run(t, "resets")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != ExitOK || len(lines) != 2 || !strings.HasSuffix(lines[1], ": every identity under free") ||
		!strings.HasSuffix(lines[0], " under free") || strings.Contains(lines[0], "every identity") || strings.Contains(out, "0123456789") {
		t.Errorf("resets: exit %d, %q; want the key's reset, then every identity's", code, out)
	}
}
