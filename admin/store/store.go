// Package store is the admin server's embedded database: a SQLite file
// (modernc.org/sqlite, no cgo) in the data directory holding every policy
// version ever saved, the admin token's hash and the UI sessions.
//
// The database runs in WAL mode with synchronous=FULL: a version is on disk
// when Append returns, and a process killed mid-write leaves the file
// consistent (the half-written transaction is rolled back at the next open).
// Writes take the write lock at BEGIN (BEGIN IMMEDIATE) and wait up to the
// busy timeout for it, so several admin processes may share one directory.
//
// Policy versions are immutable and numbered 1, 2, 3, ...: the current
// version is the highest number. Append takes the version the change was
// based on and refuses a stale base with a *ConflictError, so two editors
// never overwrite each other's work.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	_ "modernc.org/sqlite" // the "sqlite" driver
)

// FileName is the database file inside the data directory.
const FileName = "sluice.db"

// BusyTimeout is how long a statement waits for another connection's lock.
const BusyTimeout = 10 * time.Second

// ErrNotFound is returned when a version, session or credential does not exist.
var ErrNotFound = errors.New("not found")

// Store is the admin database. It is safe for concurrent use.
type Store struct {
	db   *sqlDB
	path string // the SQLite file, or the PostgreSQL URL without its password
}

// Open opens (creating if needed) the database in dir and applies any
// pending schema migrations in one transaction.
func Open(ctx context.Context, dir string) (*Store, error) {
	if dir == "" {
		return nil, errors.New("store: data directory is empty; pass -data-dir")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("store: data directory %q: %w", dir, err)
	}
	if strings.ContainsAny(abs, "?#") {
		return nil, fmt.Errorf("store: data directory %q: the path may not contain '?' or '#'", abs)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("store: creating data directory: %w", err)
	}
	path := filepath.Join(abs, FileName)
	dsn := path + "?_busy_timeout=" + fmt.Sprint(BusyTimeout.Milliseconds()) +
		"&_journal_mode=WAL&_synchronous=FULL&_foreign_keys=on&_txlock=immediate"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("store: opening %s: %w", path, err)
	}
	db.SetMaxOpenConns(8)
	db.SetConnMaxIdleTime(time.Minute)
	s := &Store{db: &sqlDB{DB: db}, path: path}
	if err := s.init(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("store: %s: %w", path, err)
	}
	return s, nil
}

func (s *Store) init(ctx context.Context) error {
	if s.db.pg {
		return migratePostgres(ctx, s.db)
	}
	var mode string
	if err := s.db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return fmt.Errorf("reading journal mode: %w", describe(err))
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("the database is in journal mode %q, not WAL (is the data directory on a file system without shared memory support?)", mode)
	}
	return migrate(ctx, s.db.DB)
}

// Path is the database file (for PostgreSQL, its URL without the password).
func (s *Store) Path() string { return s.path }

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// IntegrityCheck runs SQLite's integrity_check and returns an error listing
// the problems, if any.
func (s *Store) IntegrityCheck(ctx context.Context) error {
	if s.db.pg {
		return nil // PostgreSQL checks its pages itself
	}
	rows, err := s.db.QueryContext(ctx, "PRAGMA integrity_check")
	if err != nil {
		return describe(err)
	}
	defer rows.Close()
	var problems []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return describe(err)
		}
		if line != "ok" {
			problems = append(problems, line)
		}
	}
	if err := rows.Err(); err != nil {
		return describe(err)
	}
	if len(problems) > 0 {
		return fmt.Errorf("integrity check failed: %s", strings.Join(problems, "; "))
	}
	return nil
}

// SQLite result codes used here (the driver reports extended codes; the
// primary code is the low byte).
const (
	codeBusy       = 5
	codeConstraint = 19
)

// describe adds advice to the errors an operator can act on.
func describe(err error) error {
	switch primaryCode(err) {
	case codeBusy:
		return fmt.Errorf("%w (the database stayed locked for more than %v; is another process holding a long transaction?)", err, BusyTimeout)
	}
	return err
}

// timeFormat is how times are stored: UTC, fixed width, so that text order
// is time order.
const timeFormat = "2006-01-02T15:04:05.000000000Z"

func formatTime(t time.Time) string { return t.UTC().Format(timeFormat) }

func parseTime(s string) (time.Time, error) {
	t, err := time.Parse(timeFormat, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("stored time %q is malformed: %w", s, err)
	}
	return t, nil
}
