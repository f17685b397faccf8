package store

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/admin/fleet/fleettest"
)

// onBothDatabases runs check on a fresh SQLite store and on a fresh
// PostgreSQL one: the two backends behave the same.
func onBothDatabases(t *testing.T, check func(*testing.T, *Store)) {
	t.Run("sqlite", func(t *testing.T) {
		s, _ := openTemp(t)
		check(t, s)
	})
	t.Run("postgres", func(t *testing.T) {
		pg := fleettest.StartPostgres(t, fleettest.PostgresOptions{})
		check(t, openPostgres(t, pg.URL))
	})
}

func TestUsersTokensAndSessionsFollowTheAccount(t *testing.T) {
	onBothDatabases(t, usersTokensAndSessionsFollowTheAccount)
}

func usersTokensAndSessionsFollowTheAccount(t *testing.T, s *Store) {
	ctx := context.Background()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	if err := s.CreateUser(ctx, User{Name: "ann", Role: "editor", PasswordHash: "h1", Created: now}); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateUser(ctx, User{Name: "ann", Role: "viewer", PasswordHash: "h2", Created: now}); !errors.Is(err, ErrExists) {
		t.Errorf("second ann: %v, want ErrExists", err)
	}
	if err := s.CreateUser(ctx, User{Name: "bob", Role: "root", PasswordHash: "h", Created: now}); err == nil {
		t.Error("a user with an unknown role was stored")
	}
	sess := Session{IDHash: []byte("s1"), CSRFToken: "c", Author: "ann", User: "ann", Created: now, Expires: now.Add(time.Hour)}
	if err := s.CreateSession(ctx, sess); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Session(ctx, []byte("s1"), now); err != nil || got.User != "ann" || got.Role != "editor" {
		t.Fatalf("Session = %+v, %v", got, err)
	}
	// A role change applies to the open session at once.
	if err := s.UpdateUser(ctx, "ann", "viewer", ""); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Session(ctx, []byte("s1"), now); got.Role != "viewer" {
		t.Errorf("after the role change the session's role is %q", got.Role)
	}
	// So does a change of the policies the account may change.
	if err := s.SetUserPolicies(ctx, "ann", "payments-*,search"); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Session(ctx, []byte("s1"), now); got.Policies != "payments-*,search" {
		t.Errorf("after setting policies the session's are %q", got.Policies)
	}
	if err := s.SetUserPolicies(ctx, "nobody", "x"); !errors.Is(err, ErrNotFound) {
		t.Errorf("SetUserPolicies(nobody) = %v", err)
	}
	// A role and a scope change together, in one write.
	search := "search"
	if err := s.UpdateAccount(ctx, "ann", AccountChange{Role: "editor", Policies: &search}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Session(ctx, []byte("s1"), now); got.Role != "editor" || got.Policies != "search" {
		t.Errorf("after UpdateAccount the session has %q of %q", got.Role, got.Policies)
	}
	if err := s.UpdateAccount(ctx, "nobody", AccountChange{Policies: &search}); !errors.Is(err, ErrNotFound) {
		t.Errorf("UpdateAccount(nobody) = %v", err)
	}
	back := "payments-*,search"
	s.UpdateAccount(ctx, "ann", AccountChange{Role: "viewer", Policies: &back})
	// A password change ends the sessions.
	if err := s.UpdateUser(ctx, "ann", "viewer", "h3"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Session(ctx, []byte("s1"), now); !errors.Is(err, ErrNotFound) {
		t.Errorf("a session survived the password change: %v", err)
	}
	if u, _ := s.User(ctx, "ann"); u.PasswordHash != "h3" || u.Role != "viewer" || u.Policies != "payments-*,search" {
		t.Errorf("User = %+v", u)
	}
	if err := s.UpdateUser(ctx, "nobody", "viewer", ""); !errors.Is(err, ErrNotFound) {
		t.Errorf("UpdateUser(nobody) = %v", err)
	}

	tok := APIToken{ID: "t1", User: "ann", Label: "ci", Hash: "abc", Hint: "sluice_ab", Created: now}
	if err := s.CreateAPIToken(ctx, tok); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateAPIToken(ctx, APIToken{ID: "t2", User: "ghost", Hash: "def", Created: now}); !errors.Is(err, ErrNotFound) {
		t.Errorf("token for a missing user: %v", err)
	}
	got, err := s.APITokenByHash(ctx, "abc")
	if err != nil || got.ID != "t1" || got.Role != "viewer" || got.Policies != "payments-*,search" || !got.LastUsed.IsZero() {
		t.Fatalf("APITokenByHash = %+v, %v", got, err)
	}
	if err := s.TouchAPIToken(ctx, "t1", now.Add(time.Minute), time.Minute); err != nil {
		t.Fatal(err)
	}
	s.TouchAPIToken(ctx, "t1", now.Add(90*time.Second), time.Minute) // within a minute: not written
	if got, _ := s.APITokenByHash(ctx, "abc"); !got.LastUsed.Equal(now.Add(time.Minute)) {
		t.Errorf("LastUsed = %v", got.LastUsed)
	}
	if r, err := s.RevokeAPIToken(ctx, "t1", now); err != nil || !r.Revoked.Equal(now) {
		t.Errorf("RevokeAPIToken = %+v, %v", r, err)
	}
	if _, err := s.APITokenByHash(ctx, "abc"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a revoked token is still found: %v", err)
	}
	if _, err := s.RevokeAPIToken(ctx, "t1", now); !errors.Is(err, ErrNotFound) {
		t.Errorf("revoking twice: %v", err)
	}
	if ts, _ := s.APITokens(ctx); len(ts) != 1 || ts[0].Revoked.IsZero() {
		t.Errorf("APITokens = %+v", ts)
	}

	s.CreateSession(ctx, Session{IDHash: []byte("s2"), CSRFToken: "c", Author: "ann", User: "ann", Created: now, Expires: now.Add(time.Hour)})
	if err := s.DeleteUser(ctx, "ann"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Session(ctx, []byte("s2"), now); !errors.Is(err, ErrNotFound) {
		t.Errorf("a deleted user's session survived: %v", err)
	}
	if ts, _ := s.APITokens(ctx); len(ts) != 0 {
		t.Errorf("a deleted user's tokens survived: %+v", ts)
	}
	if err := s.DeleteUser(ctx, "ann"); !errors.Is(err, ErrNotFound) {
		t.Errorf("deleting twice: %v", err)
	}
}

func TestAuditLogFiltersAndIsAppendOnly(t *testing.T) {
	onBothDatabases(t, auditLogFiltersAndIsAppendOnly)
}

func auditLogFiltersAndIsAppendOnly(t *testing.T, s *Store) {
	ctx := context.Background()
	now := time.Now().UTC()
	old := now.Add(-400 * 24 * time.Hour)
	entries := []AuditEntry{
		{At: old, Actor: "ann", Action: "login", Remote: "10.0.0.1"},
		{At: now.Add(-time.Hour), Actor: "ann", Action: "policy.save", Remote: "10.0.0.1", Version: 2, FromVersion: 1},
		{At: now, Actor: "bob", Action: "policy.rollback", Remote: "10.0.0.2", Version: 3, FromVersion: 1},
		{At: now, Actor: "bob", Action: "login.failed", Remote: "10.0.0.2", Target: "bob"},
	}
	for _, e := range entries {
		if err := s.AppendAudit(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	actions := func(f AuditFilter) string {
		es, err := s.ListAudit(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range es {
			out = append(out, e.Action)
		}
		return strings.Join(out, ",")
	}
	for _, c := range []struct {
		f    AuditFilter
		want string
	}{
		{AuditFilter{}, "login.failed,policy.rollback,policy.save,login"},
		{AuditFilter{Actor: "ann"}, "policy.save,login"},
		{AuditFilter{Action: "policy."}, "policy.rollback,policy.save"},
		{AuditFilter{Action: "login"}, "login"},
		{AuditFilter{Remote: "10.0.0.2"}, "login.failed,policy.rollback"},
		{AuditFilter{Since: now.Add(-2 * time.Hour), Until: now}, "policy.save"},
		{AuditFilter{Limit: 1}, "login.failed"},
		{AuditFilter{Before: 3}, "policy.save,login"},
	} {
		if got := actions(c.f); got != c.want {
			t.Errorf("ListAudit(%+v) = %s, want %s", c.f, got, c.want)
		}
	}
	if es, _ := s.ListAudit(ctx, AuditFilter{Action: "policy.save"}); len(es) != 1 || es[0].Version != 2 || es[0].FromVersion != 1 || !es[0].At.Equal(now.Add(-time.Hour)) {
		t.Errorf("entry = %+v", es)
	}
	// The database itself refuses changes and early deletions.
	if _, err := s.db.ExecContext(ctx, "UPDATE audit_log SET actor = 'mallory'"); err == nil || !strings.Contains(err.Error(), "append-only") {
		t.Errorf("UPDATE: %v", err)
	}
	if _, err := s.db.ExecContext(ctx, "DELETE FROM audit_log WHERE actor = 'bob'"); err == nil || !strings.Contains(err.Error(), "younger than a day") {
		t.Errorf("DELETE of a recent entry: %v", err)
	}
	// Retention removes what is older than the cutoff, and never a recent entry.
	if n, err := s.PruneAudit(ctx, now.Add(-365*24*time.Hour)); err != nil || n != 1 {
		t.Errorf("PruneAudit(365 days) = %d, %v; want 1", n, err)
	}
	if n, err := s.PruneAudit(ctx, now.Add(time.Hour)); err != nil || n != 0 {
		t.Errorf("PruneAudit(the future) = %d, %v; want 0 (nothing older than a day)", n, err)
	}
	if got := actions(AuditFilter{}); got != "login.failed,policy.rollback,policy.save" {
		t.Errorf("after pruning: %s", got)
	}
}
