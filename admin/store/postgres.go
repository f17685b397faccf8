package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sluice-rl/sluice/admin/pgfiles"
)

// PostgreSQL: several admin processes (replicas) share one database. The
// schema and the behaviour are those of SQLite: the same migrations in
// PostgreSQL's words (pgMigrations[i] is migrations[i]), versions
// appended one writer at a time (a table lock in place of BEGIN
// IMMEDIATE), a stale base refused with a *ConflictError. A version is
// durable when Append returns (the server's synchronous_commit).

// IsPostgresURL tells whether database names a PostgreSQL server
// (postgres:// or postgresql://).
func IsPostgresURL(database string) bool {
	return strings.HasPrefix(database, "postgres://") || strings.HasPrefix(database, "postgresql://")
}

// OpenPostgres connects to the PostgreSQL database at rawURL and applies
// any pending schema migrations in one transaction (under an advisory
// lock, so replicas starting together apply them once).
func OpenPostgres(ctx context.Context, rawURL string) (*Store, error) {
	shown := redactURL(rawURL)
	cfg, err := pgx.ParseConfig(rawURL)
	if err != nil {
		return nil, fmt.Errorf("store: -database %s: %w", shown, errors.Unwrap(err))
	}
	// Certificates and the password file are read again for each new
	// connection: rotated on disk, they are used without a restart.
	db := stdlib.OpenDB(*cfg, stdlib.OptionBeforeConnect(pgfiles.BeforeConnect(func() (*pgx.ConnConfig, error) {
		return pgx.ParseConfig(rawURL)
	})))
	db.SetMaxOpenConns(8)
	db.SetConnMaxIdleTime(time.Minute)
	s := &Store{db: &sqlDB{DB: db, pg: true}, path: shown}
	if err := s.db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("store: connecting to %s: %w", shown, err)
	}
	if err := s.init(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("store: %s: %w", shown, err)
	}
	return s, nil
}

// redactURL is the URL without its password, for messages.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "the PostgreSQL URL (unreadable)"
	}
	return u.Redacted()
}

// pgLockKey is the advisory lock held while migrating.
const pgLockKey = 0x51c3_0001

// pgMigrations are migrations for PostgreSQL, one for one. The schema
// version is the one row of sluice_schema.
var pgMigrations = []string{
	// 1: policy versions, the admin token and UI sessions.
	`
CREATE TABLE policy_versions (
	number      BIGINT PRIMARY KEY CHECK (number > 0),
	parent      BIGINT REFERENCES policy_versions(number) CHECK (parent IS NULL OR parent < number),
	config      TEXT   NOT NULL CHECK ((config::jsonb) IS NOT NULL),
	author      TEXT   NOT NULL,
	message     TEXT   NOT NULL,
	created_at  TEXT   NOT NULL,
	rollback_of BIGINT REFERENCES policy_versions(number)
);

-- Versions are history: never changed, never deleted.
CREATE FUNCTION policy_versions_immutable() RETURNS trigger LANGUAGE plpgsql AS
$$ BEGIN RAISE EXCEPTION 'policy versions are immutable'; END $$;
CREATE TRIGGER policy_versions_no_update BEFORE UPDATE OR DELETE ON policy_versions
FOR EACH ROW EXECUTE FUNCTION policy_versions_immutable();
CREATE TRIGGER policy_versions_no_truncate BEFORE TRUNCATE ON policy_versions
FOR EACH STATEMENT EXECUTE FUNCTION policy_versions_immutable();

CREATE TABLE admin_credentials (
	name       TEXT PRIMARY KEY,
	hash       BYTEA NOT NULL,
	created_at TEXT NOT NULL
);

CREATE TABLE sessions (
	id_hash    BYTEA PRIMARY KEY,
	csrf_token TEXT NOT NULL,
	author     TEXT NOT NULL,
	created_at TEXT NOT NULL,
	expires_at TEXT NOT NULL
);

CREATE INDEX sessions_by_expiry ON sessions(expires_at);
`,
	// 2: a non-secret hint of each credential.
	`
ALTER TABLE admin_credentials ADD COLUMN hint TEXT NOT NULL DEFAULT '';
`,
	// 3: accounts with roles, their API tokens, and the append-only audit log.
	`
CREATE TABLE users (
	name          TEXT NOT NULL PRIMARY KEY,
	role          TEXT NOT NULL CHECK (role IN ('viewer', 'editor', 'admin')),
	password_hash TEXT NOT NULL,
	created_at    TEXT NOT NULL
);

CREATE TABLE api_tokens (
	id           TEXT NOT NULL PRIMARY KEY,
	user_name    TEXT NOT NULL REFERENCES users(name) ON DELETE CASCADE,
	label        TEXT NOT NULL,
	hash         TEXT NOT NULL UNIQUE,
	hint         TEXT NOT NULL,
	created_at   TEXT NOT NULL,
	last_used_at TEXT,
	revoked_at   TEXT
);

CREATE INDEX api_tokens_by_user ON api_tokens(user_name);

-- '' is a login with the admin token (the bootstrap admin).
ALTER TABLE sessions ADD COLUMN user_name TEXT NOT NULL DEFAULT '';

CREATE TABLE audit_log (
	id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	at           TEXT   NOT NULL,
	actor        TEXT   NOT NULL,
	action       TEXT   NOT NULL,
	remote       TEXT   NOT NULL,
	target       TEXT   NOT NULL,
	detail       TEXT   NOT NULL,
	version      BIGINT NOT NULL DEFAULT 0,
	from_version BIGINT NOT NULL DEFAULT 0
);

CREATE INDEX audit_log_by_time ON audit_log(at);

-- Append-only: never changed; deleted only by retention, never an entry
-- younger than a day (times are stored as fixed-width UTC text).
CREATE FUNCTION audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS
$$ BEGIN
	IF TG_OP <> 'DELETE' THEN
		RAISE EXCEPTION 'audit entries are append-only';
	END IF;
	IF OLD.at > to_char((now() AT TIME ZONE 'UTC') - interval '1 day', 'YYYY-MM-DD"T"HH24:MI:SS.US"000Z"') THEN
		RAISE EXCEPTION 'audit entries younger than a day cannot be deleted';
	END IF;
	RETURN OLD;
END $$;
CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE ON audit_log
FOR EACH ROW EXECUTE FUNCTION audit_log_append_only();
CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log
FOR EACH STATEMENT EXECUTE FUNCTION audit_log_append_only();
`,
	// 4: the policies an account may change ('': all).
	`
ALTER TABLE users ADD COLUMN policy_scope TEXT NOT NULL DEFAULT '';
`,
	// 5: the saved policy tests.
	`
CREATE TABLE policy_tests (
	id         INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
	revision   BIGINT  NOT NULL CHECK (revision > 0),
	body       TEXT    NOT NULL,
	author     TEXT    NOT NULL,
	updated_at TEXT    NOT NULL
);
`,
	// 6: changes waiting for review.
	`
CREATE TABLE policy_changes (
	id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	base       BIGINT NOT NULL,
	config     TEXT   NOT NULL,
	tests      TEXT,
	author     TEXT   NOT NULL,
	message    TEXT   NOT NULL,
	created_at TEXT   NOT NULL,
	state      TEXT   NOT NULL CHECK (state IN ('open', 'approved', 'rejected', 'withdrawn')),
	decided_by TEXT   NOT NULL DEFAULT '',
	decided_at TEXT   NOT NULL DEFAULT '',
	reason     TEXT   NOT NULL DEFAULT '',
	version    BIGINT NOT NULL DEFAULT 0
);

CREATE INDEX policy_changes_by_state ON policy_changes(state, id);
`,
	// 7: resets of one identity's limit state.
	`
CREATE TABLE resets (
	id         TEXT NOT NULL PRIMARY KEY,
	created_at TEXT NOT NULL,
	author     TEXT NOT NULL,
	rule       TEXT NOT NULL,
	key        TEXT NOT NULL
);

CREATE INDEX resets_by_time ON resets(created_at, id);
`,
}

func migratePostgres(ctx context.Context, db *sqlDB) (err error) {
	if len(pgMigrations) != len(migrations) {
		return fmt.Errorf("this binary has %d SQLite migrations but %d PostgreSQL ones (a build error)", len(migrations), len(pgMigrations))
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("starting the migration transaction: %w", err)
	}
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()
	if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock(?)", int64(pgLockKey)); err != nil {
		return fmt.Errorf("locking the schema: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS sluice_schema (
		one     BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one),
		version INTEGER NOT NULL)`); err != nil {
		return fmt.Errorf("creating the schema version table: %w", err)
	}
	var have int
	switch err := tx.QueryRowContext(ctx, "SELECT version FROM sluice_schema").Scan(&have); {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return fmt.Errorf("reading the schema version: %w", err)
	}
	if have > len(pgMigrations) {
		return fmt.Errorf("the database has schema version %d but this binary knows only up to %d; run a newer sluice admin (or restore a backup)", have, len(pgMigrations))
	}
	for i := have; i < len(pgMigrations); i++ {
		if _, err := tx.ExecContext(ctx, pgMigrations[i]); err != nil {
			return fmt.Errorf("applying schema migration %d: %w", i+1, err)
		}
	}
	if have < len(pgMigrations) {
		if _, err := tx.ExecContext(ctx, `INSERT INTO sluice_schema (version) VALUES (?)
			ON CONFLICT (one) DO UPDATE SET version = excluded.version`, len(pgMigrations)); err != nil {
			return fmt.Errorf("recording the schema version: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("committing the schema migration: %w", err)
	}
	return nil
}

// OpenDatabase opens the admin's database: PostgreSQL when database is a
// postgres:// URL, else SQLite in dataDir (database empty).
func OpenDatabase(ctx context.Context, database, dataDir string) (*Store, error) {
	switch {
	case database == "":
		return Open(ctx, dataDir)
	case IsPostgresURL(database):
		return OpenPostgres(ctx, database)
	}
	return nil, fmt.Errorf("store: -database %q: give a postgres:// URL, or nothing for SQLite in -data-dir", redactURL(database))
}
