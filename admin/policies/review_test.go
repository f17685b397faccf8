package policies

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/admin/store"
)

func TestReviewedSavesWaitForAnotherPersonsApproval(t *testing.T) {
	ctx := context.Background()
	s, pub, _ := newService(t)
	s.SetReviewRequired(true)
	_, err := s.Save(ctx, SaveRequest{Base: 1, JSON: []byte(perIP), Author: "ann", Message: "per-ip limit"})
	var pe *ProposedError
	if !errors.As(err, &pe) || pe.Change.ID == 0 || pe.Change.Base != 1 || !strings.Contains(err.Error(), "another editor must approve it") {
		t.Fatalf("a save under review: %v", err)
	}
	if cur, _ := s.Current(ctx); cur.Number != 1 || len(pub.numbers()) != 1 {
		t.Fatalf("the proposal saved v%d or published %v", cur.Number, pub.numbers())
	}
	// Still checked like a save: an invalid draft is refused, not proposed.
	var ve *ValidationError
	if _, err := s.Save(ctx, SaveRequest{Base: 1, JSON: []byte(`{"rules":[]}`), Author: "ann"}); !errors.As(err, &ve) {
		t.Fatalf("an invalid proposal: %v", err)
	}
	id := pe.Change.ID
	var se *SelfReviewError
	if _, err := s.Approve(ctx, ReviewRequest{ID: id, Reviewer: "ann"}); !errors.As(err, &se) {
		t.Fatalf("approving one's own change: %v", err)
	}
	v, err := s.Approve(ctx, ReviewRequest{ID: id, Reviewer: "bob"})
	if err != nil || v.Number != 2 || v.Author != "ann" || v.Message != "per-ip limit (change 1, approved by bob)" {
		t.Fatalf("approved: %+v %v", v, err)
	}
	if got := pub.numbers(); len(got) != 2 || got[1] != 2 {
		t.Fatalf("published %v", got)
	}
	c, _ := s.Change(ctx, id)
	if c.State != store.ChangeApproved || c.DecidedBy != "bob" || c.Version != 2 {
		t.Fatalf("change %+v", c)
	}
	var cc *ChangeClosedError
	if _, err := s.Approve(ctx, ReviewRequest{ID: id, Reviewer: "cat"}); !errors.As(err, &cc) {
		t.Fatalf("approving twice: %v", err)
	}
	// Two changes on one base: the second approval finds its base stale.
	_, e1 := s.Save(ctx, SaveRequest{Base: 2, JSON: []byte(perIPBurst20), Author: "ann"})
	_, e2 := s.Save(ctx, SaveRequest{Base: 2, JSON: []byte(DefaultConfig), Author: "cat"})
	var p1, p2 *ProposedError
	if !errors.As(e1, &p1) || !errors.As(e2, &p2) {
		t.Fatalf("proposals: %v, %v", e1, e2)
	}
	if _, err := s.Approve(ctx, ReviewRequest{ID: p1.Change.ID, Reviewer: "bob"}); err != nil {
		t.Fatal(err)
	}
	var ce *ConflictError
	if _, err := s.Approve(ctx, ReviewRequest{ID: p2.Change.ID, Reviewer: "bob"}); !errors.As(err, &ce) {
		t.Fatalf("a stale change: %v", err)
	}
	if c, _ := s.Change(ctx, p2.Change.ID); c.State != store.ChangeOpen {
		t.Fatalf("a refused approval closed the change: %+v", c)
	}
	// Its author withdraws it; nobody else may, and its author may not reject it.
	var ie *InputError
	if _, err := s.Withdraw(ctx, ReviewRequest{ID: p2.Change.ID, Reviewer: "bob"}); !errors.As(err, &ie) {
		t.Fatalf("withdrawn by another: %v", err)
	}
	if _, err := s.Reject(ctx, ReviewRequest{ID: p2.Change.ID, Reviewer: "cat"}); !errors.As(err, &ie) {
		t.Fatalf("rejected by its author: %v", err)
	}
	if c, err := s.Withdraw(ctx, ReviewRequest{ID: p2.Change.ID, Reviewer: "cat", Reason: "stale"}); err != nil || c.State != store.ChangeWithdrawn || c.Reason != "stale" {
		t.Fatalf("withdrawn: %+v %v", c, err)
	}
	// A rollback is never held for review.
	if v, err := s.Rollback(ctx, RollbackRequest{To: 1, Base: 3, Author: "oncall"}); err != nil || v.Number != 4 {
		t.Fatalf("rollback under review: %+v %v", v, err)
	}
	if open, _ := s.Changes(ctx, store.ChangeOpen, 0); len(open) != 0 {
		t.Fatalf("open: %+v", open)
	}
	if _, err := s.Changes(ctx, "pending", 0); !errors.As(err, &ie) {
		t.Fatalf("a bad state: %v", err)
	}
	var nf *ChangeNotFoundError
	if _, err := s.Reject(ctx, ReviewRequest{ID: 99, Reviewer: "bob"}); !errors.As(err, &nf) {
		t.Fatalf("a missing change: %v", err)
	}
}

func TestAnApprovalRunsTheSavedTestsAndSavesTheChangesTests(t *testing.T) {
	ctx := context.Background()
	s, _, _ := newService(t)
	if _, err := s.Save(ctx, SaveRequest{Base: 1, JSON: []byte(perIP), Author: "a"}); err != nil {
		t.Fatal(err)
	}
	saveTests(t, s, 0, burst10)
	s.SetReviewRequired(true)
	// A proposal the saved tests refuse is refused at once.
	var tf *TestsFailedError
	if _, err := s.Save(ctx, SaveRequest{Base: 2, JSON: []byte(perIPBurst20), Author: "ann"}); !errors.As(err, &tf) {
		t.Fatalf("a proposal failing the tests: %v", err)
	}
	// With its own tests, it is proposed, and the approval saves both.
	burst20 := strings.Replace(burst10, "repeat: 10", "repeat: 20", 1)
	_, err := s.Save(ctx, SaveRequest{Base: 2, JSON: []byte(perIPBurst20), Author: "ann", Tests: &burst20})
	var pe *ProposedError
	if !errors.As(err, &pe) || pe.Change.Tests == nil {
		t.Fatalf("proposed with tests: %v", err)
	}
	if got, _ := s.Tests(ctx); got.Body != burst10 {
		t.Fatal("a proposal changed the saved tests")
	}
	if _, err := s.Approve(ctx, ReviewRequest{ID: pe.Change.ID, Reviewer: "bob"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Tests(ctx); got.Body != burst20 {
		t.Fatalf("tests after the approval: %+v", got)
	}
}

// With review limited to some policies, a save that changes only others is
// saved at once; one that changes a listed policy, adds or removes one, or
// changes a top-level setting waits for review.
func TestReviewHoldsOnlyTheListedPolicies(t *testing.T) {
	ctx := context.Background()
	s, _, _ := newService(t)
	s.SetReviewRequired(true)
	sc, err := ParseScope("payments-*, checkout")
	if err != nil {
		t.Fatal(err)
	}
	s.SetReviewPolicies(sc)
	doc := func(mode string, payments, search int) string {
		return `{"mode":"` + mode + `","policies":[
		  {"name":"payments-api","rules":[{"name":"p","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":` + strconv.Itoa(payments) + `,"burst":100}}]},
		  {"name":"search","rules":[{"name":"s","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":` + strconv.Itoa(search) + `,"burst":100}}]}]}`
	}
	var pe *ProposedError
	// The first save adds payments-api: reviewed, approved.
	if _, err := s.Save(ctx, SaveRequest{Base: 1, JSON: []byte(doc("enforce", 10, 10)), Author: "ann"}); !errors.As(err, &pe) {
		t.Fatalf("adding payments-api: %v", err)
	}
	if _, err := s.Approve(ctx, ReviewRequest{ID: pe.Change.ID, Reviewer: "bob"}); err != nil {
		t.Fatal(err)
	}
	v, err := s.Save(ctx, SaveRequest{Base: 2, JSON: []byte(doc("enforce", 10, 20)), Author: "ann"})
	if err != nil || v.Number != 3 {
		t.Fatalf("changing search only: %+v %v", v, err)
	}
	for _, c := range []struct{ what, doc string }{
		{"changing payments-api", doc("enforce", 20, 20)},
		{"changing the mode", doc("shadow", 10, 20)},
	} {
		if _, err := s.Save(ctx, SaveRequest{Base: 3, JSON: []byte(c.doc), Author: "ann"}); !errors.As(err, &pe) {
			t.Errorf("%s: %v, want it proposed", c.what, err)
		}
	}
	if got := s.ReviewPolicies().String(); got != "checkout,payments-*" {
		t.Errorf("review policies %q", got)
	}
}
