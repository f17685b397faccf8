package store

import (
	"context"
	"database/sql"
	"fmt"
)

// migrations are applied in order; the database's PRAGMA user_version is the
// number applied so far. Never edit a released migration: append a new one.
var migrations = []string{
	// 1: policy versions, the admin token and UI sessions.
	`
CREATE TABLE policy_versions (
	number      INTEGER PRIMARY KEY CHECK (number > 0),
	parent      INTEGER REFERENCES policy_versions(number) CHECK (parent IS NULL OR parent < number),
	config      TEXT    NOT NULL CHECK (json_valid(config)),
	author      TEXT    NOT NULL,
	message     TEXT    NOT NULL,
	created_at  TEXT    NOT NULL,
	rollback_of INTEGER REFERENCES policy_versions(number)
) STRICT;

-- Versions are history: never changed, never deleted.
CREATE TRIGGER policy_versions_no_update BEFORE UPDATE ON policy_versions
BEGIN SELECT RAISE(ABORT, 'policy versions are immutable'); END;
CREATE TRIGGER policy_versions_no_delete BEFORE DELETE ON policy_versions
BEGIN SELECT RAISE(ABORT, 'policy versions are immutable'); END;

CREATE TABLE admin_credentials (
	name       TEXT PRIMARY KEY,
	hash       BLOB NOT NULL,
	created_at TEXT NOT NULL
) STRICT;

CREATE TABLE sessions (
	id_hash    BLOB PRIMARY KEY,
	csrf_token TEXT NOT NULL,
	author     TEXT NOT NULL,
	created_at TEXT NOT NULL,
	expires_at TEXT NOT NULL
) STRICT;

CREATE INDEX sessions_by_expiry ON sessions(expires_at);
`,
	// 2: a non-secret hint of each credential (its first characters), shown
	// so operators can tell which token is in force (the telemetry token).
	`
ALTER TABLE admin_credentials ADD COLUMN hint TEXT NOT NULL DEFAULT '';
`,
	// 3: accounts (users with a role and a bcrypt password hash), their API
	// tokens (SHA-256 hex of the token, never the token), the session's
	// user, and the append-only audit log. Plain SQL that PostgreSQL also
	// runs, but for STRICT and the two triggers (see docs/design/accounts.md).
	`
CREATE TABLE users (
	name          TEXT NOT NULL PRIMARY KEY,
	role          TEXT NOT NULL CHECK (role IN ('viewer', 'editor', 'admin')),
	password_hash TEXT NOT NULL,
	created_at    TEXT NOT NULL
) STRICT;

CREATE TABLE api_tokens (
	id           TEXT NOT NULL PRIMARY KEY,
	user_name    TEXT NOT NULL REFERENCES users(name) ON DELETE CASCADE,
	label        TEXT NOT NULL,
	hash         TEXT NOT NULL UNIQUE,
	hint         TEXT NOT NULL,
	created_at   TEXT NOT NULL,
	last_used_at TEXT,
	revoked_at   TEXT
) STRICT;

CREATE INDEX api_tokens_by_user ON api_tokens(user_name);

-- '' is a login with the admin token (the bootstrap admin).
ALTER TABLE sessions ADD COLUMN user_name TEXT NOT NULL DEFAULT '';

CREATE TABLE audit_log (
	id           INTEGER NOT NULL PRIMARY KEY,
	at           TEXT    NOT NULL,
	actor        TEXT    NOT NULL,
	action       TEXT    NOT NULL,
	remote       TEXT    NOT NULL,
	target       TEXT    NOT NULL,
	detail       TEXT    NOT NULL,
	version      INTEGER NOT NULL DEFAULT 0,
	from_version INTEGER NOT NULL DEFAULT 0
) STRICT;

CREATE INDEX audit_log_by_time ON audit_log(at);

-- Append-only: never changed; deleted only by retention, never an entry
-- younger than a day.
CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log
BEGIN SELECT RAISE(ABORT, 'audit entries are append-only'); END;
CREATE TRIGGER audit_log_no_recent_delete BEFORE DELETE ON audit_log
WHEN OLD.at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 day')
BEGIN SELECT RAISE(ABORT, 'audit entries younger than a day cannot be deleted'); END;
`,
	// 4: the policies an account may change (names and prefixes ending in
	// "*", comma-separated; '': every policy and the top-level settings).
	`
ALTER TABLE users ADD COLUMN policy_scope TEXT NOT NULL DEFAULT '';
`,
	// 5: the saved policy tests every save is checked against: one test
	// file, its revision counting the changes (docs/policy-tests.md).
	`
CREATE TABLE policy_tests (
	id         INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
	revision   INTEGER NOT NULL CHECK (revision > 0),
	body       TEXT    NOT NULL,
	author     TEXT    NOT NULL,
	updated_at TEXT    NOT NULL
) STRICT;
`,
	// 6: changes waiting for review (-review required): a proposed
	// configuration on a base version, and what a reviewer decided.
	`
CREATE TABLE policy_changes (
	id         INTEGER NOT NULL PRIMARY KEY,
	base       INTEGER NOT NULL,
	config     TEXT    NOT NULL,
	tests      TEXT,
	author     TEXT    NOT NULL,
	message    TEXT    NOT NULL,
	created_at TEXT    NOT NULL,
	state      TEXT    NOT NULL CHECK (state IN ('open', 'approved', 'rejected', 'withdrawn')),
	decided_by TEXT    NOT NULL DEFAULT '',
	decided_at TEXT    NOT NULL DEFAULT '',
	reason     TEXT    NOT NULL DEFAULT '',
	version    INTEGER NOT NULL DEFAULT 0
) STRICT;

CREATE INDEX policy_changes_by_state ON policy_changes(state, id);
`,
	// 7: resets of one identity's limit state, carried to the Envoys in
	// the pushed configuration (resets.go). Kept as history, like versions.
	`
CREATE TABLE resets (
	id         TEXT NOT NULL PRIMARY KEY,
	created_at TEXT NOT NULL,
	author     TEXT NOT NULL,
	rule       TEXT NOT NULL,
	key        TEXT NOT NULL
) STRICT;

CREATE INDEX resets_by_time ON resets(created_at, id);
`,
}

// SchemaVersion is the schema version this binary writes.
func SchemaVersion() int { return len(migrations) }

// migrate applies the pending migrations in one write transaction, so two
// processes opening a new database at once cannot both apply them, and a
// crash mid-migration leaves the previous schema.
func migrate(ctx context.Context, db *sql.DB) (err error) {
	tx, err := db.BeginTx(ctx, nil) // BEGIN IMMEDIATE: holds the write lock from here
	if err != nil {
		return fmt.Errorf("starting the migration transaction: %w", describe(err))
	}
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()
	var have int
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&have); err != nil {
		return fmt.Errorf("reading the schema version: %w", err)
	}
	if have > len(migrations) {
		return fmt.Errorf("the database has schema version %d but this binary knows only up to %d; run a newer sluice admin (or restore a backup)", have, len(migrations))
	}
	if have < 0 {
		return fmt.Errorf("the database has an invalid schema version %d", have)
	}
	for i := have; i < len(migrations); i++ {
		if _, err := tx.ExecContext(ctx, migrations[i]); err != nil {
			return fmt.Errorf("applying schema migration %d: %w", i+1, err)
		}
	}
	if have < len(migrations) {
		// PRAGMA does not take parameters; the value is our own integer.
		if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", len(migrations))); err != nil {
			return fmt.Errorf("recording the schema version: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("committing the schema migration: %w", describe(err))
	}
	return nil
}
