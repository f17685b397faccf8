package store

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func openTemp(t *testing.T) (*Store, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, dir
}

func cfg(n int) []byte { return fmt.Appendf(nil, `{"rules":[{"n":%d}]}`, n) }

func TestOpenCreatesWALDatabase(t *testing.T) {
	s, dir := openTemp(t)
	if s.Path() != filepath.Join(dir, FileName) {
		t.Errorf("Path = %s", s.Path())
	}
	var mode string
	if err := s.db.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		t.Errorf("journal_mode = %q, %v; want wal", mode, err)
	}
	var timeout int
	if err := s.db.QueryRow("PRAGMA busy_timeout").Scan(&timeout); err != nil || timeout != int(BusyTimeout.Milliseconds()) {
		t.Errorf("busy_timeout = %d, %v", timeout, err)
	}
	var sync int
	if err := s.db.QueryRow("PRAGMA synchronous").Scan(&sync); err != nil || sync != 2 {
		t.Errorf("synchronous = %d, %v; want 2 (FULL)", sync, err)
	}
	var uv int
	if err := s.db.QueryRow("PRAGMA user_version").Scan(&uv); err != nil || uv != SchemaVersion() {
		t.Errorf("user_version = %d, %v; want %d", uv, err, SchemaVersion())
	}
	if err := s.IntegrityCheck(context.Background()); err != nil {
		t.Error(err)
	}
	sub := filepath.Join(dir, "new")
	s2, err := Open(context.Background(), sub)
	if err != nil {
		t.Fatal(err)
	}
	s2.Close()
	if fi, err := os.Stat(sub); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("a new data directory must be private (0700): %v, %v", fi.Mode(), err)
	}
}

func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := Open(ctx, ""); err == nil || !strings.Contains(err.Error(), "-data-dir") {
		t.Errorf("empty dir: %v", err)
	}
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o600)
	if _, err := Open(ctx, filepath.Join(file, "sub")); err == nil {
		t.Error("a data directory under a file opened")
	}
	if _, err := Open(ctx, filepath.Join(t.TempDir(), "a?b")); err == nil || !strings.Contains(err.Error(), "'?'") {
		t.Errorf("dir with '?': %v", err)
	}
}

func TestMigrationsIdempotentAndNewerSchemaRefused(t *testing.T) {
	ctx := context.Background()
	s, dir := openTemp(t)
	if _, err := s.Append(ctx, 0, NewVersion{JSON: cfg(1), Author: "a", Message: "m"}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s2, err := Open(ctx, dir) // reopening applies nothing and keeps the data
	if err != nil {
		t.Fatal(err)
	}
	if n, err := s2.CurrentNumber(ctx); err != nil || n != 1 {
		t.Fatalf("after reopen: current %d, %v", n, err)
	}
	if _, err := s2.db.Exec(fmt.Sprintf("PRAGMA user_version = %d", SchemaVersion()+1)); err != nil {
		t.Fatal(err)
	}
	s2.Close()
	_, err = Open(ctx, dir)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("schema version %d", SchemaVersion()+1)) {
		t.Fatalf("newer schema: %v", err)
	}
}

func TestMigrationIsAtomic(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	saved := migrations
	t.Cleanup(func() { migrations = saved })
	migrations = append(append([]string{}, saved...), "CREATE TABLE extra (x INTEGER); THIS IS NOT SQL;")
	if _, err := Open(ctx, dir); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("migration %d", len(migrations))) {
		t.Fatalf("broken migration: %v", err)
	}
	migrations = saved
	s, err := Open(ctx, dir)
	if err != nil {
		t.Fatalf("after a failed migration the database must open at the old schema: %v", err)
	}
	defer s.Close()
	var n int
	if err := s.db.QueryRow("SELECT count(*) FROM sqlite_master WHERE name = 'extra'").Scan(&n); err != nil || n != 0 {
		t.Errorf("the failed migration left table extra behind (%d, %v)", n, err)
	}
}

func TestAppendGetListCurrent(t *testing.T) {
	ctx := context.Background()
	s, _ := openTemp(t)
	if _, err := s.Current(ctx); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Current on empty db: %v", err)
	}
	created := time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.FixedZone("x", 3600))
	for i := 1; i <= 5; i++ {
		v, err := s.Append(ctx, int64(i-1), NewVersion{JSON: cfg(i), Author: "alice", Message: fmt.Sprint("change ", i), Created: created})
		if err != nil {
			t.Fatal(err)
		}
		if v.Number != int64(i) || v.Parent != int64(i-1) {
			t.Fatalf("version %d has number %d parent %d", i, v.Number, v.Parent)
		}
	}
	v, err := s.Get(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(v.JSON, cfg(3)) || v.Author != "alice" || v.Message != "change 3" || v.Parent != 2 || !v.Created.Equal(created) {
		t.Errorf("Get(3) = %+v", v)
	}
	if _, err := s.Get(ctx, 99); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(99): %v", err)
	}
	cur, err := s.Current(ctx)
	if err != nil || cur.Number != 5 {
		t.Fatalf("Current = %d, %v", cur.Number, err)
	}
	page, err := s.List(ctx, 0, 2)
	if err != nil || len(page) != 2 || page[0].Number != 5 || page[1].Number != 4 {
		t.Fatalf("List(0,2) = %v, %v", numbers(page), err)
	}
	page, err = s.List(ctx, 4, 10)
	if err != nil || fmt.Sprint(numbers(page)) != "[3 2 1]" {
		t.Fatalf("List(4,10) = %v, %v", numbers(page), err)
	}
	if page[2].Parent != 0 {
		t.Errorf("first version has parent %d", page[2].Parent)
	}
	// A rollback records what it restored; the target must exist.
	rb, err := s.Append(ctx, 5, NewVersion{JSON: cfg(2), Author: "bob", Message: "rollback to v2", RollbackOf: 2})
	if err != nil || rb.RollbackOf != 2 {
		t.Fatalf("rollback: %+v, %v", rb, err)
	}
	if got, _ := s.Get(ctx, 6); got.RollbackOf != 2 {
		t.Errorf("stored rollback_of = %d", got.RollbackOf)
	}
	if _, err := s.Append(ctx, 6, NewVersion{JSON: cfg(1), RollbackOf: 42}); err == nil {
		t.Error("a rollback to a missing version was stored")
	}
	if _, err := s.Append(ctx, 6, NewVersion{JSON: []byte("{not json")}); err == nil {
		t.Error("invalid JSON was stored")
	}
	if n, _ := s.CurrentNumber(ctx); n != 6 {
		t.Errorf("refused appends changed the current version to %d", n)
	}
	// Stored versions are immutable, even to a direct SQL statement.
	for _, stmt := range []string{"UPDATE policy_versions SET message = 'x' WHERE number = 1", "DELETE FROM policy_versions WHERE number = 6"} {
		if _, err := s.db.Exec(stmt); err == nil || !strings.Contains(err.Error(), "immutable") {
			t.Errorf("%s: %v", stmt, err)
		}
	}
}

func numbers(vs []Version) []int64 {
	var out []int64
	for _, v := range vs {
		out = append(out, v.Number)
	}
	return out
}

func TestAppendStaleBaseConflict(t *testing.T) {
	ctx := context.Background()
	s, _ := openTemp(t)
	for i := 1; i <= 3; i++ {
		if _, err := s.Append(ctx, int64(i-1), NewVersion{JSON: cfg(i)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, base := range []int64{0, 2, 7} {
		_, err := s.Append(ctx, base, NewVersion{JSON: cfg(9)})
		var ce *ConflictError
		if !errors.As(err, &ce) || ce.Base != base || ce.Current != 3 {
			t.Fatalf("base %d: %v", base, err)
		}
		if !strings.Contains(err.Error(), "current version is 3") {
			t.Errorf("message does not name the current version: %v", err)
		}
	}
	if _, err := s.Append(ctx, -1, NewVersion{JSON: cfg(9)}); err == nil {
		t.Error("negative base accepted")
	}
}

// TestConcurrentAppends races N writers on the same base, through one Store
// and through several Stores (separate connection pools, like separate
// processes), round after round: exactly one wins each round, the others get
// a conflict naming the winner's version, and nothing is lost.
func TestConcurrentAppends(t *testing.T) {
	ctx := context.Background()
	s, dir := openTemp(t)
	stores := []*Store{s}
	for range 3 {
		o, err := Open(ctx, dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { o.Close() })
		stores = append(stores, o)
	}
	const writers, rounds = 8, 10
	var wins []string
	for round := range rounds {
		base := int64(round)
		var wg sync.WaitGroup
		results := make([]error, writers)
		start := make(chan struct{})
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				st := stores[w%len(stores)]
				_, results[w] = st.Append(ctx, base, NewVersion{JSON: fmt.Appendf(nil, `{"w":%d,"r":%d}`, w, round), Author: fmt.Sprint("w", w)})
			}()
		}
		close(start)
		wg.Wait()
		winners := 0
		for w, err := range results {
			var ce *ConflictError
			switch {
			case err == nil:
				winners++
				wins = append(wins, fmt.Sprintf(`{"w":%d,"r":%d}`, w, round))
			case errors.As(err, &ce):
				if ce.Base != base || ce.Current != base+1 {
					t.Errorf("round %d writer %d: conflict %+v", round, w, ce)
				}
			default:
				t.Errorf("round %d writer %d: unexpected error %v", round, w, err)
			}
		}
		if winners != 1 {
			t.Fatalf("round %d: %d winners, want exactly 1", round, winners)
		}
	}
	all, err := s.List(ctx, 0, 1000)
	if err != nil || len(all) != rounds {
		t.Fatalf("stored %d versions, %v; want %d", len(all), err, rounds)
	}
	for i, v := range all {
		n := int64(rounds - i)
		if v.Number != n || v.Parent != n-1 || string(v.JSON) != wins[n-1] {
			t.Errorf("version %d = %+v; want the winner %s", n, v, wins[n-1])
		}
	}
}

func TestCredentialsAndSessions(t *testing.T) {
	ctx := context.Background()
	s, _ := openTemp(t)
	now := time.Now()
	if _, err := s.CredentialHash(ctx, AdminTokenName); !errors.Is(err, ErrNotFound) {
		t.Fatalf("empty: %v", err)
	}
	ok, err := s.CreateCredential(ctx, AdminTokenName, []byte("h1"), now)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	ok, err = s.CreateCredential(ctx, AdminTokenName, []byte("h2"), now)
	if err != nil || ok {
		t.Fatalf("second create: %v %v; must not overwrite", ok, err)
	}
	if h, _ := s.CredentialHash(ctx, AdminTokenName); string(h) != "h1" {
		t.Errorf("hash = %q", h)
	}
	sess := Session{IDHash: []byte("id"), CSRFToken: "c", Author: "alice", Created: now, Expires: now.Add(time.Hour)}
	if err := s.CreateSession(ctx, sess); err != nil {
		t.Fatal(err)
	}
	got, err := s.Session(ctx, []byte("id"), now)
	if err != nil || got.CSRFToken != "c" || got.Author != "alice" {
		t.Fatalf("Session = %+v, %v", got, err)
	}
	if _, err := s.Session(ctx, []byte("id"), now.Add(2*time.Hour)); !errors.Is(err, ErrNotFound) {
		t.Errorf("expired session returned: %v", err)
	}
	if _, err := s.Session(ctx, []byte("other"), now); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown session: %v", err)
	}
	if n, err := s.DeleteExpiredSessions(ctx, now.Add(2*time.Hour)); err != nil || n != 1 {
		t.Errorf("DeleteExpiredSessions = %d, %v", n, err)
	}
	s.CreateSession(ctx, sess)
	if err := s.ReplaceCredential(ctx, AdminTokenName, []byte("h3"), now); err != nil {
		t.Fatal(err)
	}
	if h, _ := s.CredentialHash(ctx, AdminTokenName); string(h) != "h3" {
		t.Errorf("after replace hash = %q", h)
	}
	if _, err := s.Session(ctx, []byte("id"), now); !errors.Is(err, ErrNotFound) {
		t.Errorf("a session survived the token rotation: %v", err)
	}
	s.CreateSession(ctx, sess)
	if err := s.DeleteSession(ctx, []byte("id")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Session(ctx, []byte("id"), now); !errors.Is(err, ErrNotFound) {
		t.Errorf("deleted session returned: %v", err)
	}
}

func TestBusyErrorIsDescribed(t *testing.T) {
	// A writer blocked longer than the busy timeout gets an error that says so.
	if testing.Short() {
		t.Skip("waits for the busy timeout")
	}
	ctx := context.Background()
	s, dir := openTemp(t)
	raw, err := sql.Open("sqlite", filepath.Join(dir, FileName)+"?_busy_timeout=0&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	tx, err := raw.Begin() // holds the write lock
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	shortCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	old := s.db
	fast, err := sql.Open("sqlite", s.Path()+"?_busy_timeout=50&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	defer fast.Close()
	s.db = &sqlDB{DB: fast}
	defer func() { s.db = old }()
	_, err = s.Append(shortCtx, 0, NewVersion{JSON: cfg(1)})
	if err == nil || !strings.Contains(err.Error(), "stayed locked") {
		t.Errorf("Append under a held lock: %v", err)
	}
}
