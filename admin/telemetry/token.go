package telemetry

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluice-rl/sluice/admin/secret"
	"github.com/sluice-rl/sluice/admin/store"
)

// The telemetry token is the bearer secret the plugins send with their
// reports. It is not the admin token: it only lets its holder post
// reports, and it sits in every Envoy's plugin configuration.
const (
	TokenPrefix    = "sluice_tel_" // starts every generated telemetry token
	MinTokenLen    = secret.MinLen // shortest token accepted from -telemetry-token
	DefaultGrace   = 10 * time.Minute
	MaxGrace       = 24 * time.Hour
	tokenHintChars = 4
)

// ErrFixedToken is returned by Rotate when the token comes from the
// command line (-telemetry-token): it is changed there.
var ErrFixedToken = errors.New("the telemetry token is set with -telemetry-token (or SLUICE_TELEMETRY_TOKEN); change it there and restart the admin")

// TokenStore keeps the token's hash (admin/store implements it).
type TokenStore interface {
	Credential(ctx context.Context, name string) (store.Credential, error)
	PutCredential(ctx context.Context, name string, hash []byte, hint string, now time.Time, replace bool) (bool, error)
}

// Tokens checks and rotates the telemetry token. Safe for concurrent use.
type Tokens struct {
	st    TokenStore
	fixed bool
	now   func() time.Time

	mu        sync.RWMutex
	cur       [32]byte // SHA-256 of the token
	prev      [32]byte // of the previous token, accepted until prevUntil
	prevUntil time.Time
	hint      string
	created   time.Time
}

// TokenInfo describes the token in force, without revealing it.
type TokenInfo struct {
	Hint               string    `json:"hint"` // its first characters, then "…"
	Created            time.Time `json:"created"`
	FromFlag           bool      `json:"from_flag"`                     // set with -telemetry-token
	PreviousValidUntil time.Time `json:"previous_valid_until,omitzero"` // after a rotation with grace
}

// SetupTokens returns the token checker:
//   - token non-empty (-telemetry-token): that token, at least MinTokenLen
//     printable characters; nothing is stored, and it cannot be rotated;
//   - else the token whose hash is stored;
//   - else a new random token, stored hashed and returned as generated so
//     the caller prints it once.
func SetupTokens(ctx context.Context, st TokenStore, token string) (t *Tokens, generated string, err error) {
	t = &Tokens{st: st, now: time.Now}
	if token != "" {
		if err := CheckTokenStrength(token); err != nil {
			return nil, "", err
		}
		t.fixed = true
		t.cur = sha256.Sum256([]byte(token))
		t.hint = hint(token)
		t.created = t.now()
		return t, "", nil
	}
	c, err := st.Credential(ctx, store.TelemetryTokenName)
	if err == nil && len(c.Hash) == sha256.Size {
		t.cur = [32]byte(c.Hash)
		t.hint, t.created = c.Hint, c.Created
		return t, "", nil
	}
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, "", err
	}
	tok := GenerateToken()
	h := sha256.Sum256([]byte(tok))
	now := t.now()
	stored, err := st.PutCredential(ctx, store.TelemetryTokenName, h[:], hint(tok), now, err == nil /* a malformed row: replace it */)
	if err != nil {
		return nil, "", err
	}
	if !stored { // another admin process stored one first: use it
		if c, err = st.Credential(ctx, store.TelemetryTokenName); err != nil {
			return nil, "", err
		}
		if len(c.Hash) != sha256.Size {
			return nil, "", fmt.Errorf("the stored telemetry token hash is %d bytes, not %d", len(c.Hash), sha256.Size)
		}
		t.cur = [32]byte(c.Hash)
		t.hint, t.created = c.Hint, c.Created
		return t, "", nil
	}
	t.cur, t.hint, t.created = h, hint(tok), now
	return t, tok, nil
}

// CheckTokenStrength refuses telemetry tokens too short or unprintable to
// be secrets (the same rules as the admin token).
func CheckTokenStrength(token string) error {
	return secret.CheckStrength("telemetry token", token)
}

// GenerateToken returns a new random token: TokenPrefix and 43 base64url
// characters (256 bits).
func GenerateToken() string { return TokenPrefix + secret.Random() }

// hint is the prefix and the first characters of the secret part.
func hint(tok string) string {
	n := tokenHintChars
	if len(tok) > len(TokenPrefix) && tok[:len(TokenPrefix)] == TokenPrefix {
		n += len(TokenPrefix)
	}
	if len(tok) <= n {
		return "…"
	}
	return tok[:n] + "…"
}

// SetClock replaces the clock (tests).
func (t *Tokens) SetClock(now func() time.Time) { t.now = now }

// Check reports whether token is the telemetry token (or the previous one
// within its grace period), in constant time.
func (t *Tokens) Check(token string) bool {
	if token == "" {
		return false
	}
	h := sha256.Sum256([]byte(token))
	t.mu.RLock()
	defer t.mu.RUnlock()
	ok := subtle.ConstantTimeCompare(h[:], t.cur[:]) == 1
	if !ok && !t.prevUntil.IsZero() && t.now().Before(t.prevUntil) {
		ok = subtle.ConstantTimeCompare(h[:], t.prev[:]) == 1
	}
	return ok
}

// Rotate replaces the token with a new random one, stores its hash and
// returns it (to show once). The previous token stays valid for grace
// (0: not at all, at most MaxGrace), the time to push the new one to every
// Envoy; the grace period does not survive a restart of the admin.
func (t *Tokens) Rotate(ctx context.Context, grace time.Duration) (string, error) {
	if t.fixed {
		return "", ErrFixedToken
	}
	if grace < 0 || grace > MaxGrace {
		return "", fmt.Errorf("grace %s is out of range: 0 to %s", grace, MaxGrace)
	}
	tok := GenerateToken()
	h := sha256.Sum256([]byte(tok))
	now := t.now()
	if _, err := t.st.PutCredential(ctx, store.TelemetryTokenName, h[:], hint(tok), now, true); err != nil {
		return "", err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.prev, t.prevUntil = t.cur, time.Time{}
	if grace > 0 {
		t.prevUntil = now.Add(grace)
	}
	t.cur, t.hint, t.created = h, hint(tok), now
	return tok, nil
}

// Info describes the token in force.
func (t *Tokens) Info() TokenInfo {
	t.mu.RLock()
	defer t.mu.RUnlock()
	info := TokenInfo{Hint: t.hint, Created: t.created, FromFlag: t.fixed}
	if t.now().Before(t.prevUntil) {
		info.PreviousValidUntil = t.prevUntil
	}
	return info
}
