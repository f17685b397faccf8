package auth

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
)

func newManager(t *testing.T) (*Manager, *sql.DB, *time.Time) {
	t.Helper()
	st := openStore(t)
	m, _, err := Setup(context.Background(), st, "the-bootstrap-admin-token")
	if err != nil {
		t.Fatal(err)
	}
	m.SetPasswordCost(bcrypt.MinCost)
	now := time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)
	m.SetClock(func() time.Time { return now })
	raw, err := sql.Open("sqlite", st.Path())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	return m, raw, &now
}

func TestRolesIncludeTheLowerOnes(t *testing.T) {
	for _, c := range []struct {
		have, need Role
		ok         bool
	}{
		{RoleViewer, RoleViewer, true}, {RoleViewer, RoleEditor, false}, {RoleEditor, RoleEditor, true},
		{RoleEditor, RoleAdmin, false}, {RoleAdmin, RoleEditor, true}, {Role("root"), RoleViewer, false},
	} {
		if got := c.have.Allows(c.need); got != c.ok {
			t.Errorf("%s.Allows(%s) = %v", c.have, c.need, got)
		}
	}
	if _, err := ParseRole("superuser"); err == nil || !strings.Contains(err.Error(), "role:") {
		t.Errorf("ParseRole(superuser) = %v", err)
	}
}

func TestPasswordsAreHashedAndChecked(t *testing.T) {
	ctx := context.Background()
	m, raw, _ := newManager(t)
	if err := m.CreateUser(ctx, "ann", RoleEditor, "correct horse battery"); err != nil {
		t.Fatal(err)
	}
	var stored string
	if err := raw.QueryRow("SELECT password_hash FROM users WHERE name = 'ann'").Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stored, "horse") || !strings.HasPrefix(stored, "$2") {
		t.Errorf("stored password %q is not a bcrypt hash", stored)
	}
	for _, c := range []struct{ name, pw, field string }{
		{"bad name!", "correct horse battery", "name"},
		{"", "correct horse battery", "name"},
		{"bob", "short", "password"},
		{"bob", strings.Repeat("x", 73), "password"},
		{"ann", "correct horse battery", "name"}, // exists
	} {
		var fe *FieldError
		if err := m.CreateUser(ctx, c.name, RoleViewer, c.pw); !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("CreateUser(%q, %q) = %v, want an error on %s", c.name, c.pw, err, c.field)
		}
	}
	if p, err := m.CheckPassword(ctx, "ann", "correct horse battery"); err != nil || p.Name != "ann" || p.Role != RoleEditor {
		t.Errorf("CheckPassword = %+v, %v", p, err)
	}
	for _, c := range [][2]string{{"ann", "wrong horse battery"}, {"nobody", "correct horse battery"}} {
		if _, err := m.CheckPassword(ctx, c[0], c[1]); !errors.Is(err, ErrBadCredentials) {
			t.Errorf("CheckPassword(%q, %q) = %v", c[0], c[1], err)
		}
	}
	id, sess, err := m.LoginPassword(ctx, "ann", "correct horse battery")
	if err != nil || sess.User != "ann" || sess.Role != RoleEditor {
		t.Fatalf("LoginPassword = %+v, %v", sess, err)
	}
	if err := m.UpdateUser(ctx, "ann", RoleViewer, ""); err != nil {
		t.Fatal(err)
	}
	if got, err := m.Session(ctx, id); err != nil || got.Role != RoleViewer || got.Principal().Name != "ann" {
		t.Errorf("after demotion: %+v, %v", got, err)
	}
	if err := m.UpdateUser(ctx, "ann", RoleViewer, "another long password"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Session(ctx, id); !errors.Is(err, ErrNoSession) {
		t.Errorf("the session survived a password change: %v", err)
	}
	if _, err := m.CheckPassword(ctx, "ann", "another long password"); err != nil {
		t.Errorf("new password: %v", err)
	}
}

func TestAPITokensShownOnceStoredHashedRevocable(t *testing.T) {
	ctx := context.Background()
	m, raw, now := newManager(t)
	if err := m.CreateUser(ctx, "ci", RoleViewer, "a long enough password"); err != nil {
		t.Fatal(err)
	}
	tok, rec, err := m.CreateToken(ctx, "ci", "deploy pipeline")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tok, TokenPrefix) || rec.Hint != tok[:TokenHintLen] {
		t.Errorf("token %q, hint %q", tok, rec.Hint)
	}
	// The database holds the SHA-256 only.
	var dump strings.Builder
	rows, err := raw.Query("SELECT id, user_name, label, hash, hint, created_at FROM api_tokens")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var a, b, c, d, e, f string
		rows.Scan(&a, &b, &c, &d, &e, &f)
		dump.WriteString(a + b + c + d + e + f)
		if d != tokenHashHex(tok) {
			t.Errorf("stored hash %q is not the token's SHA-256", d)
		}
	}
	rows.Close()
	if strings.Contains(dump.String(), tok[TokenHintLen:]) {
		t.Error("the database holds the token's secret part")
	}
	// No listing shows it again.
	ts, _ := m.Tokens(ctx)
	if len(ts) != 1 || ts[0].Hint != rec.Hint || !ts[0].LastUsed.IsZero() {
		t.Fatalf("Tokens = %+v", ts)
	}

	p, err := m.Authenticate(ctx, tok)
	if err != nil || p.Name != "ci" || p.Role != RoleViewer || p.TokenID != rec.ID || p.AdminToken {
		t.Fatalf("Authenticate = %+v, %v", p, err)
	}
	if ts, _ := m.Tokens(ctx); !ts[0].LastUsed.Equal(*now) {
		t.Errorf("last use = %v, want %v", ts[0].LastUsed, *now)
	}
	*now = now.Add(time.Hour)
	m.Authenticate(ctx, tok)
	if ts, _ := m.Tokens(ctx); !ts[0].LastUsed.Equal(*now) {
		t.Errorf("last use after an hour = %v, want %v", ts[0].LastUsed, *now)
	}
	if p, err := m.Authenticate(ctx, "the-bootstrap-admin-token"); err != nil || !p.AdminToken || p.Role != RoleAdmin {
		t.Errorf("the admin token: %+v, %v", p, err)
	}
	if _, err := m.RevokeToken(ctx, rec.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Authenticate(ctx, tok); !errors.Is(err, ErrBadToken) {
		t.Errorf("a revoked token still authenticates: %v", err)
	}
	if _, _, err := m.CreateToken(ctx, "ghost", "x"); err == nil {
		t.Error("a token for a missing user")
	}
	if _, _, err := m.CreateToken(ctx, "ci", "bad\x00label"); err == nil {
		t.Error("a label with a control character")
	}
}
