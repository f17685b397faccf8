package store

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// AuditEntry is one line of the audit log: who did what, when, from where.
type AuditEntry struct {
	ID          int64 // assigned by AppendAudit, increasing
	At          time.Time
	Actor       string // the user, or "admin" (the admin token), or the name tried in a failed login
	Action      string // e.g. "policy.save", "login.failed"
	Remote      string // the client address
	Target      string // what it was done to: a user, a token id, an address
	Detail      string // free text
	Version     int64  // the policy version it created, 0 for none
	FromVersion int64  // the version it was based on or restores, 0 for none
}

// AuditFilter selects audit entries. Zero fields match everything.
type AuditFilter struct {
	Actor  string
	Action string // exact, or a prefix ending in "." ("policy." matches "policy.save")
	Remote string
	Since  time.Time // At >= Since
	Until  time.Time // At < Until
	Before int64     // ID < Before (paging: the smallest ID of the previous page)
	Limit  int       // default and maximum MaxAuditPage
}

// MaxAuditPage bounds one ListAudit answer.
const MaxAuditPage = 500

// AppendAudit adds an entry. The log is append-only: the store has no
// method to change or delete an entry, and the database refuses updates
// (a trigger) and deletions of entries younger than a day.
func (s *Store) AppendAudit(ctx context.Context, e AuditEntry) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO audit_log (at, actor, action, remote, target, detail, version, from_version)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, formatTime(e.At), e.Actor, e.Action, e.Remote, e.Target, e.Detail, e.Version, e.FromVersion)
	if err != nil {
		return fmt.Errorf("writing an audit entry: %w", describe(err))
	}
	return nil
}

// ListAudit returns the entries f selects, newest first.
func (s *Store) ListAudit(ctx context.Context, f AuditFilter) ([]AuditEntry, error) {
	var where []string
	var args []any
	add := func(cond string, v any) { where = append(where, cond); args = append(args, v) }
	if f.Actor != "" {
		add("actor = ?", f.Actor)
	}
	if strings.HasSuffix(f.Action, ".") {
		add("substr(action, 1, ?) = ?", len(f.Action))
		args = append(args, f.Action)
	} else if f.Action != "" {
		add("action = ?", f.Action)
	}
	if f.Remote != "" {
		add("remote = ?", f.Remote)
	}
	if !f.Since.IsZero() {
		add("at >= ?", formatTime(f.Since))
	}
	if !f.Until.IsZero() {
		add("at < ?", formatTime(f.Until))
	}
	if f.Before > 0 {
		add("id < ?", f.Before)
	}
	if f.Limit <= 0 || f.Limit > MaxAuditPage {
		f.Limit = MaxAuditPage
	}
	q := "SELECT id, at, actor, action, remote, target, detail, version, from_version FROM audit_log"
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY id DESC LIMIT ?"
	args = append(args, f.Limit)
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("reading the audit log: %w", describe(err))
	}
	defer rows.Close()
	out := []AuditEntry{}
	for rows.Next() {
		var e AuditEntry
		var at string
		if err := rows.Scan(&e.ID, &at, &e.Actor, &e.Action, &e.Remote, &e.Target, &e.Detail, &e.Version, &e.FromVersion); err != nil {
			return nil, err
		}
		if e.At, err = parseTime(at); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// PruneAudit deletes the entries older than before (retention) and returns
// how many. Entries younger than a day are never deleted, whatever before is.
func (s *Store) PruneAudit(ctx context.Context, before time.Time) (int64, error) {
	if floor := time.Now().Add(-24 * time.Hour); before.After(floor) {
		before = floor
	}
	res, err := s.db.ExecContext(ctx, "DELETE FROM audit_log WHERE at < ?", formatTime(before))
	if err != nil {
		return 0, fmt.Errorf("pruning the audit log: %w", describe(err))
	}
	return res.RowsAffected()
}
