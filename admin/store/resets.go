package store

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// Reset is one reset of limit state: the admin pushes it in the
// configuration, and each Envoy forgets the state of Key under Rule once
// (by ID), or with All the state of every identity of Rule.
type Reset struct {
	ID      string
	Created time.Time
	Author  string
	Rule    string
	Key     string // "" with All
	All     bool   // every identity of Rule
}

// A reset of every identity is stored with the key '': no identity has an
// empty key (the filter refuses one), and an admin that does not know
// such resets leaves one out of its pushes (Compose drops the resets the
// configuration refuses) rather than pushing a wrong one.

// AddReset stores a reset. The primary key refuses an ID already stored
// (IDs are generated to be unique across replicas).
func (s *Store) AddReset(ctx context.Context, r Reset) error {
	switch {
	case r.All && r.Key != "":
		return fmt.Errorf("storing the reset: a reset of every identity of %q names a key too", r.Rule)
	case !r.All && r.Key == "":
		return fmt.Errorf("storing the reset: a reset of one identity of %q has an empty key", r.Rule)
	}
	_, err := s.db.ExecContext(ctx, `INSERT INTO resets (id, created_at, author, rule, key) VALUES (?, ?, ?, ?, ?)`,
		r.ID, formatTime(r.Created), r.Author, r.Rule, r.Key)
	if err != nil {
		return fmt.Errorf("storing the reset: %w", describe(err))
	}
	return nil
}

// Resets returns up to limit resets, newest first.
func (s *Store) Resets(ctx context.Context, limit int) ([]Reset, error) {
	return s.queryResets(ctx, `SELECT id, created_at, author, rule, key FROM resets
		ORDER BY created_at DESC, id DESC LIMIT ?`, limit)
}

// ResetWindow returns the resets created within window of the newest one,
// at most limit of them (the newest), oldest first. The set depends on the
// database alone, not on the reader's clock, so every admin replica
// composes the same configuration from it.
func (s *Store) ResetWindow(ctx context.Context, window time.Duration, limit int) ([]Reset, error) {
	var newest string
	err := s.db.QueryRowContext(ctx, `SELECT COALESCE(MAX(created_at), '') FROM resets`).Scan(&newest)
	if err != nil || newest == "" {
		return nil, describe(err)
	}
	t, err := parseTime(newest)
	if err != nil {
		return nil, err
	}
	rs, err := s.queryResets(ctx, `SELECT id, created_at, author, rule, key FROM resets
		WHERE created_at >= ? ORDER BY created_at DESC, id DESC LIMIT ?`, formatTime(t.Add(-window)), limit)
	slices.Reverse(rs)
	return rs, err
}

// ResetsMark changes whenever a reset is added: replicas poll it to learn
// of resets another admin added (a count, since a replica whose clock is
// behind may add a reset that is not the newest).
func (s *Store) ResetsMark(ctx context.Context) (string, error) {
	var n int64
	var newest string
	err := s.db.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(MAX(created_at), '') FROM resets`).Scan(&n, &newest)
	if err != nil {
		return "", describe(err)
	}
	return strconv.FormatInt(n, 10) + "/" + newest, nil
}

func (s *Store) queryResets(ctx context.Context, q string, args ...any) ([]Reset, error) {
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, describe(err)
	}
	defer rows.Close()
	var out []Reset
	for rows.Next() {
		var r Reset
		var created string
		if err := rows.Scan(&r.ID, &created, &r.Author, &r.Rule, &r.Key); err != nil {
			return nil, err
		}
		r.All = r.Key == ""
		if r.Created, err = parseTime(created); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}
