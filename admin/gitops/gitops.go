// Package gitops is `ratelimit-admin policy`: a client of a running
// admin's API for CI pipelines that keep the policy in Git.
//
//	ratelimit-admin policy export   [-o FILE]            current policy as JSON
//	ratelimit-admin policy validate FILE                 the filter's own validation, errors with JSON paths
//	ratelimit-admin policy diff     FILE                 unified diff against the current version
//	ratelimit-admin policy apply    FILE -m MESSAGE [-base N]
//	ratelimit-admin policy test     FILE TESTS [-v]      the policy's tests, offline (shared/policycheck)
//	ratelimit-admin policy check    FILE [TESTS] | -values VALUES  offline, what an admin following the file would do (check.go)
//	ratelimit-admin policy changes | approve N | reject N  changes waiting for review (-require-review)
//	ratelimit-admin policy overrides CSV -rule R [-m MESSAGE]  a table of overrides merged into rule R
//	ratelimit-admin policy reset -rule R KEY | -rule R -all | resets  every Envoy forgets KEY's (every identity's) state under R (resets.go)
//
// validate, diff and apply take -tests TESTS too: the policy must pass
// them before anything is shown or saved, and apply saves them as the
// admin's saved tests with the version. The admin also runs its saved
// tests on every save (apply -skip-tests saves without them).
//
// The admin's URL and token come from -url and -token, or SLUICE_ADMIN_URL
// and SLUICE_ADMIN_TOKEN (test and check need neither). Exit codes: 0 ok (valid,
// no changes, applied, tests passed), 1 changes found, the policy invalid
// or a test failed, 2 any other error (the admin unreachable, a refused
// token, a stale base version, a test file that cannot be read).
package gitops

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/admin/policies"
	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/policycheck"
)

// Exit codes.
const (
	ExitOK      = 0
	ExitChanges = 1 // diff found changes, or the policy is invalid
	ExitError   = 2
)

// DefaultURL is the admin's address when neither -url nor SLUICE_ADMIN_URL is set.
const DefaultURL = "http://127.0.0.1:9000"

const usage = `usage: ratelimit-admin policy COMMAND [flags] [FILE]

Commands (FILE is a policy JSON file, "-" for standard input):
  export   [-o FILE]                 write the current policy (stdout by default)
  validate FILE [-tests TESTS]       validate with the filter's parser; exit 1 if invalid
  diff     FILE [-tests TESTS]       show the change against the current version; exit 1 if any
  apply    FILE -m MESSAGE [-base N] [-tests TESTS | -skip-tests]
                                     save FILE as a new version based on N (default: the current one);
                                     a stale base is refused (exit 2); with -tests, the tests are saved
                                     with it as the admin's; a save its saved tests refuse exits 1
  overrides CSV -rule RULE [-replace] [-m MESSAGE [-base N]]
                                     merge a CSV of overrides (key, limits, from, until) into RULE, as the
                                     admin's import does: without -m, show the change (exit 1 if any); with
                                     -m, save it as apply does; -replace makes the CSV the rule's whole table
  reset    -rule RULE KEY            every Envoy forgets the state of identity KEY (written as an override's
                                     key) under RULE: a blocked client let back in, a spent quota started over;
                                     exit 1 if the admin refuses the rule or the key
  reset    -rule RULE -all           every Envoy forgets the state of every identity under RULE: the rule starts
                                     over; exit 1 if the admin refuses (a rule with "max_keys": 0, say)
  resets                             list the recent resets, keys masked
  changes                            list the changes waiting for review (an admin with -require-review)
  approve  N [-skip-tests]           approve change N: it is saved and pushed
  reject   N [-m REASON]             reject change N
  test     FILE TESTS [-v] [-junit OUT]
                                     run the policy's tests (a YAML file, docs/policy-tests.md) with the
                                     filter's own decisions, offline; exit 1 if one fails
  check    FILE [TESTS] | -values VALUES [-v] [-junit OUT]
                                     offline, what an admin following the policy (-policy-file, the chart's
                                     policySource: git) does with it: the filter's parser, the warnings, the
                                     tests; -values reads the chart's policy and policyTests; exit 1 if the
                                     admin would not apply it

Flags:
  -url URL      the admin (SLUICE_ADMIN_URL, default ` + DefaultURL + `); not for test and check
  -token TOKEN  the admin token (SLUICE_ADMIN_TOKEN); not for test and check
  -timeout D    per request (default 30s; 60s for reset -all)
  -tests TESTS  validate, diff, apply: the policy must pass these tests first (exit 1 otherwise)
  -skip-tests   apply: save without running the admin's saved tests (its audit log records it)
  -junit OUT    test, check, and with -tests: also write the report as JUnit XML to OUT
  -values FILE  check: a Helm values file of the chart, whose policy and policyTests are checked

Exit codes: 0 ok, 1 changes, invalid or a test failed, 2 error.
`

// Main runs one command and returns its exit code.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	code, err := run(args, stdin, stdout, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "ratelimit-admin policy:", err)
	}
	return code
}

// resetAllTimeout is reset -all's request timeout unless -timeout is
// given: longer than the admin's 30 s for a global rule's backend.
const resetAllTimeout = 60 * time.Second

// flagSet says whether the command line set flag name.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

type client struct {
	base  string
	token string
	http  *http.Client
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	if len(args) == 0 || args[0] == "-h" || args[0] == "help" || args[0] == "--help" {
		fmt.Fprint(stderr, usage)
		if len(args) == 0 {
			return ExitError, nil
		}
		return ExitOK, nil
	}
	cmd := args[0]
	fs := flag.NewFlagSet("ratelimit-admin policy "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	adminURL := fs.String("url", envOr("SLUICE_ADMIN_URL", DefaultURL), "the admin's URL")
	token := fs.String("token", os.Getenv("SLUICE_ADMIN_TOKEN"), "the admin token")
	timeout := fs.Duration("timeout", 30*time.Second, "per request")
	out := fs.String("o", "", "export: write to this file")
	message := fs.String("m", "", "apply: the version's message")
	author := fs.String("author", envOr("SLUICE_AUTHOR", "gitops"), "apply: the version's author")
	base := fs.Int64("base", 0, "apply: the version FILE is based on (default: the current one)")
	testsFile := fs.String("tests", "", "validate, diff, apply: a test file the policy must pass first")
	verbose := fs.Bool("v", false, "test: list every test, not only the failing ones")
	junit := fs.String("junit", "", "test, and -tests: also write the report as JUnit XML to this file, for CI")
	skipTests := fs.Bool("skip-tests", false, "apply: save without running the admin's saved tests (recorded in its audit log)")
	rule := fs.String("rule", "", "overrides: the rule that gets the CSV's overrides; reset: the rule whose state is forgotten")
	all := fs.Bool("all", false, "reset: every identity of -rule, instead of one KEY")
	replace := fs.Bool("replace", false, "overrides: the CSV becomes the rule's whole table")
	values := fs.String("values", "", "check: a Helm values file whose policy and policyTests are checked")
	// Flags may come before or after FILE (apply FILE -m "message").
	var positional []string
	rest := args[1:]
	for {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return ExitOK, nil
			}
			return ExitError, err
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	if cmd == "check" {
		return check(positional, *values, *verbose, *junit, stdin, stdout)
	}
	if cmd == "test" {
		if len(positional) != 2 {
			return ExitError, errors.New("test: give the policy file and its test file (policy.json policy.tests.yaml; - reads the policy from standard input)")
		}
		doc, err := readInput(positional[0], stdin)
		if err != nil {
			return ExitError, fmt.Errorf("reading the policy: %w", err)
		}
		norm, err := policies.Validate(doc)
		var ve *policies.ValidationError
		if errors.As(err, &ve) {
			printValidation(stdout, ve)
			return ExitChanges, nil
		} else if err != nil {
			return ExitError, err
		}
		return runTests(norm, positional[1], *verbose, *junit, stdout)
	}
	u, err := url.Parse(*adminURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return ExitError, fmt.Errorf("-url: %q is not an http:// or https:// URL of the admin", *adminURL)
	}
	if *token == "" {
		return ExitError, errors.New("-token: empty; give the admin token with -token or SLUICE_ADMIN_TOKEN")
	}
	if cmd == "reset" && *all && !flagSet(fs, "timeout") {
		// A global rule's reset of every identity has the rate limit
		// service scan its backend, for up to 30 s, before answering.
		*timeout = resetAllTimeout
	}
	c := &client{base: strings.TrimSuffix(u.String(), "/"), token: *token, http: &http.Client{Timeout: *timeout}}
	ctx := context.Background()

	needFile := func() ([]byte, error) {
		if len(positional) != 1 {
			return nil, fmt.Errorf("%s: give one policy file (or - for standard input)", cmd)
		}
		b, err := readInput(positional[0], stdin)
		if err != nil {
			return nil, fmt.Errorf("reading the policy: %w", err)
		}
		return b, nil
	}
	// testsPass runs -tests on the normalized policy (ExitOK without it).
	testsPass := func(norm []byte) (int, error) {
		if *testsFile == "" {
			return ExitOK, nil
		}
		return runTests(norm, *testsFile, false, *junit, stdout)
	}

	switch cmd {
	case "overrides":
		return c.overrides(ctx, overridesRequest{positional: positional, rule: *rule, replace: *replace,
			save: saveBody{base: *base, message: *message, author: *author, skipTests: *skipTests}}, stdin, stdout)
	case "changes":
		return c.changes(ctx, stdout)
	case "reset":
		return c.reset(ctx, *rule, *all, positional, stdout)
	case "resets":
		return c.resets(ctx, stdout)
	case "approve", "reject":
		if len(positional) != 1 {
			return ExitError, fmt.Errorf("%s: give the change's number (ratelimit-admin policy changes lists them)", cmd)
		}
		return c.decide(ctx, cmd, positional[0], *message, *skipTests, stdout)
	case "export":
		if len(positional) != 0 {
			return ExitError, fmt.Errorf("export: unexpected argument %q (use -o FILE)", positional[0])
		}
		cur, err := c.current(ctx)
		if err != nil {
			return ExitError, err
		}
		text := policies.Pretty(cur.Policy)
		if *out == "" {
			io.WriteString(stdout, text)
		} else if err := os.WriteFile(*out, []byte(text), 0o644); err != nil {
			return ExitError, fmt.Errorf("-o: %w", err)
		}
		fmt.Fprintf(stderr, "exported v%d\n", cur.Version)
		return ExitOK, nil
	case "validate":
		doc, err := needFile()
		if err != nil {
			return ExitError, err
		}
		norm, code, err := c.validate(ctx, doc, stdout)
		if err != nil || code != ExitOK {
			return code, err
		}
		if code, err := testsPass(norm); err != nil || code != ExitOK {
			return code, err
		}
		fmt.Fprintf(stdout, "%s: valid\n", positional[0])
		return ExitOK, nil
	case "diff", "apply":
		doc, err := needFile()
		if err != nil {
			return ExitError, err
		}
		if cmd == "apply" && strings.TrimSpace(*message) == "" {
			return ExitError, errors.New("apply: -m MESSAGE is required (it is recorded with the version)")
		}
		norm, code, err := c.validate(ctx, doc, stdout)
		if err != nil || code != ExitOK {
			return code, err
		}
		if code, err := testsPass(norm); err != nil || code != ExitOK {
			return code, err
		}
		cur, err := c.current(ctx)
		if err != nil {
			return ExitError, err
		}
		hunks := policies.LineDiff(policies.Pretty(cur.Policy), policies.Pretty(norm))
		if len(hunks) == 0 {
			fmt.Fprintf(stdout, "no changes against the current version v%d\n", cur.Version)
			return ExitOK, nil
		}
		if cmd == "diff" {
			io.WriteString(stdout, policies.Unified(fmt.Sprintf("v%d", cur.Version), positional[0], hunks))
			fmt.Fprintf(stdout, "current version: %d\n", cur.Version)
			return ExitChanges, nil
		}
		b := *base
		if b == 0 {
			b = cur.Version
		}
		if *skipTests && *testsFile != "" {
			return ExitError, errors.New("apply: -skip-tests and -tests: give one (-tests replaces the admin's saved tests, which the policy must then pass)")
		}
		var tests *string
		if *testsFile != "" {
			t, err := os.ReadFile(*testsFile)
			if err != nil {
				return ExitError, fmt.Errorf("reading the tests: %w", err)
			}
			s := string(t)
			tests = &s
		}
		v, code, err := c.save(ctx, saveBody{doc: doc, base: b, message: *message, author: *author, tests: tests, skipTests: *skipTests}, stdout)
		if err != nil || code != ExitOK || v == 0 { // 0: proposed for review
			return code, err
		}
		fmt.Fprintf(stdout, "applied: v%d (based on v%d)\n", v, b)
		return ExitOK, nil
	}
	fmt.Fprint(stderr, usage)
	return ExitError, fmt.Errorf("unknown command %q", cmd)
}

// readInput reads a named file, or standard input for "-".
func readInput(name string, stdin io.Reader) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(io.LimitReader(stdin, policies.MaxConfigBytes+1))
	}
	return os.ReadFile(name)
}

// runTests runs the test file against the normalized policy and prints
// the report (and writes it as JUnit XML to junit, unless ""):
// ExitChanges when a test fails, ExitError when the file cannot be read.
func runTests(norm []byte, testsFile string, verbose bool, junit string, stdout io.Writer) (int, error) {
	b, err := os.ReadFile(testsFile)
	if err != nil {
		return ExitError, fmt.Errorf("reading the tests: %w", err)
	}
	return runTestsOf(norm, b, testsFile, verbose, junit, stdout)
}

// runTestsOf is runTests on a test file's content, named testsFile.
func runTestsOf(norm, b []byte, testsFile string, verbose bool, junit string, stdout io.Writer) (int, error) {
	suite, err := policycheck.Parse(b)
	if err != nil {
		return ExitError, fmt.Errorf("%s:\n%w", testsFile, err)
	}
	cfg, err := policy.Parse(norm)
	if err != nil {
		return ExitError, err // the admin has validated it
	}
	rep := policycheck.Run(cfg, suite, policycheck.Options{})
	io.WriteString(stdout, rep.Text(verbose))
	if junit != "" {
		if err := os.WriteFile(junit, rep.JUnit(filepath.Base(testsFile)), 0o644); err != nil {
			return ExitError, fmt.Errorf("-junit: %w", err)
		}
	}
	if rep.Failed() > 0 {
		return ExitChanges, nil
	}
	return ExitOK, nil
}

// printValidation prints a policy's problems, each at its JSON path, as
// the admin's answer prints them.
func printValidation(w io.Writer, ve *policies.ValidationError) {
	fmt.Fprintln(w, "invalid: the policy has errors")
	for _, e := range ve.Errors {
		path := e.Path
		if path == "" {
			path = "(policy)"
		}
		fmt.Fprintf(w, "  %s: %s\n", path, e.Message)
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

type currentJSON struct {
	Version int64           `json:"version"`
	Policy  json.RawMessage `json:"policy"`
	// Proposed is the change a save became on an admin that requires
	// review (202): nothing is saved until another person approves it.
	Proposed *struct {
		ID  int64  `json:"id"`
		URL string `json:"url"`
	} `json:"proposed"`
}

// do sends one request and decodes a JSON answer into out; it returns the
// status and the error message of a non-2xx answer.
func (c *client) do(ctx context.Context, method, path string, body any, out any) (int, map[string]any, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("the admin at %s: %w", c.base, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return resp.StatusCode, nil, fmt.Errorf("the admin at %s: reading the answer: %w", c.base, err)
	}
	if resp.StatusCode/100 == 2 {
		if out != nil {
			if err := json.Unmarshal(raw, out); err != nil {
				return resp.StatusCode, nil, fmt.Errorf("the admin at %s answered %s %s with something not JSON: %w", c.base, method, path, err)
			}
		}
		return resp.StatusCode, nil, nil
	}
	var e map[string]any
	if json.Unmarshal(raw, &e) != nil {
		e = map[string]any{"error": strings.TrimSpace(string(raw))}
	}
	if resp.StatusCode == http.StatusUnauthorized {
		return resp.StatusCode, e, fmt.Errorf("the admin at %s refused the token (401): %v", c.base, e["error"])
	}
	return resp.StatusCode, e, nil
}

func (c *client) current(ctx context.Context) (currentJSON, error) {
	var cur currentJSON
	status, e, err := c.do(ctx, "GET", "/api/v1/policy", nil, &cur)
	if err != nil {
		return cur, err
	}
	if e != nil {
		return cur, fmt.Errorf("GET /api/v1/policy: %d: %v", status, e["error"])
	}
	return cur, nil
}

// validate returns the normalized policy, or prints the problems (exit 1).
func (c *client) validate(ctx context.Context, doc []byte, stdout io.Writer) (json.RawMessage, int, error) {
	if !json.Valid(doc) {
		fmt.Fprintln(stdout, "invalid: the file is not valid JSON")
		return nil, ExitChanges, nil
	}
	var ok struct {
		Normalized json.RawMessage `json:"normalized"`
		Warnings   []struct{ Rule, Message string }
	}
	status, e, err := c.do(ctx, "POST", "/api/v1/policy/validate", map[string]json.RawMessage{"policy": doc}, &ok)
	switch {
	case err != nil:
		return nil, ExitError, err
	case e == nil:
		for _, w := range ok.Warnings { // valid, but probably not meant
			fmt.Fprintf(stdout, "warning: rule %q: %s\n", w.Rule, w.Message)
		}
		return ok.Normalized, ExitOK, nil
	case status == http.StatusUnprocessableEntity || status == http.StatusBadRequest:
		printProblems(stdout, e)
		return nil, ExitChanges, nil
	}
	return nil, ExitError, fmt.Errorf("POST /api/v1/policy/validate: %d: %v", status, e["error"])
}

// saveBody is what apply saves.
type saveBody struct {
	doc       []byte
	base      int64
	message   string
	author    string
	tests     *string // the tests saved with the version (nil: the admin's stay)
	skipTests bool
}

func (c *client) save(ctx context.Context, sb saveBody, stdout io.Writer) (int64, int, error) {
	var v currentJSON
	body := map[string]any{"base_version": sb.base, "policy": json.RawMessage(sb.doc), "message": sb.message, "author": sb.author}
	if sb.tests != nil {
		body["tests"] = *sb.tests
	}
	if sb.skipTests {
		body["skip_tests"] = true
	}
	status, e, err := c.do(ctx, "POST", "/api/v1/policy", body, &v)
	tests, _ := e["tests"].(map[string]any)
	switch {
	case err != nil:
		return 0, ExitError, err
	case e == nil && v.Proposed != nil:
		fmt.Fprintf(stdout, "proposed as change %d (based on v%d): the admin requires review; another editor approves it on its Changes page (or POST %s/approve), which saves and pushes it\n",
			v.Proposed.ID, sb.base, v.Proposed.URL)
		return 0, ExitOK, nil
	case e == nil:
		return v.Version, ExitOK, nil
	case status == http.StatusConflict:
		return 0, ExitError, fmt.Errorf("refused (409): the base version v%d is stale; the current version is v%v. Run diff again and apply on top of it",
			sb.base, num(e["current_version"]))
	case status == http.StatusUnprocessableEntity && tests != nil:
		fmt.Fprintf(stdout, "refused: %v\n", e["error"])
		fmt.Fprint(stdout, tests["text"])
		return 0, ExitChanges, nil
	case status == http.StatusUnprocessableEntity:
		printProblems(stdout, e)
		return 0, ExitChanges, nil
	}
	return 0, ExitError, fmt.Errorf("POST /api/v1/policy: %d: %v", status, e["error"])
}

func num(v any) string {
	if f, ok := v.(float64); ok {
		return strconv.FormatInt(int64(f), 10)
	}
	return fmt.Sprint(v)
}

func printProblems(w io.Writer, e map[string]any) {
	fmt.Fprintf(w, "invalid: %v\n", e["error"])
	errs, _ := e["errors"].([]any)
	for _, x := range errs {
		m, _ := x.(map[string]any)
		path, _ := m["path"].(string)
		if path == "" {
			path = "(policy)"
		}
		fmt.Fprintf(w, "  %s: %v\n", path, m["message"])
	}
	if f, ok := e["field"].(string); ok && f != "" {
		fmt.Fprintf(w, "  %s\n", f)
	}
}

// changes lists the open changes.
func (c *client) changes(ctx context.Context, stdout io.Writer) (int, error) {
	var out struct {
		ReviewRequired bool `json:"review_required"`
		Changes        []struct {
			ID      int64  `json:"id"`
			Base    int64  `json:"base_version"`
			Author  string `json:"author"`
			Message string `json:"message"`
			Created string `json:"created"`
			Stale   bool   `json:"stale"`
		} `json:"changes"`
	}
	status, e, err := c.do(ctx, "GET", "/api/v1/changes?state=open", nil, &out)
	if err != nil {
		return ExitError, err
	}
	if e != nil {
		return ExitError, fmt.Errorf("GET /api/v1/changes: %d: %v", status, e["error"])
	}
	if !out.ReviewRequired {
		fmt.Fprintln(stdout, "the admin does not require review (-require-review): saves are pushed at once")
	}
	for _, ch := range out.Changes {
		stale := ""
		if ch.Stale {
			stale = " [stale: a newer version was saved; approving it is refused until it is proposed again]"
		}
		fmt.Fprintf(stdout, "change %d on v%d by %s, %s: %s%s\n", ch.ID, ch.Base, ch.Author, ch.Created, ch.Message, stale)
	}
	if len(out.Changes) == 0 {
		fmt.Fprintln(stdout, "no change waits for review")
	}
	return ExitOK, nil
}

// decide approves or rejects change id.
func (c *client) decide(ctx context.Context, cmd, id, reason string, skipTests bool, stdout io.Writer) (int, error) {
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil || n <= 0 {
		return ExitError, fmt.Errorf("%s: %q is not a change number", cmd, id)
	}
	body := map[string]any{}
	if cmd == "reject" {
		body["reason"] = reason
	} else if skipTests {
		body["skip_tests"] = true
	}
	var v currentJSON
	status, e, err := c.do(ctx, "POST", fmt.Sprintf("/api/v1/changes/%d/%s", n, cmd), body, &v)
	tests, _ := e["tests"].(map[string]any)
	switch {
	case err != nil:
		return ExitError, err
	case e == nil && cmd == "approve":
		fmt.Fprintf(stdout, "approved: change %d saved as v%d\n", n, v.Version)
		return ExitOK, nil
	case e == nil:
		fmt.Fprintf(stdout, "rejected: change %d\n", n)
		return ExitOK, nil
	case status == http.StatusUnprocessableEntity && tests != nil:
		fmt.Fprintf(stdout, "refused: %v\n", e["error"])
		fmt.Fprint(stdout, tests["text"])
		return ExitChanges, nil
	}
	return ExitError, fmt.Errorf("%s change %d: %d: %v", cmd, n, status, e["error"])
}

// overridesRequest is what the overrides command was given.
type overridesRequest struct {
	positional []string
	rule       string
	replace    bool
	save       saveBody // message, author, base (0: the merge's), skipTests; doc is the merge's
}

// overrides merges a CSV of overrides into a rule on the admin (POST
// /api/v1/policy/overrides, which saves nothing) and shows the change, or,
// with a message, saves it on the version the merge read.
func (c *client) overrides(ctx context.Context, r overridesRequest, stdin io.Reader, stdout io.Writer) (int, error) {
	switch {
	case len(r.positional) != 1:
		return ExitError, errors.New("overrides: give one CSV file (or - for standard input)")
	case strings.TrimSpace(r.rule) == "":
		return ExitError, errors.New("overrides: -rule: give the rule that gets the overrides")
	}
	csv, err := readCSV(r.positional[0], stdin)
	if err != nil {
		return ExitError, fmt.Errorf("reading the CSV: %w", err)
	}
	var merged struct {
		Base     int64           `json:"base_version"`
		Added    int             `json:"added"`
		Replaced int             `json:"replaced"`
		Total    int             `json:"total"`
		Policy   json.RawMessage `json:"policy"`
	}
	status, e, err := c.do(ctx, "POST", "/api/v1/policy/overrides", map[string]any{"rule": r.rule, "csv": string(csv), "replace": r.replace}, &merged)
	switch {
	case err != nil:
		return ExitError, err
	case e != nil && e["field"] == "rule":
		return ExitError, fmt.Errorf("-rule: %s", strings.TrimPrefix(fmt.Sprint(e["error"]), "rule: "))
	case e != nil && (status == http.StatusBadRequest || status == http.StatusUnprocessableEntity):
		printProblems(stdout, e) // the CSV's problem, by line, or the filter's
		return ExitChanges, nil
	case e != nil:
		return ExitError, fmt.Errorf("POST /api/v1/policy/overrides: %d: %v", status, e["error"])
	}
	norm, code, err := c.validate(ctx, merged.Policy, stdout)
	if err != nil || code != ExitOK {
		return code, err
	}
	cur, err := c.current(ctx)
	if err != nil {
		return ExitError, err
	}
	fmt.Fprintf(stdout, "rule %q: %d added, %d replaced, %d overrides\n", r.rule, merged.Added, merged.Replaced, merged.Total)
	hunks := policies.LineDiff(policies.Pretty(cur.Policy), policies.Pretty(norm))
	if len(hunks) == 0 {
		fmt.Fprintf(stdout, "no changes against the current version v%d\n", cur.Version)
		return ExitOK, nil
	}
	if strings.TrimSpace(r.save.message) == "" {
		io.WriteString(stdout, policies.Unified(fmt.Sprintf("v%d", cur.Version), r.positional[0], hunks))
		fmt.Fprintf(stdout, "current version: %d\n", cur.Version)
		return ExitChanges, nil
	}
	sb := r.save
	sb.doc = norm
	if sb.base == 0 {
		sb.base = merged.Base // the version the merge read: a save since is a conflict
	}
	v, code, err := c.save(ctx, sb, stdout)
	if err != nil || code != ExitOK || v == 0 { // 0: proposed for review
		return code, err
	}
	fmt.Fprintf(stdout, "applied: v%d (based on v%d)\n", v, sb.base)
	return ExitOK, nil
}

// readCSV reads a named CSV file, or standard input for "-", up to the
// admin's request limit.
func readCSV(name string, stdin io.Reader) ([]byte, error) {
	const max = 4 << 20
	var rd io.Reader = stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		rd = f
	}
	b, err := io.ReadAll(io.LimitReader(rd, max+1))
	if err == nil && len(b) > max {
		err = fmt.Errorf("more than %d bytes, the admin's limit for one request; split the table", max)
	}
	return b, err
}
