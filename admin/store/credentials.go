package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// AdminTokenName names the admin token's row in admin_credentials.
const AdminTokenName = "admin"

// CredentialHash returns the stored hash of the named credential, or
// ErrNotFound.
func (s *Store) CredentialHash(ctx context.Context, name string) ([]byte, error) {
	var h []byte
	err := s.db.QueryRowContext(ctx, "SELECT hash FROM admin_credentials WHERE name = ?", name).Scan(&h)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("reading credential %q: %w", name, describe(err))
	}
	return h, nil
}

// CreateCredential stores hash under name unless the name already has one;
// it reports whether it stored it. Two processes starting on a fresh
// database thus agree on one credential.
func (s *Store) CreateCredential(ctx context.Context, name string, hash []byte, now time.Time) (bool, error) {
	res, err := s.db.ExecContext(ctx, `INSERT INTO admin_credentials (name, hash, created_at)
		VALUES (?, ?, ?) ON CONFLICT(name) DO NOTHING`, name, hash, formatTime(now))
	if err != nil {
		return false, fmt.Errorf("storing credential %q: %w", name, describe(err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, err
	}
	return n == 1, nil
}

// ReplaceCredential stores hash under name and deletes every session, in one
// transaction: after a token rotation nobody stays logged in with the old one.
func (s *Store) ReplaceCredential(ctx context.Context, name string, hash []byte, now time.Time) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("replacing credential %q: %w", name, describe(err))
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO admin_credentials (name, hash, created_at) VALUES (?, ?, ?)
		ON CONFLICT(name) DO UPDATE SET hash = excluded.hash, created_at = excluded.created_at`,
		name, hash, formatTime(now)); err != nil {
		return fmt.Errorf("replacing credential %q: %w", name, describe(err))
	}
	if _, err := tx.ExecContext(ctx, "DELETE FROM sessions"); err != nil {
		return fmt.Errorf("ending sessions: %w", describe(err))
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("replacing credential %q: %w", name, describe(err))
	}
	return nil
}

// Session is a logged-in UI session. The session ID itself is never stored,
// only its hash.
type Session struct {
	IDHash    []byte
	CSRFToken string
	Author    string
	User      string // the account logged in; "" for the admin token
	Role      string // the account's role now (read with the session); "" for the admin token
	Policies  string // the policies the account may change now; "" for all
	Created   time.Time
	Expires   time.Time
}

// CreateSession stores a session.
func (s *Store) CreateSession(ctx context.Context, sess Session) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO sessions (id_hash, csrf_token, author, user_name, created_at, expires_at)
		VALUES (?, ?, ?, ?, ?, ?)`, sess.IDHash, sess.CSRFToken, sess.Author, sess.User, formatTime(sess.Created), formatTime(sess.Expires))
	if err != nil {
		return fmt.Errorf("creating a session: %w", describe(err))
	}
	return nil
}

// Session returns the session with the given ID hash if it has not expired
// at now and its user (if any) still exists, else ErrNotFound. Role is the
// user's role at this moment, so a change of role applies at once.
func (s *Store) Session(ctx context.Context, idHash []byte, now time.Time) (Session, error) {
	var sess Session
	var created, expires string
	err := s.db.QueryRowContext(ctx, `SELECT s.id_hash, s.csrf_token, s.author, s.user_name, COALESCE(u.role, ''), COALESCE(u.policy_scope, ''), s.created_at, s.expires_at
		FROM sessions s LEFT JOIN users u ON u.name = s.user_name
		WHERE s.id_hash = ? AND s.expires_at > ? AND (s.user_name = '' OR u.name IS NOT NULL)`, idHash, formatTime(now)).
		Scan(&sess.IDHash, &sess.CSRFToken, &sess.Author, &sess.User, &sess.Role, &sess.Policies, &created, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return Session{}, ErrNotFound
	}
	if err != nil {
		return Session{}, fmt.Errorf("reading a session: %w", describe(err))
	}
	if sess.Created, err = parseTime(created); err != nil {
		return Session{}, err
	}
	if sess.Expires, err = parseTime(expires); err != nil {
		return Session{}, err
	}
	return sess, nil
}

// DeleteSession removes a session (logout). Deleting a missing one is not an error.
func (s *Store) DeleteSession(ctx context.Context, idHash []byte) error {
	if _, err := s.db.ExecContext(ctx, "DELETE FROM sessions WHERE id_hash = ?", idHash); err != nil {
		return fmt.Errorf("deleting a session: %w", describe(err))
	}
	return nil
}

// DeleteExpiredSessions removes the sessions expired at now and returns how many.
func (s *Store) DeleteExpiredSessions(ctx context.Context, now time.Time) (int64, error) {
	res, err := s.db.ExecContext(ctx, "DELETE FROM sessions WHERE expires_at <= ?", formatTime(now))
	if err != nil {
		return 0, fmt.Errorf("deleting expired sessions: %w", describe(err))
	}
	return res.RowsAffected()
}
