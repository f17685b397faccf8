package policies

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/sluice-rl/sluice/admin/store"
	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/policycheck"
)

// The saved policy tests (docs/policy-tests.md): one test file the admin
// keeps, which every save must pass (Save, unless SkipTests), and which
// must pass against the current version to be saved itself. A rollback
// does not run them: it restores a version that ran, and must never wait
// on a test in an incident.

// Tests is the saved test file with its revision (0: none ever saved).
type Tests = store.PolicyTests

// TestsConflictError is returned by SaveTests when the change is based
// on a revision that is no longer the current one.
type TestsConflictError = store.TestsConflictError

// TestsFailedError is returned when a policy fails tests: a save against
// the saved tests, or saved tests against the current version.
type TestsFailedError struct {
	Revision int64 // the tests' revision (0: unsaved tests)
	Report   policycheck.Report
}

func (e *TestsFailedError) Error() string {
	var names []string
	for _, t := range e.Report.Tests {
		if t.Failure != nil && len(names) < 3 {
			names = append(names, strconv.Quote(t.Name))
		}
	}
	if n := e.Report.Failed(); n > len(names) {
		names = append(names, fmt.Sprintf("%d more", n-len(names)))
	}
	return fmt.Sprintf("the policy fails %d of %d saved tests (%s); change the policy or the tests (docs/policy-tests.md)",
		e.Report.Failed(), len(e.Report.Tests), strings.Join(names, ", "))
}

// TestsFileError is a test file with mistakes: each names its field and
// line.
type TestsFileError struct {
	Errors policycheck.Errors
}

func (e *TestsFileError) Error() string { return "the tests have mistakes:\n" + e.Errors.Error() }

// SaveTestsRequest changes the saved tests.
type SaveTestsRequest struct {
	Base   int64  // the revision the change is based on
	Body   string // the test file; "" removes the tests (saves are not checked)
	Author string
}

// Tests returns the saved tests.
func (s *Service) Tests(ctx context.Context) (Tests, error) {
	return s.store.PolicyTests(ctx)
}

// SaveTests stores new tests as revision Base+1 once they pass against
// the current version. Errors: *TestsFileError, *TestsFailedError,
// *TestsConflictError, *InputError, *ManagedError (the tests follow a
// file).
func (s *Service) SaveTests(ctx context.Context, r SaveTestsRequest) (Tests, error) {
	if err := s.managed("tests"); err != nil {
		return Tests{}, err
	}
	return s.saveTests(ctx, r)
}

func (s *Service) saveTests(ctx context.Context, r SaveTestsRequest) (Tests, error) {
	author, _, err := cleanMeta(r.Author, "")
	if err != nil {
		return Tests{}, err
	}
	if r.Base < 0 {
		return Tests{}, &InputError{Field: "base_revision", Message: fmt.Sprintf("%d is not a revision", r.Base)}
	}
	body := strings.ReplaceAll(r.Body, "\r\n", "\n")
	if strings.TrimSpace(body) != "" {
		suite, err := parseTests(body)
		if err != nil {
			return Tests{}, err
		}
		cur, err := s.Current(ctx)
		if err != nil {
			return Tests{}, err
		}
		if rep := runOn(cur.JSON, suite); rep.Failed() > 0 {
			return Tests{}, &TestsFailedError{Report: rep}
		}
	} else {
		body = ""
	}
	return s.store.PutPolicyTests(ctx, r.Base, body, author, s.now())
}

// SeedTests saves body as the first tests when none were ever saved
// (revision 0), as -initial-tests asks, and reports whether it did. Like
// any saved tests they must pass against the current version: otherwise
// nothing is saved and the error is a *TestsFailedError. Another admin
// seeding at the same time is not an error.
func (s *Service) SeedTests(ctx context.Context, body string) (bool, error) {
	cur, err := s.store.PolicyTests(ctx)
	if err != nil || cur.Revision > 0 {
		return false, err
	}
	_, err = s.SaveTests(ctx, SaveTestsRequest{Base: 0, Body: body, Author: "sluice"})
	var ce *TestsConflictError
	if errors.As(err, &ce) {
		return false, nil
	}
	return err == nil, err
}

// RunTests runs tests (the saved ones when body is "") against a
// configuration, which the caller has validated, and returns the report
// and the saved tests' revision (0 for body's).
func (s *Service) RunTests(ctx context.Context, doc []byte, body string) (policycheck.Report, int64, error) {
	var rev int64
	if strings.TrimSpace(body) == "" {
		t, err := s.store.PolicyTests(ctx)
		if err != nil {
			return policycheck.Report{}, 0, err
		}
		body, rev = t.Body, t.Revision
	}
	if strings.TrimSpace(body) == "" {
		return policycheck.Report{}, rev, nil
	}
	suite, err := parseTests(body)
	if err != nil {
		return policycheck.Report{}, rev, err
	}
	return runOn(doc, suite), rev, nil
}

// checkGivenTests checks that the configuration passes the tests a save
// brings, and returns them as they are saved ("" for none).
func checkGivenTests(norm []byte, body string) (string, error) {
	body = strings.ReplaceAll(body, "\r\n", "\n")
	if strings.TrimSpace(body) == "" {
		return "", nil
	}
	suite, err := parseTests(body)
	if err != nil {
		return "", err
	}
	if rep := runOn(norm, suite); rep.Failed() > 0 {
		return "", &TestsFailedError{Report: rep}
	}
	return body, nil
}

// replaceTests saves the tests a save brought, after its version v: the
// version's base check ordered this save, so whatever tests were saved
// meanwhile, these replace them.
func (s *Service) replaceTests(ctx context.Context, v Version, body, author string) error {
	for try := 0; ; try++ {
		cur, err := s.store.PolicyTests(ctx)
		if err == nil {
			_, err = s.store.PutPolicyTests(ctx, cur.Revision, body, author, s.now())
		}
		var ce *TestsConflictError
		if err == nil || !errors.As(err, &ce) || try == 2 {
			if err != nil {
				return fmt.Errorf("v%d was saved and published, but its tests were not: %w", v.Number, err)
			}
			return nil
		}
	}
}

// checkTests is Save's check: the normalized configuration must pass the
// saved tests.
func (s *Service) checkTests(ctx context.Context, norm []byte) error {
	rep, rev, err := s.RunTests(ctx, norm, "")
	if err != nil {
		return err
	}
	if rep.Failed() > 0 {
		return &TestsFailedError{Revision: rev, Report: rep}
	}
	return nil
}

func parseTests(body string) (*policycheck.Suite, error) {
	suite, err := policycheck.Parse([]byte(body))
	if es, ok := err.(policycheck.Errors); ok {
		return nil, &TestsFileError{Errors: es}
	}
	return suite, err
}

// runOn runs suite against a configuration known to be valid (a stored
// version, or one Validate returned); one that does not parse fails every
// test rather than passing them.
func runOn(doc []byte, suite *policycheck.Suite) policycheck.Report {
	cfg, err := policy.Parse(doc)
	if err != nil {
		rep := policycheck.Report{}
		for _, t := range suite.Tests {
			rep.Tests = append(rep.Tests, policycheck.Result{Name: t.Name, Line: t.Line,
				Failure: &policycheck.Failure{Mismatches: []string{"the policy does not parse: " + err.Error()}}})
		}
		return rep
	}
	return policycheck.Run(cfg, suite, policycheck.Options{})
}
