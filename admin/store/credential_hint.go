package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// TelemetryTokenName names the telemetry token's row in admin_credentials:
// the bearer token the plugins send with their reports.
const TelemetryTokenName = "telemetry"

// Credential is a stored credential: the hash of a secret and a hint (its
// first characters, safe to show) to tell which secret it is.
type Credential struct {
	Name    string
	Hash    []byte
	Hint    string
	Created time.Time
}

// Credential returns the named credential, or ErrNotFound.
func (s *Store) Credential(ctx context.Context, name string) (Credential, error) {
	c := Credential{Name: name}
	var created string
	err := s.db.QueryRowContext(ctx, "SELECT hash, hint, created_at FROM admin_credentials WHERE name = ?", name).
		Scan(&c.Hash, &c.Hint, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return Credential{}, ErrNotFound
	}
	if err != nil {
		return Credential{}, fmt.Errorf("reading credential %q: %w", name, describe(err))
	}
	if c.Created, err = parseTime(created); err != nil {
		return Credential{}, err
	}
	return c, nil
}

// PutCredential stores hash and hint under name. With replace false it
// stores them only if the name has no credential yet, and reports whether
// it did (two processes starting on a fresh database agree on one); with
// replace true it overwrites. Unlike ReplaceCredential it leaves the
// sessions alone: it is for credentials other than the admin token.
func (s *Store) PutCredential(ctx context.Context, name string, hash []byte, hint string, now time.Time, replace bool) (bool, error) {
	q := `INSERT INTO admin_credentials (name, hash, hint, created_at) VALUES (?, ?, ?, ?) ON CONFLICT(name) DO NOTHING`
	if replace {
		q = `INSERT INTO admin_credentials (name, hash, hint, created_at) VALUES (?, ?, ?, ?)
			ON CONFLICT(name) DO UPDATE SET hash = excluded.hash, hint = excluded.hint, created_at = excluded.created_at`
	}
	res, err := s.db.ExecContext(ctx, q, name, hash, hint, formatTime(now))
	if err != nil {
		return false, fmt.Errorf("storing credential %q: %w", name, describe(err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, err
	}
	return n == 1, nil
}
