package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/sluice-rl/sluice/admin/auth"
	"github.com/sluice-rl/sluice/admin/policies"
	"github.com/sluice-rl/sluice/admin/store"
	"github.com/sluice-rl/sluice/shared/policycheck"
	"github.com/sluice-rl/sluice/web"
)

// The saved policy tests (docs/policy-tests.md, docs/admin.md "Policy
// tests"): GET and PUT /api/v1/policy/tests, POST /api/v1/policy/tests/run,
// and the Tests page. Every save runs them (policies.Service.Save).

// ActionTestsSave is the audit action of a change to the saved tests.
const ActionTestsSave = "policy.tests"

func (s *server) registerTests(mux *http.ServeMux) {
	mux.Handle("GET /api/v1/policy/tests", s.api(s.apiTests))
	mux.Handle("PUT /api/v1/policy/tests", s.api(s.apiSaveTests))
	mux.Handle("POST /api/v1/policy/tests/run", s.api(s.apiRunTests))
	mux.Handle("GET /tests", s.page(s.testsPage))
	mux.Handle("POST /tests", s.page(s.testsSubmit))
	mux.Handle("POST /tests/run", s.page(s.testsRun))
	mux.Handle("POST /policy/test", s.page(s.editorTest))
}

// testsJSON is the saved tests in API answers.
type testsJSON struct {
	Revision int64  `json:"revision"`
	Tests    string `json:"tests"`
	Author   string `json:"author,omitempty"`
	Updated  string `json:"updated_at,omitempty"`
}

func toTestsJSON(t policies.Tests) testsJSON {
	out := testsJSON{Revision: t.Revision, Tests: t.Body, Author: t.Author}
	if !t.Updated.IsZero() {
		out.Updated = isoTime(t.Updated)
	}
	return out
}

func (s *server) apiTests(w http.ResponseWriter, r *http.Request) error {
	t, err := s.Policies.Tests(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toTestsJSON(t))
	return nil
}

// errScopedTests refuses a change to the tests by an account limited to
// some policies: the tests check every policy.
func errScopedTests(p auth.Principal) error {
	return &apiErr{status: http.StatusForbidden, msg: "your account may change only the policies " + scopeOf(p).String() +
		"; the tests check every policy, so only an editor of all policies (or an admin) may change them"}
}

func (s *server) apiSaveTests(w http.ResponseWriter, r *http.Request) error {
	var b struct {
		BaseRevision *int64 `json:"base_revision"`
		Tests        string `json:"tests"`
		Author       string `json:"author"`
	}
	if err := s.decodeJSON(w, r, &b, []string{"base_revision", "tests", "author"}); err != nil {
		return err
	}
	if b.BaseRevision == nil {
		return &policies.InputError{Field: "base_revision", Message: "required: the revision your change is based on (GET /api/v1/policy/tests returns it; 0 before any)"}
	}
	if p := principal(r); scopeOf(p).Restricted() {
		return errScopedTests(p)
	}
	t, err := s.Policies.SaveTests(r.Context(), policies.SaveTestsRequest{Base: *b.BaseRevision, Body: b.Tests, Author: apiAuthor(r, b.Author)})
	if err != nil {
		return testsError(err)
	}
	s.record(r, store.AuditEntry{Action: ActionTestsSave, Detail: testsDetail(t)})
	writeJSON(w, http.StatusOK, toTestsJSON(t))
	return nil
}

// saveDetail is a save's audit detail: its message, and whether it
// skipped the saved tests.
func saveDetail(msg string, skipTests bool) string {
	if !skipTests {
		return msg
	}
	if msg == "" {
		return "[saved without running the tests]"
	}
	return msg + " [saved without running the tests]"
}

// testsDetail describes saved tests in the audit log.
func testsDetail(t policies.Tests) string {
	if t.Body == "" {
		return fmt.Sprintf("revision %d: no tests (saves are not checked)", t.Revision)
	}
	return fmt.Sprintf("revision %d, %d bytes", t.Revision, len(t.Body))
}

func (s *server) apiRunTests(w http.ResponseWriter, r *http.Request) error {
	var b struct {
		Tests   string          `json:"tests"`
		Policy  json.RawMessage `json:"policy"`
		Version *int64          `json:"version"`
	}
	if err := s.decodeJSON(w, r, &b, []string{"tests", "policy", "version"}); err != nil {
		return err
	}
	sp, err := s.loadSimPolicy(r.Context(), b.Policy, b.Version)
	if err != nil {
		return err
	}
	norm, err := sp.cfg.MarshalJSON()
	if err != nil {
		return err
	}
	rep, rev, err := s.Policies.RunTests(r.Context(), norm, b.Tests)
	if err != nil {
		return testsError(err)
	}
	writeJSON(w, http.StatusOK, reportJSON(sp.label, rev, rep))
	return nil
}

// testsError maps the tests' refusals to API errors: a file with
// mistakes and failing tests are 422, a stale revision 409.
func testsError(err error) error {
	var (
		fe *policies.TestsFileError
		tf *policies.TestsFailedError
		ce *policies.TestsConflictError
	)
	switch {
	case errors.As(err, &fe):
		errs := make([]map[string]any, len(fe.Errors))
		for i, e := range fe.Errors {
			errs[i] = map[string]any{"path": e.Path, "line": e.Line, "message": e.Message}
		}
		return &apiErr{status: http.StatusUnprocessableEntity, msg: fmt.Sprintf("the tests have %d mistake%s; nothing was saved", len(fe.Errors), plural(len(fe.Errors))),
			extra: map[string]any{"errors": errs}}
	case errors.As(err, &tf):
		return &apiErr{status: http.StatusUnprocessableEntity, msg: tf.Error() + "; nothing was saved",
			extra: map[string]any{"tests": reportJSON("", tf.Revision, tf.Report)}}
	case errors.As(err, &ce):
		return &apiErr{status: http.StatusConflict, msg: ce.Error(), extra: map[string]any{"base_revision": ce.Base, "current_revision": ce.Current}}
	}
	return err
}

// testReportJSON is a run of tests in API answers.
type testReportJSON struct {
	Against  string           `json:"against,omitempty"`
	Revision int64            `json:"revision,omitempty"`
	Passed   int              `json:"passed"`
	Failed   int              `json:"failed"`
	Tests    []testResultJSON `json:"tests"`
	Text     string           `json:"text"`
	// Unexercised are the rules no request of the tests applied
	// ("policy/rule").
	Unexercised []string `json:"unexercised"`
}

type testResultJSON struct {
	Name     string           `json:"name"`
	Line     int              `json:"line"`
	Requests int              `json:"requests"`
	Passed   bool             `json:"passed"`
	Failure  *testFailureJSON `json:"failure,omitempty"`
}

type testFailureJSON struct {
	Step       string   `json:"step,omitempty"`
	Line       int      `json:"line,omitempty"`
	Request    int      `json:"request,omitempty"`
	AtMS       int64    `json:"at_ms"`
	Mismatches []string `json:"mismatches"`
	Context    []string `json:"decided,omitempty"`
}

func reportJSON(against string, rev int64, rep policycheck.Report) testReportJSON {
	out := testReportJSON{Against: against, Revision: rev, Failed: rep.Failed(), Tests: []testResultJSON{}, Text: rep.Text(false),
		Unexercised: append([]string{}, rep.Unexercised...)}
	out.Passed = len(rep.Tests) - out.Failed
	for _, t := range rep.Tests {
		tj := testResultJSON{Name: t.Name, Line: t.Line, Requests: t.Requests, Passed: t.Failure == nil}
		if f := t.Failure; f != nil {
			tj.Failure = &testFailureJSON{Step: f.Step, Line: f.Line, Request: f.Request, AtMS: f.At.Milliseconds(),
				Mismatches: append([]string{}, f.Mismatches...), Context: f.Context} // [] rather than null
		}
		out.Tests = append(out.Tests, tj)
	}
	return out
}

// reportView is a run of tests on a page.
func reportView(against string, rev int64, rep policycheck.Report) *web.TestReport {
	v := &web.TestReport{Against: against, Revision: rev, Failed: rep.Failed(), Unexercised: rep.Unexercised}
	v.Passed = len(rep.Tests) - v.Failed
	for _, t := range rep.Tests {
		v.Requests += t.Requests
		tv := web.TestResultView{Name: t.Name, Line: t.Line, Requests: t.Requests, OK: t.Failure == nil}
		if f := t.Failure; f != nil {
			tv.Mismatches, tv.Context, tv.Where = f.Mismatches, f.Context, f.Where()
		}
		v.Tests = append(v.Tests, tv)
	}
	return v
}

// draftTestsWarning warns, on the trial page, that the trial's draft fails
// the saved tests, so promoting it will be refused (false: it passes,
// there are none, or they cannot run).
func (s *server) draftTestsWarning(r *http.Request, draft []byte) (web.Flash, bool) {
	norm, err := policies.Validate(draft)
	if err != nil {
		return web.Flash{}, false
	}
	rep, rev, err := s.Policies.RunTests(r.Context(), norm, "")
	if err != nil || rep.Failed() == 0 {
		return web.Flash{}, false
	}
	return web.Flash{Kind: "warn", Text: fmt.Sprintf("The draft fails %d of %d saved tests (revision %d): promoting it will be refused until the draft or the tests change. Run them from the policy editor or the Tests page.",
		rep.Failed(), len(rep.Tests), rev)}, true
}

// testsView is the Tests page showing body (the saved file unless a form
// sent another).
func (s *server) testsView(r *http.Request, sess auth.Session, body *string) (web.TestsPage, error) {
	t, err := s.Policies.Tests(r.Context())
	if err != nil {
		return web.TestsPage{}, err
	}
	p := web.TestsPage{Nav: nav(sess, "tests"), Revision: t.Revision, Body: t.Body}
	if t.Revision > 0 {
		p.Saved = fmt.Sprintf("Revision %d by %s, %s.", t.Revision, t.Author, timeText(t.Updated))
		if t.Body == "" {
			p.Saved += " It removed the tests: saves are not checked."
		}
	}
	if body != nil {
		p.Body = *body
	}
	if p.Body == "" {
		p.Body = testsStarter
	}
	p.Rows = min(max(strings.Count(p.Body, "\n")+3, 12), 60)
	return p, nil
}

// testsStarter is the text of an empty Tests page: a test to start from.
const testsStarter = `# Each test sends requests and says what they must get (docs/policy-tests.md).
tests:
  - name: a health check is never limited
    request: {path: /healthz}
    repeat: 100
    expect: {status: 200}
`

func (s *server) testsPage(w http.ResponseWriter, r *http.Request, sess auth.Session) error {
	p, err := s.testsView(r, sess, nil)
	if err != nil {
		return err
	}
	if n := r.URL.Query().Get("saved"); n != "" && n == fmt.Sprint(p.Revision) {
		p.Flashes = []web.Flash{{Kind: "ok", Text: "Tests saved (revision " + n + "): every save of the policy now runs them."}}
	}
	s.render(w, r, http.StatusOK, web.Tests(p))
	return nil
}

// submittedTests is the file a form posted ("tests").
func submittedTests(r *http.Request) string {
	return strings.ReplaceAll(r.PostForm.Get("tests"), "\r\n", "\n")
}

func (s *server) testsSubmit(w http.ResponseWriter, r *http.Request, sess auth.Session) error {
	body := submittedTests(r)
	p, err := s.testsView(r, sess, &body)
	if err != nil {
		return err
	}
	base, err := parseVersion(r.PostForm.Get("base_revision"), "base_revision")
	if err != nil {
		p.Flashes = []web.Flash{{Kind: "error", Text: "Not saved: " + err.Error()}}
		s.render(w, r, http.StatusBadRequest, web.Tests(p))
		return nil
	}
	if pr := principal(r); scopeOf(pr).Restricted() {
		p.Flashes = []web.Flash{{Kind: "error", Text: "Not saved: " + errScopedTests(pr).Error()}}
		s.render(w, r, http.StatusForbidden, web.Tests(p))
		return nil
	}
	t, err := s.Policies.SaveTests(r.Context(), policies.SaveTestsRequest{Base: base, Body: body, Author: sess.Author})
	if err == nil {
		s.record(r, store.AuditEntry{Action: ActionTestsSave, Detail: testsDetail(t)})
		http.Redirect(w, r, "/tests?saved="+fmt.Sprint(t.Revision), http.StatusSeeOther)
		return nil
	}
	status, err := s.testsRefusal(r, &p, err)
	if err != nil {
		return err
	}
	s.render(w, r, status, web.Tests(p))
	return nil
}

// testsRefusal shows on p why the tests were not saved or run, and
// returns the page's status; other errors are returned.
func (s *server) testsRefusal(r *http.Request, p *web.TestsPage, err error) (int, error) {
	var (
		fe *policies.TestsFileError
		tf *policies.TestsFailedError
		ce *policies.TestsConflictError
		ie *policies.InputError
	)
	switch {
	case errors.As(err, &fe):
		for _, e := range fe.Errors {
			p.FileErrors = append(p.FileErrors, web.TestFileError{Line: e.Line, Text: e.Error()})
		}
		return http.StatusUnprocessableEntity, nil
	case errors.As(err, &tf):
		p.Flashes = []web.Flash{{Kind: "error", Text: "Not saved: the current policy fails these tests. Tests must describe the running policy; change the policy first, or the tests."}}
		cur, cerr := s.Policies.Current(r.Context())
		if cerr != nil {
			return 0, cerr
		}
		p.Report = reportView(fmt.Sprintf("the current policy (v%d)", cur.Number), 0, tf.Report)
		return http.StatusUnprocessableEntity, nil
	case errors.As(err, &ce):
		p.Conflict = ce.Error()
		return http.StatusConflict, nil
	case errors.As(err, &ie):
		p.Flashes = []web.Flash{{Kind: "error", Text: "Not saved: " + ie.Error()}}
		return http.StatusBadRequest, nil
	case refused(err) != 0:
		p.Flashes = []web.Flash{{Kind: "error", Text: "Not saved: " + err.Error()}}
		return refused(err), nil
	}
	return 0, err
}

// testsRun runs the submitted file against the current policy.
func (s *server) testsRun(w http.ResponseWriter, r *http.Request, sess auth.Session) error {
	body := submittedTests(r)
	p, err := s.testsView(r, sess, &body)
	if err != nil {
		return err
	}
	cur, err := s.Policies.Current(r.Context())
	if err != nil {
		return err
	}
	if strings.TrimSpace(body) == "" {
		p.Flashes = []web.Flash{{Kind: "warn", Text: "No tests to run."}}
		s.render(w, r, http.StatusOK, web.Tests(p))
		return nil
	}
	rep, _, err := s.Policies.RunTests(r.Context(), cur.JSON, body)
	if err != nil {
		status, err := s.testsRefusal(r, &p, err)
		if err != nil {
			return err
		}
		s.render(w, r, status, web.Tests(p))
		return nil
	}
	p.Report = reportView(fmt.Sprintf("the current policy (v%d)", cur.Number), 0, rep)
	s.render(w, r, http.StatusOK, web.Tests(p))
	return nil
}

// editorTest runs the saved tests against the policy page's draft.
func (s *server) editorTest(w http.ResponseWriter, r *http.Request, sess auth.Session) error {
	p, _, err := s.submittedDraft(r, sess)
	if err != nil {
		return err
	}
	if base, err := parseVersion(r.PostForm.Get("base_version"), "base_version"); err == nil {
		p.BaseVersion = base
	}
	norm, err := policies.Validate([]byte(p.Draft))
	var ve *policies.ValidationError
	if errors.As(err, &ve) {
		p.Problems, p.Listing = annotate([]byte(p.Draft), ve.Errors)
		s.render(w, r, http.StatusUnprocessableEntity, web.Editor(p))
		return nil
	} else if err != nil {
		return err
	}
	rep, rev, err := s.Policies.RunTests(r.Context(), norm, "")
	if err != nil {
		return err
	}
	if rev == 0 || len(rep.Tests) == 0 {
		p.Flashes = []web.Flash{{Kind: "warn", Text: "No tests are saved: write some on the Tests page."}}
	} else {
		p.TestReport = reportView("the draft", rev, rep)
	}
	s.render(w, r, http.StatusOK, web.Editor(p))
	return nil
}
