package policies

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/sluice-rl/sluice/admin/store"
)

// Reviewed changes (docs/admin.md "Reviewed changes"): with review
// required, a save is checked as always (validation, scope, tests) and
// stored as an open change instead of a version; another person approves
// it, which saves it as the version it proposed, or rejects it. A
// rollback is never held for review: it restores a version that was
// reviewed, and must not wait during an incident.

// Change is a proposed change and what a reviewer decided.
type Change = store.Change

// MaxChanges bounds a list of changes.
const MaxChanges = 200

// SetReviewRequired makes every save (but a rollback) a change waiting
// for another person's approval.
func (s *Service) SetReviewRequired(on bool) { s.review.Store(on) }

// ReviewRequired reports whether saves wait for review.
func (s *Service) ReviewRequired() bool { return s.review.Load() }

// SetReviewPolicies limits review to the saves that change a policy sc
// allows, or a top-level setting (which every policy depends on); the
// other saves are saved at once. An empty sc reviews every save.
func (s *Service) SetReviewPolicies(sc Scope) { s.reviewed.Store(&sc) }

// ReviewPolicies returns the policies whose changes wait for review (empty:
// every change, when review is required).
func (s *Service) ReviewPolicies() Scope {
	if sc := s.reviewed.Load(); sc != nil {
		return *sc
	}
	return nil
}

// needsReview reports whether a save of norm on version base waits for
// review. When the base cannot be read the save is reviewed: better a
// wait than an unreviewed change (a stale base is refused at approval).
func (s *Service) needsReview(ctx context.Context, base int64, norm []byte) bool {
	sc := s.ReviewPolicies()
	switch {
	case !s.review.Load():
		return false
	case !sc.Restricted():
		return true
	}
	before, err := s.normalized(ctx, base)
	if err != nil {
		return true
	}
	settings, policies, err := changesOf(before, norm)
	if err != nil || len(settings) > 0 {
		return true
	}
	for _, c := range policies {
		if sc.Allows(c.name) {
			return true
		}
	}
	return false
}

// ProposedError is Save's answer when review is required: nothing was
// saved; the change waits for approval.
type ProposedError struct {
	Change Change
}

func (e *ProposedError) Error() string {
	return fmt.Sprintf("proposed as change %d: another editor must approve it before it is saved and pushed", e.Change.ID)
}

// ChangeNotFoundError names a change that does not exist.
type ChangeNotFoundError struct{ ID int64 }

func (e *ChangeNotFoundError) Error() string { return fmt.Sprintf("there is no change %d", e.ID) }

// ChangeClosedError refuses to decide a change already decided.
type ChangeClosedError struct{ Change Change }

func (e *ChangeClosedError) Error() string {
	c := e.Change
	return fmt.Sprintf("change %d is %s (by %s); only an open change can be decided", c.ID, c.State, c.DecidedBy)
}

// SelfReviewError refuses a reviewer's approval of their own change.
type SelfReviewError struct{ Change Change }

func (e *SelfReviewError) Error() string {
	return fmt.Sprintf("you proposed change %d: another editor must approve it", e.Change.ID)
}

// propose stores a checked save as an open change.
func (s *Service) propose(ctx context.Context, base int64, norm []byte, tests *string, author, msg string) error {
	c, err := s.store.ProposeChange(ctx, store.NewChange{Base: base, JSON: norm, Tests: tests, Author: author, Message: msg, Created: s.now()})
	if err != nil {
		return err
	}
	s.log.Info("proposed a policy change", "change", c.ID, "base", base, "author", author)
	return &ProposedError{Change: c}
}

// Changes lists changes in state ("" for all), newest first.
func (s *Service) Changes(ctx context.Context, state string, limit int) ([]Change, error) {
	switch state {
	case "", store.ChangeOpen, store.ChangeApproved, store.ChangeRejected, store.ChangeWithdrawn:
	default:
		return nil, &InputError{Field: "state", Message: fmt.Sprintf("%q is not a state: open, approved, rejected or withdrawn", state)}
	}
	if limit <= 0 || limit > MaxChanges {
		limit = MaxChanges
	}
	return s.store.Changes(ctx, state, limit)
}

// Change returns change id.
func (s *Service) Change(ctx context.Context, id int64) (Change, error) {
	c, err := s.store.Change(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return Change{}, &ChangeNotFoundError{ID: id}
	}
	return c, err
}

// ReviewRequest is a reviewer's decision on a change.
type ReviewRequest struct {
	ID       int64
	Reviewer string
	Scope    Scope  // the policies the reviewer may change: an approval is a save by them
	Reason   string // a rejection's (or withdrawal's) reason
	// SkipTests approves without running the saved tests (recorded).
	SkipTests bool
}

// openChange returns change id if it is open.
func (s *Service) openChange(ctx context.Context, id int64) (Change, error) {
	c, err := s.Change(ctx, id)
	if err != nil {
		return c, err
	}
	if c.State != store.ChangeOpen {
		return c, &ChangeClosedError{Change: c}
	}
	return c, nil
}

// Approve saves an open change as the version it proposed, checked again
// as a save by the reviewer (validation, the reviewer's scope, the saved
// tests, a stale base), and closes it. The version's author is the
// proposer; its message says who approved it. Errors: those of Save
// (the change stays open), *SelfReviewError, *ChangeClosedError,
// *ChangeNotFoundError.
func (s *Service) Approve(ctx context.Context, r ReviewRequest) (Version, error) {
	c, err := s.openChange(ctx, r.ID)
	if err != nil {
		return Version{}, err
	}
	reviewer := strings.TrimSpace(r.Reviewer)
	if reviewer == "" || reviewer == c.Author {
		return Version{}, &SelfReviewError{Change: c}
	}
	v, err := s.Save(ctx, SaveRequest{Base: c.Base, JSON: c.JSON, Author: c.Author, Message: approvedMessage(c, reviewer),
		Scope: r.Scope, SkipTests: r.SkipTests, Tests: c.Tests, approvedBy: reviewer})
	if err != nil {
		return Version{}, err
	}
	if err := s.store.CloseChange(ctx, c.ID, store.ChangeApproved, reviewer, "", v.Number, s.now()); err != nil {
		return v, fmt.Errorf("v%d was saved, but change %d could not be closed: %w", v.Number, c.ID, err)
	}
	return v, nil
}

// approvedMessage is the version's message: the change's, and who
// approved it, within MaxMessageLen.
func approvedMessage(c Change, reviewer string) string {
	suffix := fmt.Sprintf("(change %d, approved by %s)", c.ID, reviewer)
	msg := c.Message
	if room := MaxMessageLen - utf8.RuneCountInString(suffix) - 1; utf8.RuneCountInString(msg) > room {
		msg = string([]rune(msg)[:max(room-1, 0)]) + "…"
	}
	if msg == "" {
		return suffix
	}
	return msg + " " + suffix
}

// Reject closes an open change without saving it. Anyone may reject but
// its author, who withdraws it instead.
func (s *Service) Reject(ctx context.Context, r ReviewRequest) (Change, error) {
	return s.close(ctx, r, store.ChangeRejected)
}

// Withdraw closes an open change its author no longer proposes.
func (s *Service) Withdraw(ctx context.Context, r ReviewRequest) (Change, error) {
	return s.close(ctx, r, store.ChangeWithdrawn)
}

func (s *Service) close(ctx context.Context, r ReviewRequest, state string) (Change, error) {
	c, err := s.openChange(ctx, r.ID)
	if err != nil {
		return c, err
	}
	who := strings.TrimSpace(r.Reviewer)
	switch {
	case state == store.ChangeRejected && who == c.Author:
		return c, &InputError{Field: "id", Message: fmt.Sprintf("you proposed change %d: withdraw it instead of rejecting it", c.ID)}
	case state == store.ChangeWithdrawn && who != c.Author:
		return c, &InputError{Field: "id", Message: fmt.Sprintf("only %s, who proposed change %d, may withdraw it; reject it instead", c.Author, c.ID)}
	}
	_, reason, err := cleanMeta(who, r.Reason)
	var ie *InputError
	if errors.As(err, &ie) && ie.Field == "message" {
		return c, &InputError{Field: "reason", Message: ie.Message}
	} else if err != nil {
		return c, err
	}
	if err := s.store.CloseChange(ctx, c.ID, state, who, reason, 0, s.now()); errors.Is(err, store.ErrChangeClosed) {
		latest, _ := s.store.Change(ctx, c.ID)
		return latest, &ChangeClosedError{Change: latest}
	} else if err != nil {
		return c, err
	}
	return s.Change(ctx, c.ID)
}
