package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrExists is returned when creating a user whose name is taken.
var ErrExists = errors.New("already exists")

// User is an account. PasswordHash is a bcrypt hash, never a password.
type User struct {
	Name         string
	Role         string // "viewer", "editor" or "admin"
	PasswordHash string
	Created      time.Time
	Policies     string // the policies the user may change (policies.Scope's text); "" for all
}

// CreateUser stores a new user, or returns ErrExists.
func (s *Store) CreateUser(ctx context.Context, u User) error {
	res, err := s.db.ExecContext(ctx, `INSERT INTO users (name, role, password_hash, created_at, policy_scope) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT(name) DO NOTHING`, u.Name, u.Role, u.PasswordHash, formatTime(u.Created), u.Policies)
	if err != nil {
		return fmt.Errorf("creating user %q: %w", u.Name, describe(err))
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return fmt.Errorf("user %q: %w", u.Name, ErrExists)
	}
	return nil
}

// User returns the named user, or ErrNotFound.
func (s *Store) User(ctx context.Context, name string) (User, error) {
	u := User{Name: name}
	var created string
	err := s.db.QueryRowContext(ctx, "SELECT role, password_hash, created_at, policy_scope FROM users WHERE name = ?", name).
		Scan(&u.Role, &u.PasswordHash, &created, &u.Policies)
	if errors.Is(err, sql.ErrNoRows) {
		return User{}, ErrNotFound
	}
	if err != nil {
		return User{}, fmt.Errorf("reading user %q: %w", name, describe(err))
	}
	u.Created, err = parseTime(created)
	return u, err
}

// Users lists every user by name.
func (s *Store) Users(ctx context.Context) ([]User, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT name, role, password_hash, created_at, policy_scope FROM users ORDER BY name")
	if err != nil {
		return nil, fmt.Errorf("listing users: %w", describe(err))
	}
	defer rows.Close()
	var out []User
	for rows.Next() {
		var u User
		var created string
		if err := rows.Scan(&u.Name, &u.Role, &u.PasswordHash, &created, &u.Policies); err != nil {
			return nil, err
		}
		if u.Created, err = parseTime(created); err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	return out, rows.Err()
}

// AccountChange is what UpdateAccount changes; zero fields stay as they
// are.
type AccountChange struct {
	Role         string  // "" keeps the role
	PasswordHash string  // "" keeps the password; a new one ends the user's sessions
	Policies     *string // nil keeps them; "" is every policy
}

// UpdateAccount applies c to the user in one transaction, so no one ever
// sees half of it (a new role without its scope). ErrNotFound if there is
// no such user.
func (s *Store) UpdateAccount(ctx context.Context, name string, c AccountChange) error {
	var sets []string
	var args []any
	if c.Role != "" {
		sets, args = append(sets, "role = ?"), append(args, c.Role)
	}
	if c.PasswordHash != "" {
		sets, args = append(sets, "password_hash = ?"), append(args, c.PasswordHash)
	}
	if c.Policies != nil {
		sets, args = append(sets, "policy_scope = ?"), append(args, *c.Policies)
	}
	if len(sets) == 0 {
		_, err := s.User(ctx, name)
		return err
	}
	return s.inTx(ctx, "updating user "+name, func(tx *sqlTx) error {
		res, err := tx.ExecContext(ctx, "UPDATE users SET "+strings.Join(sets, ", ")+" WHERE name = ?", append(args, name)...)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return ErrNotFound
		}
		if c.PasswordHash != "" {
			_, err = tx.ExecContext(ctx, "DELETE FROM sessions WHERE user_name = ?", name)
		}
		return err
	})
}

// UpdateUser changes a user's role and, if passwordHash is not empty, the
// password hash (UpdateAccount).
func (s *Store) UpdateUser(ctx context.Context, name, role, passwordHash string) error {
	return s.UpdateAccount(ctx, name, AccountChange{Role: role, PasswordHash: passwordHash})
}

// SetUserPolicies sets the policies a user may change ("" for all)
// (UpdateAccount).
func (s *Store) SetUserPolicies(ctx context.Context, name, policies string) error {
	return s.UpdateAccount(ctx, name, AccountChange{Policies: &policies})
}

// DeleteUser removes a user with its tokens and sessions, or returns ErrNotFound.
func (s *Store) DeleteUser(ctx context.Context, name string) error {
	return s.inTx(ctx, "deleting user "+name, func(tx *sqlTx) error {
		if _, err := tx.ExecContext(ctx, "DELETE FROM api_tokens WHERE user_name = ?", name); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "DELETE FROM sessions WHERE user_name = ?", name); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, "DELETE FROM users WHERE name = ?", name)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return ErrNotFound
		}
		return nil
	})
}

func (s *Store) inTx(ctx context.Context, what string, f func(*sqlTx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("%s: %w", what, describe(err))
	}
	defer tx.Rollback()
	if err := f(tx); err != nil {
		if errors.Is(err, ErrNotFound) {
			return err
		}
		return fmt.Errorf("%s: %w", what, describe(err))
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("%s: %w", what, describe(err))
	}
	return nil
}

// APIToken is a user's API token. Hash is the hex SHA-256 of the token;
// the token itself is never stored.
type APIToken struct {
	ID       string
	User     string
	Role     string // the user's role (read with the token)
	Policies string // the policies the user may change (read with the token)
	Label    string
	Hash     string
	Hint     string // the token's first characters, safe to show
	Created  time.Time
	LastUsed time.Time // zero: never used
	Revoked  time.Time // zero: in force
}

// CreateAPIToken stores a token for an existing user (ErrNotFound if the
// user does not exist).
func (s *Store) CreateAPIToken(ctx context.Context, t APIToken) error {
	return s.inTx(ctx, "creating a token for "+t.User, func(tx *sqlTx) error {
		var one int
		if err := tx.QueryRowContext(ctx, "SELECT 1 FROM users WHERE name = ?", t.User).Scan(&one); errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		} else if err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO api_tokens (id, user_name, label, hash, hint, created_at) VALUES (?, ?, ?, ?, ?, ?)`,
			t.ID, t.User, t.Label, t.Hash, t.Hint, formatTime(t.Created))
		return err
	})
}

const tokenColumns = `t.id, t.user_name, u.role, u.policy_scope, t.label, t.hash, t.hint, t.created_at, COALESCE(t.last_used_at, ''), COALESCE(t.revoked_at, '')`

func scanToken(sc interface{ Scan(...any) error }) (APIToken, error) {
	var t APIToken
	var created, used, revoked string
	if err := sc.Scan(&t.ID, &t.User, &t.Role, &t.Policies, &t.Label, &t.Hash, &t.Hint, &created, &used, &revoked); err != nil {
		return APIToken{}, err
	}
	var err error
	if t.Created, err = parseTime(created); err != nil {
		return APIToken{}, err
	}
	for _, p := range []struct {
		s string
		t *time.Time
	}{{used, &t.LastUsed}, {revoked, &t.Revoked}} {
		if p.s != "" {
			if *p.t, err = parseTime(p.s); err != nil {
				return APIToken{}, err
			}
		}
	}
	return t, nil
}

// APITokenByHash returns the token in force (not revoked) with this hash,
// or ErrNotFound.
func (s *Store) APITokenByHash(ctx context.Context, hash string) (APIToken, error) {
	t, err := scanToken(s.db.QueryRowContext(ctx, `SELECT `+tokenColumns+` FROM api_tokens t JOIN users u ON u.name = t.user_name
		WHERE t.hash = ? AND t.revoked_at IS NULL`, hash))
	if errors.Is(err, sql.ErrNoRows) {
		return APIToken{}, ErrNotFound
	}
	if err != nil {
		return APIToken{}, fmt.Errorf("reading a token: %w", describe(err))
	}
	return t, nil
}

// APITokens lists every token, revoked ones included, newest first.
func (s *Store) APITokens(ctx context.Context) ([]APIToken, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+tokenColumns+` FROM api_tokens t JOIN users u ON u.name = t.user_name
		ORDER BY t.created_at DESC, t.id`)
	if err != nil {
		return nil, fmt.Errorf("listing tokens: %w", describe(err))
	}
	defer rows.Close()
	var out []APIToken
	for rows.Next() {
		t, err := scanToken(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// TouchAPIToken records a use of the token at now, if the last recorded
// use is older than every (so a busy token is not a write per request).
func (s *Store) TouchAPIToken(ctx context.Context, id string, now time.Time, every time.Duration) error {
	_, err := s.db.ExecContext(ctx, `UPDATE api_tokens SET last_used_at = ? WHERE id = ? AND (last_used_at IS NULL OR last_used_at < ?)`,
		formatTime(now), id, formatTime(now.Add(-every)))
	if err != nil {
		return fmt.Errorf("recording a token's use: %w", describe(err))
	}
	return nil
}

// RevokeAPIToken marks a token revoked at now and returns it; ErrNotFound
// if there is no such token in force.
func (s *Store) RevokeAPIToken(ctx context.Context, id string, now time.Time) (APIToken, error) {
	res, err := s.db.ExecContext(ctx, "UPDATE api_tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", formatTime(now), id)
	if err != nil {
		return APIToken{}, fmt.Errorf("revoking a token: %w", describe(err))
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return APIToken{}, ErrNotFound
	}
	t, err := scanToken(s.db.QueryRowContext(ctx, `SELECT `+tokenColumns+` FROM api_tokens t JOIN users u ON u.name = t.user_name WHERE t.id = ?`, id))
	if err != nil {
		return APIToken{}, fmt.Errorf("reading a token: %w", describe(err))
	}
	return t, nil
}
