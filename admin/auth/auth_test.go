package auth

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/admin/store"
)

func openStore(t *testing.T) *store.Store { return openStoreB(t) }

func openStoreB(t testing.TB) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func TestGeneratedTokenIsStoredHashedAndShownOnce(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	m, tok, err := Setup(ctx, st, "")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tok, TokenPrefix) || len(tok) != len(TokenPrefix)+43 {
		t.Fatalf("generated token %q", tok)
	}
	if !m.CheckToken(tok) || m.CheckToken(tok+"x") || m.CheckToken("") {
		t.Error("CheckToken")
	}
	h, err := st.CredentialHash(ctx, store.AdminTokenName)
	if err != nil || strings.Contains(string(h), tok) || len(h) != 32 {
		t.Errorf("stored %q, %v: must be the hash only", h, err)
	}
	m2, tok2, err := Setup(ctx, st, "")
	if err != nil || tok2 != "" {
		t.Fatalf("second start generated %q (%v); the token is printed only once", tok2, err)
	}
	if !m2.CheckToken(tok) {
		t.Error("the stored token does not work after a restart")
	}
	// -token overrides the stored token.
	m3, _, err := Setup(ctx, st, "a-very-long-flag-token")
	if err != nil || !m3.CheckToken("a-very-long-flag-token") || m3.CheckToken(tok) {
		t.Errorf("flag token: %v", err)
	}
}

func TestFlagTokenStrength(t *testing.T) {
	st := openStore(t)
	for _, bad := range []string{"short", "fifteen-chars15", "has a space in it!!", "tab\tinside-the-token"} {
		if _, _, err := Setup(context.Background(), st, bad); err == nil {
			t.Errorf("token %q accepted", bad)
		}
	}
	if _, err := st.CredentialHash(context.Background(), store.AdminTokenName); !errors.Is(err, store.ErrNotFound) {
		t.Error("a refused flag token led to a stored credential")
	}
}

func TestSessions(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	m, tok, err := Setup(ctx, st, "")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	m.SetClock(func() time.Time { return now })
	if _, _, err := m.Login(ctx, "wrong", "x"); !errors.Is(err, ErrBadToken) {
		t.Errorf("bad token login: %v", err)
	}
	id, sess, err := m.Login(ctx, tok, "  alice ")
	if err != nil {
		t.Fatal(err)
	}
	if sess.Author != "alice" || len(sess.CSRF) != 43 || len(id) != 43 || id == sess.CSRF {
		t.Errorf("session %+v id %q", sess, id)
	}
	got, err := m.Session(ctx, id)
	if err != nil || got != sess {
		t.Errorf("Session = %+v, %v", got, err)
	}
	for _, bad := range []string{"", "nope", strings.Repeat("x", 500), id[:42]} {
		if _, err := m.Session(ctx, bad); !errors.Is(err, ErrNoSession) {
			t.Errorf("Session(%q) = %v", bad, err)
		}
	}
	now = now.Add(SessionTTL + time.Second)
	if _, err := m.Session(ctx, id); !errors.Is(err, ErrNoSession) {
		t.Errorf("expired session: %v", err)
	}
	id2, _, _ := m.Login(ctx, tok, "")
	if s, _ := m.Session(ctx, id2); s.Author != "admin" {
		t.Errorf("default author %q", s.Author)
	}
	if err := m.Logout(ctx, id2); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Session(ctx, id2); !errors.Is(err, ErrNoSession) {
		t.Errorf("after logout: %v", err)
	}
}

func TestRotate(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	m, old, _ := Setup(ctx, st, "")
	id, _, _ := m.Login(ctx, old, "a")
	tok, err := Rotate(ctx, st)
	if err != nil || tok == old {
		t.Fatal(tok, err)
	}
	m2, gen, err := Setup(ctx, st, "")
	if err != nil || gen != "" || !m2.CheckToken(tok) || m2.CheckToken(old) {
		t.Errorf("after rotation: %v %q", err, gen)
	}
	if _, err := m2.Session(ctx, id); !errors.Is(err, ErrNoSession) {
		t.Errorf("a session survived the rotation: %v", err)
	}
}

func TestEqual(t *testing.T) {
	if !Equal("abc", "abc") || Equal("abc", "abd") || Equal("", "") || Equal("a", "") {
		t.Error("Equal")
	}
	if a, b := RandomToken(), RandomToken(); a == b {
		t.Error("RandomToken repeats")
	}
}
