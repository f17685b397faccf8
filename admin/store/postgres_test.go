package store

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/admin/fleet/fleettest"
)

func openPostgres(t *testing.T, url string) *Store {
	t.Helper()
	s, err := OpenPostgres(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// The PostgreSQL store keeps versions, credentials and sessions as the
// SQLite one does, and a second process opening it finds the schema done.
func TestPostgresStoreBehavesLikeSQLite(t *testing.T) {
	pg := fleettest.StartPostgres(t, fleettest.PostgresOptions{})
	ctx := context.Background()
	s := openPostgres(t, pg.URL)
	if _, err := s.Current(ctx); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Current of an empty database: %v", err)
	}
	t1 := time.Date(2026, 1, 2, 3, 4, 5, 600, time.UTC)
	for n := 1; n <= 3; n++ {
		v, err := s.Append(ctx, int64(n-1), NewVersion{JSON: cfg(n), Author: "ops", Message: "m", Created: t1})
		if err != nil || v.Number != int64(n) {
			t.Fatalf("Append %d: %+v, %v", n, v, err)
		}
	}
	if _, err := s.Append(ctx, 3, NewVersion{JSON: cfg(1), RollbackOf: 1, Created: t1}); err != nil {
		t.Fatal(err)
	}
	var ce *ConflictError
	if _, err := s.Append(ctx, 2, NewVersion{JSON: cfg(9)}); !errors.As(err, &ce) || ce.Base != 2 || ce.Current != 4 {
		t.Errorf("stale base: %v, want a conflict naming version 4", err)
	}

	// A second process: the migrations are not applied again.
	s2 := openPostgres(t, pg.URL)
	var schema int
	if err := s2.db.QueryRow("SELECT version FROM sluice_schema").Scan(&schema); err != nil || schema != SchemaVersion() {
		t.Errorf("schema version %d, %v; want %d", schema, err, SchemaVersion())
	}
	cur, err := s2.Current(ctx)
	if err != nil || cur.Number != 4 || cur.RollbackOf != 1 || cur.Parent != 3 || string(cur.JSON) != string(cfg(1)) || !cur.Created.Equal(t1) {
		t.Errorf("Current from the second process: %+v, %v", cur, err)
	}
	if v, err := s2.Get(ctx, 2); err != nil || string(v.JSON) != string(cfg(2)) || v.Author != "ops" {
		t.Errorf("Get 2: %+v, %v", v, err)
	}
	if _, err := s2.Get(ctx, 99); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get 99: %v", err)
	}
	if l, err := s2.List(ctx, 4, 2); err != nil || len(l) != 2 || l[0].Number != 3 || l[1].Number != 2 {
		t.Errorf("List before 4: %+v, %v", l, err)
	}
	if _, err := s.db.ExecContext(ctx, "UPDATE policy_versions SET author = 'x' WHERE number = 1"); err == nil || !strings.Contains(err.Error(), "immutable") {
		t.Errorf("a version was changed: %v", err)
	}
	if _, err := s.db.ExecContext(ctx, "DELETE FROM policy_versions WHERE number = 4"); err == nil {
		t.Error("a version was deleted")
	}

	// Credentials and sessions.
	if ok, err := s.CreateCredential(ctx, AdminTokenName, []byte("h1"), t1); !ok || err != nil {
		t.Fatalf("CreateCredential: %v, %v", ok, err)
	}
	if ok, err := s2.CreateCredential(ctx, AdminTokenName, []byte("h2"), t1); ok || err != nil {
		t.Errorf("a second CreateCredential stored: %v, %v", ok, err)
	}
	if ok, err := s.PutCredential(ctx, "telemetry", []byte("t1"), "sluice_tel_ab", t1, false); !ok || err != nil {
		t.Errorf("PutCredential: %v, %v", ok, err)
	}
	if c, err := s2.Credential(ctx, "telemetry"); err != nil || string(c.Hash) != "t1" || c.Hint != "sluice_tel_ab" {
		t.Errorf("Credential: %+v, %v", c, err)
	}
	sess := Session{IDHash: []byte{1, 2, 3}, CSRFToken: "csrf", Author: "ops", Created: t1, Expires: t1.Add(time.Hour)}
	if err := s.CreateSession(ctx, sess); err != nil {
		t.Fatal(err)
	}
	if got, err := s2.Session(ctx, sess.IDHash, t1.Add(time.Minute)); err != nil || got.Author != "ops" || !bytes.Equal(got.IDHash, sess.IDHash) {
		t.Errorf("Session: %+v, %v", got, err)
	}
	if _, err := s2.Session(ctx, sess.IDHash, t1.Add(2*time.Hour)); !errors.Is(err, ErrNotFound) {
		t.Errorf("an expired session: %v", err)
	}
	if err := s.ReplaceCredential(ctx, AdminTokenName, []byte("h3"), t1); err != nil {
		t.Fatal(err)
	}
	if h, err := s2.CredentialHash(ctx, AdminTokenName); err != nil || string(h) != "h3" {
		t.Errorf("replaced credential: %q, %v", h, err)
	}
	if _, err := s2.Session(ctx, sess.IDHash, t1.Add(time.Minute)); !errors.Is(err, ErrNotFound) {
		t.Errorf("a session survived the token's replacement: %v", err)
	}
}

// Replicas saving on the same base at once: exactly one wins, the others
// get a conflict naming its version.
func TestPostgresConcurrentSavesOneWins(t *testing.T) {
	pg := fleettest.StartPostgres(t, fleettest.PostgresOptions{})
	ctx := context.Background()
	replicas := []*Store{openPostgres(t, pg.URL), openPostgres(t, pg.URL)}
	for round := range 5 {
		base := int64(round)
		var wg sync.WaitGroup
		errs := make([]error, 8)
		for i := range errs {
			wg.Go(func() {
				_, errs[i] = replicas[i%2].Append(ctx, base, NewVersion{JSON: cfg(i)})
			})
		}
		wg.Wait()
		won := 0
		for _, err := range errs {
			var ce *ConflictError
			switch {
			case err == nil:
				won++
			case errors.As(err, &ce) && ce.Current == base+1:
			default:
				t.Errorf("round %d: %v", round, err)
			}
		}
		if won != 1 {
			t.Fatalf("round %d: %d saves won, want 1", round, won)
		}
	}
}

// TestPostgresKillMidWrite: the crash test on PostgreSQL: an admin
// process killed with SIGKILL in the middle of saves loses no
// acknowledged version and leaves no lock behind.
func TestPostgresKillMidWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns child processes")
	}
	killMidWrite(t, fleettest.StartPostgres(t, fleettest.PostgresOptions{}).URL)
}

func TestOpenDatabaseErrorsNameTheFlagAndHideThePassword(t *testing.T) {
	ctx := context.Background()
	if _, err := OpenDatabase(ctx, "mysql://u:pw@host/db", t.TempDir()); err == nil || !strings.Contains(err.Error(), "-database") || strings.Contains(err.Error(), "pw@") {
		t.Errorf("a mysql URL: %v", err)
	}
	port := fleettest.FreePort(t)
	url := "postgres://sluice:hunter2secret@127.0.0.1:" + strconv.Itoa(port) + "/db?connect_timeout=2"
	if _, err := OpenDatabase(ctx, url, ""); err == nil || strings.Contains(err.Error(), "hunter2secret") || !strings.Contains(err.Error(), "127.0.0.1") {
		t.Errorf("an unreachable server: %v", err)
	}
	if s, err := OpenDatabase(ctx, "", t.TempDir()); err != nil || s.db.pg {
		t.Errorf("no -database: %v (want SQLite)", err)
	} else {
		s.Close()
	}
}

func TestRebindOutsideQuotes(t *testing.T) {
	got := rebind(true, `SELECT '?' FROM t WHERE a = ? AND b = '??' AND c = ?`)
	if want := `SELECT '?' FROM t WHERE a = $1 AND b = '??' AND c = $2`; got != want {
		t.Errorf("rebind: %s, want %s", got, want)
	}
	if q := "SELECT ?"; rebind(false, q) != q {
		t.Error("SQLite queries must be left alone")
	}
}

// FuzzRebind: every unquoted "?" becomes the next "$n", nothing else
// changes but a space after it before a digit, and SQLite queries are left
// alone.
func FuzzRebind(f *testing.F) {
	for _, q := range []string{"SELECT ?", `INSERT INTO t VALUES (?, '?', ?)`, "'", "??", "$1 ?", ""} {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, q string) {
		if rebind(false, q) != q {
			t.Fatal("a SQLite query was changed")
		}
		got := rebind(true, q)
		// Undo: each "$n" in order back to "?" gives q again.
		var b strings.Builder
		n, quoted := 0, false
		for i := 0; i < len(got); i++ {
			c := got[i]
			if c == '\'' {
				quoted = !quoted
			}
			if c == '$' && !quoted {
				want := "$" + strconv.Itoa(n+1)
				end := i + len(want)
				if strings.HasPrefix(got[i:], want) && (end == len(got) || got[end] < '0' || got[end] > '9') {
					n++
					b.WriteByte('?')
					i = end - 1
					continue
				}
			}
			b.WriteByte(c)
		}
		// (rebind adds a space where a digit follows a "?": "?0" is "$1 0")
		if noSpace := func(s string) string { return strings.ReplaceAll(s, " ", "") }; noSpace(b.String()) != noSpace(q) && !strings.Contains(q, "$") {
			t.Fatalf("rebind(%q) = %q", q, got)
		}
	})
}
