package policies

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// burst10 pins perIP's burst of 10: the 11th request at once is refused.
const burst10 = `
tests:
  - name: a client gets a burst of 10
    request: {client_address: 10.0.0.1}
    steps:
      - repeat: 10
        expect: {status: 200, rule: per-ip}
      - expect: {status: 429, rule: per-ip}
`

var perIPBurst20 = strings.Replace(perIP, `"burst":10`, `"burst":20`, 1)

func saveTests(t *testing.T, s *Service, base int64, body string) Tests {
	t.Helper()
	got, err := s.SaveTests(context.Background(), SaveTestsRequest{Base: base, Body: body, Author: "alice"})
	if err != nil {
		t.Fatalf("saving tests: %v", err)
	}
	return got
}

func TestSavedTestsGuardEverySave(t *testing.T) {
	ctx := context.Background()
	s, pub, _ := newService(t)
	v2, err := s.Save(ctx, SaveRequest{Base: 1, JSON: []byte(perIP), Author: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if tt := saveTests(t, s, 0, burst10); tt.Revision != 1 || tt.Author != "alice" {
		t.Fatalf("tests %+v", tt)
	}
	_, err = s.Save(ctx, SaveRequest{Base: v2.Number, JSON: []byte(perIPBurst20), Author: "a"})
	var tf *TestsFailedError
	if !errors.As(err, &tf) || tf.Revision != 1 || tf.Report.Failed() != 1 || !strings.Contains(err.Error(), `fails 1 of 1 saved tests ("a client gets a burst of 10")`) {
		t.Fatalf("a save breaking a saved test: %v", err)
	}
	if f := tf.Report.Tests[0].Failure; f == nil || f.Mismatches[0] != "status: got 200, want 429" {
		t.Fatalf("failure %+v", f)
	}
	if cur, _ := s.Current(ctx); cur.Number != v2.Number || len(pub.numbers()) != 2 {
		t.Fatalf("the refused save stored v%d or published %v", cur.Number, pub.numbers())
	}
	// Saved anyway, on purpose.
	v3, err := s.Save(ctx, SaveRequest{Base: v2.Number, JSON: []byte(perIPBurst20), Author: "a", SkipTests: true})
	if err != nil || v3.Number != 3 {
		t.Fatalf("SkipTests: %+v, %v", v3, err)
	}
	// A rollback is never held by the tests, whatever they say.
	if _, err := s.Rollback(ctx, RollbackRequest{To: 1, Base: 3, Author: "oncall"}); err != nil {
		t.Fatalf("rollback: %v", err)
	}
}

func TestTestsMustPassAgainstTheCurrentVersionToBeSaved(t *testing.T) {
	ctx := context.Background()
	s, _, _ := newService(t)
	if _, err := s.Save(ctx, SaveRequest{Base: 1, JSON: []byte(perIPBurst20), Author: "a"}); err != nil {
		t.Fatal(err)
	}
	_, err := s.SaveTests(ctx, SaveTestsRequest{Base: 0, Body: burst10, Author: "alice"})
	var tf *TestsFailedError
	if !errors.As(err, &tf) || tf.Revision != 0 {
		t.Fatalf("tests the current version fails: %v", err)
	}
	if got, _ := s.Tests(ctx); got.Revision != 0 {
		t.Fatalf("failing tests were saved: %+v", got)
	}
	_, err = s.SaveTests(ctx, SaveTestsRequest{Base: 0, Body: "tests:\n  - name: x\n    expect: {status: abc}\n", Author: "alice"})
	var fe *TestsFileError
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), `tests[0].expect.status (line 3): "abc" is not a whole number`) {
		t.Fatalf("a file with a mistake: %v", err)
	}
	pass := strings.Replace(burst10, "repeat: 10", "repeat: 20", 1)
	saveTests(t, s, 0, pass)
	var ce *TestsConflictError
	if _, err := s.SaveTests(ctx, SaveTestsRequest{Base: 0, Body: pass, Author: "bob"}); !errors.As(err, &ce) || ce.Current != 1 {
		t.Fatalf("a stale base: %v", err)
	}
	// Empty tests remove the guard: any valid save goes through again.
	if got := saveTests(t, s, 1, "  \r\n"); got.Revision != 2 || got.Body != "" {
		t.Fatalf("removed: %+v", got)
	}
	if _, err := s.Save(ctx, SaveRequest{Base: 2, JSON: []byte(perIP), Author: "a"}); err != nil {
		t.Fatalf("a save without tests: %v", err)
	}
}

func TestSeedTestsSavesOnlyTheFirstTests(t *testing.T) {
	ctx := context.Background()
	s, _, _ := newService(t)
	if _, err := s.Save(ctx, SaveRequest{Base: 1, JSON: []byte(perIP), Author: "a"}); err != nil {
		t.Fatal(err)
	}
	var tf *TestsFailedError
	if ok, err := s.SeedTests(ctx, strings.Replace(burst10, "repeat: 10", "repeat: 11", 1)); ok || !errors.As(err, &tf) {
		t.Fatalf("failing seed: %v %v", ok, err)
	}
	if ok, err := s.SeedTests(ctx, burst10); !ok || err != nil {
		t.Fatalf("seed: %v %v", ok, err)
	}
	if got, _ := s.Tests(ctx); got.Revision != 1 || got.Author != "sluice" || got.Body != burst10 {
		t.Fatalf("seeded %+v", got)
	}
	// Once tests were saved, even removed, a seed changes nothing.
	saveTests(t, s, 1, "")
	if ok, err := s.SeedTests(ctx, burst10); ok || err != nil {
		t.Fatalf("second seed: %v %v", ok, err)
	}
	if got, _ := s.Tests(ctx); got.Revision != 2 || got.Body != "" {
		t.Fatalf("after a second seed %+v", got)
	}
}

func TestRunTestsRunsGivenOrSavedTests(t *testing.T) {
	ctx := context.Background()
	s, _, _ := newService(t)
	if rep, rev, err := s.RunTests(ctx, []byte(perIP), ""); err != nil || rev != 0 || len(rep.Tests) != 0 {
		t.Fatalf("no saved tests: %+v %d %v", rep, rev, err)
	}
	rep, rev, err := s.RunTests(ctx, []byte(perIPBurst20), burst10)
	if err != nil || rev != 0 || rep.Failed() != 1 {
		t.Fatalf("given tests: %+v %d %v", rep, rev, err)
	}
	if _, err := s.Save(ctx, SaveRequest{Base: 1, JSON: []byte(perIP), Author: "a"}); err != nil {
		t.Fatal(err)
	}
	saveTests(t, s, 0, burst10)
	if rep, rev, err := s.RunTests(ctx, []byte(perIP), ""); err != nil || rev != 1 || len(rep.Tests) != 1 || rep.Failed() != 0 {
		t.Fatalf("saved tests: %+v %d %v", rep, rev, err)
	}
}

func TestASaveWithTestsReplacesThemTogether(t *testing.T) {
	ctx := context.Background()
	s, _, _ := newService(t)
	if _, err := s.Save(ctx, SaveRequest{Base: 1, JSON: []byte(perIP), Author: "a"}); err != nil {
		t.Fatal(err)
	}
	saveTests(t, s, 0, burst10)
	// Burst 20 with tests pinning 20: the old tests would refuse it, the
	// new ones pass, and both are saved.
	burst20 := strings.Replace(burst10, "repeat: 10", "repeat: 20", 1)
	v, err := s.Save(ctx, SaveRequest{Base: 2, JSON: []byte(perIPBurst20), Author: "gitops", Tests: &burst20})
	if err != nil || v.Number != 3 {
		t.Fatalf("save with tests: %+v, %v", v, err)
	}
	if got, _ := s.Tests(ctx); got.Revision != 2 || got.Body != burst20 || got.Author != "gitops" {
		t.Fatalf("tests after: %+v", got)
	}
	// Tests the draft fails: nothing saved, neither the version nor them.
	var tf *TestsFailedError
	if _, err := s.Save(ctx, SaveRequest{Base: 3, JSON: []byte(perIP), Author: "gitops", Tests: &burst20}); !errors.As(err, &tf) || tf.Revision != 0 {
		t.Fatalf("failing given tests: %v", err)
	}
	if cur, _ := s.Current(ctx); cur.Number != 3 {
		t.Fatalf("current v%d", cur.Number)
	}
	// Empty tests remove them with the save.
	empty := ""
	if _, err := s.Save(ctx, SaveRequest{Base: 3, JSON: []byte(perIP), Author: "gitops", Tests: &empty}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Tests(ctx); got.Revision != 3 || got.Body != "" {
		t.Fatalf("removed: %+v", got)
	}
}
