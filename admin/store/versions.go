package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Version is one immutable policy version.
type Version struct {
	Number     int64     // 1, 2, 3, ...; the highest is the current version
	Parent     int64     // the version this one was based on (0 for the first)
	JSON       []byte    // the plugin configuration
	Author     string    // who saved it
	Message    string    // why
	Created    time.Time // when (UTC)
	RollbackOf int64     // for a rollback, the version restored; else 0
}

// NewVersion is what Append stores.
type NewVersion struct {
	JSON       []byte
	Author     string
	Message    string
	Created    time.Time // zero: now
	RollbackOf int64     // 0 unless this restores an older version
}

// ConflictError is returned by Append when the change was based on a version
// that is no longer the current one: someone else saved in between.
type ConflictError struct {
	Base    int64 // the version the change was based on
	Current int64 // the current version
}

func (e *ConflictError) Error() string {
	if e.Base > e.Current {
		return fmt.Sprintf("version conflict: the change is based on version %d, which does not exist; the current version is %d", e.Base, e.Current)
	}
	return fmt.Sprintf("version conflict: the change is based on version %d but the current version is %d (saved by someone else meanwhile); reload, reapply your change on version %d and save again", e.Base, e.Current, e.Current)
}

// Append stores v as version base+1 if base is the current version (0 for an
// empty database), atomically: of several concurrent Appends with the same
// base exactly one succeeds and the others get a *ConflictError naming the
// new current version. The version is durable when Append returns.
func (s *Store) Append(ctx context.Context, base int64, v NewVersion) (Version, error) {
	if base < 0 {
		return Version{}, fmt.Errorf("base version %d is negative", base)
	}
	if v.Created.IsZero() {
		v.Created = time.Now()
	}
	out := Version{
		Number: base + 1, Parent: base, JSON: v.JSON, Author: v.Author, Message: v.Message,
		Created: v.Created.UTC(), RollbackOf: v.RollbackOf,
	}
	tx, err := s.db.BeginTx(ctx, nil) // BEGIN IMMEDIATE
	if err != nil {
		return Version{}, fmt.Errorf("saving version %d: %w", base+1, describe(err))
	}
	defer tx.Rollback()
	if s.db.pg {
		// SQLite's BEGIN IMMEDIATE: one writer of versions at a time, readers
		// unaffected; the current version read next is the latest committed.
		if _, err := tx.ExecContext(ctx, "LOCK TABLE policy_versions IN SHARE ROW EXCLUSIVE MODE"); err != nil {
			return Version{}, fmt.Errorf("saving version %d: %w", base+1, err)
		}
	}
	current, err := currentNumber(ctx, tx)
	if err != nil {
		return Version{}, err
	}
	if current != base {
		return Version{}, &ConflictError{Base: base, Current: current}
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO policy_versions
		(number, parent, config, author, message, created_at, rollback_of)
		VALUES (?, ?, ?, ?, ?, ?, ?)`,
		out.Number, nullable(base), string(v.JSON), v.Author, v.Message, formatTime(out.Created), nullable(v.RollbackOf))
	if err != nil {
		if isConstraint(err) {
			// The number was taken after all, or the JSON/rollback target
			// was refused by a CHECK or foreign key.
			if cur, cerr := s.CurrentNumber(ctx); cerr == nil && cur != base {
				return Version{}, &ConflictError{Base: base, Current: cur}
			}
		}
		return Version{}, fmt.Errorf("saving version %d: %w", out.Number, describe(err))
	}
	if err := tx.Commit(); err != nil {
		return Version{}, fmt.Errorf("saving version %d: %w", out.Number, describe(err))
	}
	return out, nil
}

type queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func currentNumber(ctx context.Context, q queryer) (int64, error) {
	var n int64
	if err := q.QueryRowContext(ctx, "SELECT COALESCE(MAX(number), 0) FROM policy_versions").Scan(&n); err != nil {
		return 0, fmt.Errorf("reading the current version: %w", describe(err))
	}
	return n, nil
}

// CurrentNumber returns the current version number, 0 if none was saved.
func (s *Store) CurrentNumber(ctx context.Context) (int64, error) {
	return currentNumber(ctx, s.db)
}

// Current returns the current version, or ErrNotFound for an empty database.
func (s *Store) Current(ctx context.Context) (Version, error) {
	return s.scanOne(ctx, `SELECT `+versionColumns+` FROM policy_versions ORDER BY number DESC LIMIT 1`)
}

// Get returns version n, or ErrNotFound.
func (s *Store) Get(ctx context.Context, n int64) (Version, error) {
	return s.scanOne(ctx, `SELECT `+versionColumns+` FROM policy_versions WHERE number = ?`, n)
}

// List returns up to limit versions numbered below before (all when before
// <= 0), newest first.
func (s *Store) List(ctx context.Context, before int64, limit int) ([]Version, error) {
	if limit <= 0 {
		return nil, nil
	}
	if before <= 0 {
		before = 1 << 62
	}
	rows, err := s.db.QueryContext(ctx, `SELECT `+versionColumns+` FROM policy_versions
		WHERE number < ? ORDER BY number DESC LIMIT ?`, before, limit)
	if err != nil {
		return nil, fmt.Errorf("listing versions: %w", describe(err))
	}
	defer rows.Close()
	var out []Version
	for rows.Next() {
		v, err := scanVersion(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing versions: %w", describe(err))
	}
	return out, nil
}

const versionColumns = `number, COALESCE(parent, 0), config, author, message, created_at, COALESCE(rollback_of, 0)`

type scanner interface{ Scan(dest ...any) error }

func scanVersion(r scanner) (Version, error) {
	var v Version
	var config, created string
	if err := r.Scan(&v.Number, &v.Parent, &config, &v.Author, &v.Message, &created, &v.RollbackOf); err != nil {
		return Version{}, err
	}
	t, err := parseTime(created)
	if err != nil {
		return Version{}, fmt.Errorf("version %d: %w", v.Number, err)
	}
	v.JSON, v.Created = []byte(config), t
	return v, nil
}

func (s *Store) scanOne(ctx context.Context, query string, args ...any) (Version, error) {
	v, err := scanVersion(s.db.QueryRowContext(ctx, query, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return Version{}, ErrNotFound
	}
	if err != nil {
		return Version{}, fmt.Errorf("reading a version: %w", describe(err))
	}
	return v, nil
}

func nullable(n int64) any {
	if n == 0 {
		return nil
	}
	return n
}
