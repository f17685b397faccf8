package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// PolicyTests is the saved test file every policy save is checked
// against (shared/policycheck reads it).
type PolicyTests struct {
	// Revision counts the changes: 0 before any, then 1, 2, ...
	Revision int64
	// Body is the test file; "" for none (saves are not checked).
	Body    string
	Author  string
	Updated time.Time
}

// TestsConflictError is returned by PutPolicyTests when the change was
// based on a revision that is no longer the current one.
type TestsConflictError struct {
	Base, Current int64
}

func (e *TestsConflictError) Error() string {
	return fmt.Sprintf("the tests changed meanwhile: your change is based on revision %d but the current revision is %d; reload, reapply your change and save again", e.Base, e.Current)
}

// PolicyTests returns the saved tests (Revision 0 when none were ever
// saved).
func (s *Store) PolicyTests(ctx context.Context) (PolicyTests, error) {
	var t PolicyTests
	var updated string
	err := s.db.QueryRowContext(ctx, "SELECT revision, body, author, updated_at FROM policy_tests WHERE id = 1").
		Scan(&t.Revision, &t.Body, &t.Author, &updated)
	if errors.Is(err, sql.ErrNoRows) {
		return PolicyTests{}, nil
	}
	if err != nil {
		return PolicyTests{}, fmt.Errorf("reading the policy tests: %w", describe(err))
	}
	if t.Updated, err = parseTime(updated); err != nil {
		return PolicyTests{}, err
	}
	return t, nil
}

// PutPolicyTests stores body as revision base+1 if base is the current
// revision, atomically: of concurrent changes on one base exactly one
// succeeds, the others get a *TestsConflictError.
func (s *Store) PutPolicyTests(ctx context.Context, base int64, body, author string, now time.Time) (PolicyTests, error) {
	out := PolicyTests{Revision: base + 1, Body: body, Author: author, Updated: now.UTC()}
	var res sql.Result
	var err error
	if base == 0 {
		res, err = s.db.ExecContext(ctx, `INSERT INTO policy_tests (id, revision, body, author, updated_at)
			VALUES (1, 1, ?, ?, ?) ON CONFLICT(id) DO NOTHING`, body, author, formatTime(out.Updated))
	} else {
		res, err = s.db.ExecContext(ctx, `UPDATE policy_tests SET revision = revision + 1, body = ?, author = ?, updated_at = ?
			WHERE id = 1 AND revision = ?`, body, author, formatTime(out.Updated), base)
	}
	if err != nil {
		return PolicyTests{}, fmt.Errorf("saving the policy tests: %w", describe(err))
	}
	if n, err := res.RowsAffected(); err != nil {
		return PolicyTests{}, err
	} else if n != 1 {
		cur, err := s.PolicyTests(ctx)
		if err != nil {
			return PolicyTests{}, err
		}
		return PolicyTests{}, &TestsConflictError{Base: base, Current: cur.Revision}
	}
	return out, nil
}
