package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Change states.
const (
	ChangeOpen      = "open"
	ChangeApproved  = "approved"
	ChangeRejected  = "rejected"
	ChangeWithdrawn = "withdrawn"
)

// Change is a proposed policy change waiting for review, or decided.
type Change struct {
	ID      int64
	Base    int64  // the version it was written on
	JSON    []byte // the proposed configuration, normalized
	Tests   *string
	Author  string
	Message string
	Created time.Time
	State   string
	// DecidedBy, Decided and Reason say who closed it, when and why;
	// Version is the version an approval saved.
	DecidedBy string
	Decided   time.Time
	Reason    string
	Version   int64
}

// NewChange is what ProposeChange stores.
type NewChange struct {
	Base    int64
	JSON    []byte
	Tests   *string
	Author  string
	Message string
	Created time.Time
}

// ErrChangeClosed is returned when a change that is no longer open is
// decided again.
var ErrChangeClosed = errors.New("the change is no longer open")

// ProposeChange stores an open change and returns it with its ID.
func (s *Store) ProposeChange(ctx context.Context, c NewChange) (Change, error) {
	var tests any
	if c.Tests != nil {
		tests = *c.Tests
	}
	out := Change{Base: c.Base, JSON: c.JSON, Tests: c.Tests, Author: c.Author, Message: c.Message, Created: c.Created.UTC(), State: ChangeOpen}
	err := s.db.QueryRowContext(ctx, `INSERT INTO policy_changes (base, config, tests, author, message, created_at, state)
		VALUES (?, ?, ?, ?, ?, ?, 'open') RETURNING id`, c.Base, string(c.JSON), tests, c.Author, c.Message, formatTime(out.Created)).Scan(&out.ID)
	if err != nil {
		return Change{}, fmt.Errorf("storing the change: %w", describe(err))
	}
	return out, nil
}

const changeColumns = "id, base, config, tests, author, message, created_at, state, decided_by, decided_at, reason, version"

func scanChange(sc scanner) (Change, error) {
	var c Change
	var config, created, decided string
	var tests sql.NullString
	if err := sc.Scan(&c.ID, &c.Base, &config, &tests, &c.Author, &c.Message, &created, &c.State, &c.DecidedBy, &decided, &c.Reason, &c.Version); err != nil {
		return Change{}, err
	}
	c.JSON = []byte(config)
	if tests.Valid {
		c.Tests = &tests.String
	}
	var err error
	if c.Created, err = parseTime(created); err != nil {
		return Change{}, err
	}
	if decided != "" {
		if c.Decided, err = parseTime(decided); err != nil {
			return Change{}, err
		}
	}
	return c, nil
}

// Change returns change id, or ErrNotFound.
func (s *Store) Change(ctx context.Context, id int64) (Change, error) {
	c, err := scanChange(s.db.QueryRowContext(ctx, "SELECT "+changeColumns+" FROM policy_changes WHERE id = ?", id))
	if errors.Is(err, sql.ErrNoRows) {
		return Change{}, ErrNotFound
	}
	if err != nil {
		return Change{}, fmt.Errorf("reading change %d: %w", id, describe(err))
	}
	return c, nil
}

// Changes returns the changes in state ("" for all), newest first, at
// most limit.
func (s *Store) Changes(ctx context.Context, state string, limit int) ([]Change, error) {
	q, args := "SELECT "+changeColumns+" FROM policy_changes", []any{}
	if state != "" {
		q += " WHERE state = ?"
		args = append(args, state)
	}
	q += " ORDER BY id DESC LIMIT ?"
	args = append(args, limit)
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("listing changes: %w", describe(err))
	}
	defer rows.Close()
	var out []Change
	for rows.Next() {
		c, err := scanChange(rows)
		if err != nil {
			return nil, fmt.Errorf("listing changes: %w", describe(err))
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// CloseChange records the decision on an open change: state, who, when,
// why and the version an approval saved. A change that is not open any
// more is not changed: ErrChangeClosed (two reviewers deciding at once:
// the first wins).
func (s *Store) CloseChange(ctx context.Context, id int64, state, by, reason string, version int64, at time.Time) error {
	res, err := s.db.ExecContext(ctx, `UPDATE policy_changes SET state = ?, decided_by = ?, decided_at = ?, reason = ?, version = ?
		WHERE id = ? AND state = 'open'`, state, by, formatTime(at), reason, version, id)
	if err != nil {
		return fmt.Errorf("closing change %d: %w", id, describe(err))
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n != 1 {
		if _, err := s.Change(ctx, id); err != nil {
			return err
		}
		return ErrChangeClosed
	}
	return nil
}
