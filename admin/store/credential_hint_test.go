package store

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"
)

func TestPutCredentialAndHint(t *testing.T) {
	s, _ := openTemp(t)
	ctx := context.Background()
	now := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	if _, err := s.Credential(ctx, TelemetryTokenName); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing credential: %v", err)
	}
	if ok, err := s.PutCredential(ctx, TelemetryTokenName, []byte("h1"), "sluice_tel_ab…", now, false); !ok || err != nil {
		t.Fatalf("first put: %v %v", ok, err)
	}
	if ok, err := s.PutCredential(ctx, TelemetryTokenName, []byte("h2"), "x…", now, false); ok || err != nil {
		t.Fatalf("put without replace over an existing one: %v %v", ok, err)
	}
	c, err := s.Credential(ctx, TelemetryTokenName)
	if err != nil || !bytes.Equal(c.Hash, []byte("h1")) || c.Hint != "sluice_tel_ab…" || !c.Created.Equal(now) {
		t.Fatalf("credential %+v %v", c, err)
	}
	// Replacing keeps the sessions (unlike ReplaceCredential for the admin token).
	sess := Session{IDHash: []byte("s"), CSRFToken: "c", Author: "a", Created: now, Expires: now.Add(time.Hour)}
	if err := s.CreateSession(ctx, sess); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.PutCredential(ctx, TelemetryTokenName, []byte("h3"), "y…", now.Add(time.Minute), true); !ok || err != nil {
		t.Fatalf("replace: %v %v", ok, err)
	}
	if c, _ := s.Credential(ctx, TelemetryTokenName); !bytes.Equal(c.Hash, []byte("h3")) || c.Hint != "y…" {
		t.Errorf("after replace %+v", c)
	}
	if _, err := s.Session(ctx, []byte("s"), now); err != nil {
		t.Errorf("the session did not survive: %v", err)
	}
}

// A database of schema version 1 migrates to the current one with its admin
// token intact and an empty hint.
func TestMigrationAddsHint(t *testing.T) {
	s, dir := openTemp(t)
	ctx := context.Background()
	for _, q := range []string{
		// Back to schema 1: undo migrations 7, 6, 5, 3 (with 4's column), then 2.
		"DROP TABLE resets", "DROP TABLE policy_changes", "DROP TABLE policy_tests", "DROP TABLE audit_log", "DROP TABLE api_tokens", "DROP TABLE users", "ALTER TABLE sessions DROP COLUMN user_name",
		"ALTER TABLE admin_credentials DROP COLUMN hint",
		"INSERT INTO admin_credentials (name, hash, created_at) VALUES ('admin', x'0102', '2026-01-01T00:00:00.000000000Z')",
		"PRAGMA user_version = 1",
	} {
		if _, err := s.db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	s.Close()
	s2, err := Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	c, err := s2.Credential(ctx, AdminTokenName)
	if err != nil || !bytes.Equal(c.Hash, []byte{1, 2}) || c.Hint != "" {
		t.Fatalf("after migration: %+v %v", c, err)
	}
	if h, err := s2.CredentialHash(ctx, AdminTokenName); err != nil || !bytes.Equal(h, []byte{1, 2}) {
		t.Errorf("CredentialHash after migration: %v %v", h, err)
	}
}
