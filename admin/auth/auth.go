// Package auth holds the admin's credentials: the admin token (given on the
// command line or generated at first start and stored only as a hash; it
// acts as the first admin), the accounts with their roles, passwords
// (bcrypt) and API tokens (SHA-256), the browser sessions, and the
// throttling of failed logins and bad bearer tokens.
//
// The token is a bearer secret for the API and the password of the login
// page. A generated token has 256 random bits; a token given with -token
// must be at least MinTokenLen characters. Session IDs and CSRF tokens are
// 256 random bits too; the database keeps only the SHA-256 of a session ID,
// so a copy of the database does not let anyone in.
package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/sluice-rl/sluice/admin/secret"
	"github.com/sluice-rl/sluice/admin/store"
)

// MinTokenLen is the shortest admin token accepted from -token.
const MinTokenLen = secret.MinLen

// SessionTTL is how long a login lasts.
const SessionTTL = 12 * time.Hour

// TokenPrefix starts every generated token, so it is recognizable in
// secret scanners and logs.
const TokenPrefix = "sluice_"

// Errors.
var (
	ErrBadToken  = errors.New("wrong admin token")
	ErrNoSession = errors.New("not logged in or the session expired")
)

// Store is the storage auth needs (admin/store implements it).
type Store interface {
	CredentialHash(ctx context.Context, name string) ([]byte, error)
	CreateCredential(ctx context.Context, name string, hash []byte, now time.Time) (bool, error)
	ReplaceCredential(ctx context.Context, name string, hash []byte, now time.Time) error
	CreateSession(ctx context.Context, s store.Session) error
	Session(ctx context.Context, idHash []byte, now time.Time) (store.Session, error)
	DeleteSession(ctx context.Context, idHash []byte) error
	DeleteExpiredSessions(ctx context.Context, now time.Time) (int64, error)
	AccountStore
}

// Manager checks the admin token and manages sessions. It is safe for
// concurrent use.
type Manager struct {
	st   Store
	hash []byte // SHA-256 of the admin token
	now  func() time.Time
	ttl  time.Duration
	cost int // bcrypt cost of new password hashes

	dummyOnce sync.Once
	dummy     []byte
}

// Setup returns a Manager for the admin token:
//   - token non-empty (from -token or SLUICE_ADMIN_TOKEN): that token, which
//     must be at least MinTokenLen printable characters;
//   - else the token whose hash is stored in the database;
//   - else a new random token, stored hashed and returned as generated so
//     the caller prints it once. It cannot be shown again.
func Setup(ctx context.Context, st Store, token string) (m *Manager, generated string, err error) {
	m = &Manager{st: st, now: time.Now, ttl: SessionTTL, cost: PasswordCost}
	if token != "" {
		if err := CheckTokenStrength(token); err != nil {
			return nil, "", err
		}
		m.hash = hashToken(token)
		return m, "", nil
	}
	h, err := st.CredentialHash(ctx, store.AdminTokenName)
	if err == nil {
		m.hash = h
		return m, "", nil
	}
	if !errors.Is(err, store.ErrNotFound) {
		return nil, "", err
	}
	tok := GenerateToken()
	created, err := st.CreateCredential(ctx, store.AdminTokenName, hashToken(tok), m.now())
	if err != nil {
		return nil, "", err
	}
	if !created { // another admin process stored one first: use it
		if m.hash, err = st.CredentialHash(ctx, store.AdminTokenName); err != nil {
			return nil, "", err
		}
		return m, "", nil
	}
	m.hash = hashToken(tok)
	return m, tok, nil
}

// Rotate replaces the stored admin token with a new random one, ends every
// session and returns the new token (to print once).
func Rotate(ctx context.Context, st Store) (string, error) {
	tok := GenerateToken()
	if err := st.ReplaceCredential(ctx, store.AdminTokenName, hashToken(tok), time.Now()); err != nil {
		return "", err
	}
	return tok, nil
}

// CheckTokenStrength refuses admin tokens too short or unprintable to be secrets.
func CheckTokenStrength(token string) error { return CheckSecretStrength("admin token", token) }

// CheckSecretStrength refuses a secret (named what in the error, e.g.
// "telemetry token") shorter than MinTokenLen or with spaces or control
// characters. Every token the admin accepts from a flag goes through it.
func CheckSecretStrength(what, token string) error { return secret.CheckStrength(what, token) }

// GenerateToken returns a new random token: TokenPrefix and 43 base64url
// characters (256 bits).
func GenerateToken() string { return TokenPrefix + RandomToken() }

// RandomToken returns 256 random bits as 43 base64url characters: session
// ids, CSRF tokens, and the random part of every generated token.
func RandomToken() string { return secret.Random() }

func hashToken(s string) []byte {
	h := sha256.Sum256([]byte(s))
	return h[:]
}

// SetClock replaces the clock (tests).
func (m *Manager) SetClock(now func() time.Time) { m.now = now }

// CheckToken reports whether token is the admin token, in constant time.
func (m *Manager) CheckToken(token string) bool {
	if token == "" {
		return false
	}
	return subtle.ConstantTimeCompare(hashToken(token), m.hash) == 1
}

// Session is a logged-in browser.
type Session struct {
	Author string
	CSRF   string // the synchronizer token every form of this session carries
	User   string // the account; "" for a login with the admin token
	Role   Role
	// Policies are the policies the account may change (the text of a
	// policies.Scope); "" for every policy.
	Policies string
}

// Principal returns who acts through the session.
func (s Session) Principal() Principal {
	if s.User == "" {
		return Principal{Name: s.Author, Role: RoleAdmin, AdminToken: true}
	}
	return Principal{Name: s.User, Role: s.Role, Policies: s.Policies}
}

// Login checks the token and opens a session for author. It returns the
// session ID to set as a cookie.
func (m *Manager) Login(ctx context.Context, token, author string) (string, Session, error) {
	if !m.CheckToken(token) {
		return "", Session{}, ErrBadToken
	}
	author = strings.TrimSpace(author)
	if author == "" {
		author = "admin"
	}
	return m.openSession(ctx, author, "", RoleAdmin)
}

func (m *Manager) openSession(ctx context.Context, author, user string, role Role) (string, Session, error) {
	id := RandomToken()
	now := m.now()
	sess := store.Session{IDHash: hashToken(id), CSRFToken: RandomToken(), Author: author, User: user, Created: now, Expires: now.Add(m.ttl)}
	if err := m.st.CreateSession(ctx, sess); err != nil {
		return "", Session{}, err
	}
	// Opportunistic cleanup; a failure here does not matter.
	m.st.DeleteExpiredSessions(ctx, now)
	return id, Session{Author: author, CSRF: sess.CSRFToken, User: user, Role: role}, nil
}

// Session returns the session with the given ID, or ErrNoSession.
func (m *Manager) Session(ctx context.Context, id string) (Session, error) {
	if id == "" || len(id) > 128 {
		return Session{}, ErrNoSession
	}
	s, err := m.st.Session(ctx, hashToken(id), m.now())
	if errors.Is(err, store.ErrNotFound) {
		return Session{}, ErrNoSession
	}
	if err != nil {
		return Session{}, err
	}
	sess := Session{Author: s.Author, CSRF: s.CSRFToken, User: s.User, Role: RoleAdmin, Policies: s.Policies}
	if s.User != "" {
		if sess.Role, err = ParseRole(s.Role); err != nil {
			return Session{}, err
		}
	}
	return sess, nil
}

// Logout ends a session.
func (m *Manager) Logout(ctx context.Context, id string) error {
	if id == "" {
		return nil
	}
	return m.st.DeleteSession(ctx, hashToken(id))
}

// Equal compares two secrets in constant time (for CSRF tokens). Empty
// never matches.
func Equal(a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}
