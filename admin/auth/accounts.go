package auth

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/crypto/bcrypt"

	"github.com/sluice-rl/sluice/admin/store"
)

// Role is what an account may do. Each role includes the ones before it.
type Role string

// The roles.
const (
	RoleViewer Role = "viewer" // reads everything, changes nothing
	RoleEditor Role = "editor" // also saves, rolls back, starts trials
	RoleAdmin  Role = "admin"  // also manages users, tokens and settings
)

// Roles lists the roles from least to most.
var Roles = []Role{RoleViewer, RoleEditor, RoleAdmin}

func (r Role) rank() int {
	for i, x := range Roles {
		if x == r {
			return i + 1
		}
	}
	return 0
}

// Allows reports whether r includes need.
func (r Role) Allows(need Role) bool { return r.rank() > 0 && r.rank() >= need.rank() }

// ParseRole returns the role named s.
func ParseRole(s string) (Role, error) {
	if r := Role(s); r.rank() > 0 {
		return r, nil
	}
	return "", &FieldError{Field: "role", Message: fmt.Sprintf("%q is not a role; use viewer, editor or admin", s)}
}

// Principal is who makes a request.
type Principal struct {
	Name       string // the user, or the author named at login with the admin token
	Role       Role
	AdminToken bool   // authenticated with the admin token (the bootstrap admin)
	TokenID    string // the API token used, if any
	// Policies are the policies the account may change (the text of a
	// policies.Scope, read with the account on every request); "" for
	// every policy and the top-level settings.
	Policies string
}

// FieldError is a refused input, naming the field.
type FieldError struct {
	Field   string
	Message string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

// Password and name limits.
const (
	MinPasswordLen = 12
	MaxPasswordLen = 72 // bcrypt's limit
	MaxUserNameLen = 64
	MaxLabelLen    = 100
)

// PasswordCost is the bcrypt cost of new password hashes.
const PasswordCost = 12

// ErrBadCredentials is a failed login: unknown user or wrong password (the
// two are not told apart).
var ErrBadCredentials = errors.New("wrong user name or password")

// AccountStore is the storage of accounts (admin/store implements it).
type AccountStore interface {
	CreateUser(ctx context.Context, u store.User) error
	User(ctx context.Context, name string) (store.User, error)
	Users(ctx context.Context) ([]store.User, error)
	UpdateAccount(ctx context.Context, name string, c store.AccountChange) error
	DeleteUser(ctx context.Context, name string) error
	CreateAPIToken(ctx context.Context, t store.APIToken) error
	APITokenByHash(ctx context.Context, hash string) (store.APIToken, error)
	APITokens(ctx context.Context) ([]store.APIToken, error)
	TouchAPIToken(ctx context.Context, id string, now time.Time, every time.Duration) error
	RevokeAPIToken(ctx context.Context, id string, now time.Time) (store.APIToken, error)
}

// SetPasswordCost sets the bcrypt cost of new hashes (tests use bcrypt.MinCost).
func (m *Manager) SetPasswordCost(cost int) { m.cost = cost }

// CheckUserName refuses names that are empty, too long, or not made of
// letters, digits and . _ @ -.
func CheckUserName(name string) error {
	if name == "" || utf8.RuneCountInString(name) > MaxUserNameLen {
		return &FieldError{Field: "name", Message: fmt.Sprintf("must be 1 to %d characters", MaxUserNameLen)}
	}
	for _, r := range name {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) && !strings.ContainsRune("._@-", r) {
			return &FieldError{Field: "name", Message: fmt.Sprintf("%q has the character %q; use letters, digits and . _ @ -", name, r)}
		}
	}
	return nil
}

// CheckPassword refuses passwords too short or too long for bcrypt.
func CheckPassword(pw string) error {
	if len(pw) < MinPasswordLen || len(pw) > MaxPasswordLen {
		return &FieldError{Field: "password", Message: fmt.Sprintf("must be %d to %d bytes long (got %d)", MinPasswordLen, MaxPasswordLen, len(pw))}
	}
	return nil
}

func (m *Manager) hashPassword(pw string) (string, error) {
	if err := CheckPassword(pw); err != nil {
		return "", err
	}
	h, err := bcrypt.GenerateFromPassword([]byte(pw), m.cost)
	if err != nil {
		return "", fmt.Errorf("hashing the password: %w", err)
	}
	return string(h), nil
}

// CreateUser adds an account that may change every policy.
func (m *Manager) CreateUser(ctx context.Context, name string, role Role, password string) error {
	return m.CreateScopedUser(ctx, name, role, password, "")
}

// CreateScopedUser adds an account that may change only policies (the
// text of a policies.Scope, checked by the caller; "" for every policy),
// in one write: the account never exists without its scope.
func (m *Manager) CreateScopedUser(ctx context.Context, name string, role Role, password, policies string) error {
	if err := CheckUserName(name); err != nil {
		return err
	}
	if _, err := ParseRole(string(role)); err != nil {
		return err
	}
	h, err := m.hashPassword(password)
	if err != nil {
		return err
	}
	if err := m.st.CreateUser(ctx, store.User{Name: name, Role: string(role), PasswordHash: h, Created: m.now(), Policies: policies}); errors.Is(err, store.ErrExists) {
		return &FieldError{Field: "name", Message: fmt.Sprintf("a user named %q exists already", name)}
	} else if err != nil {
		return err
	}
	return nil
}

// UpdateAccount changes, in one write, an account's role (unless role is
// "" and only policies change), password (if not "": it ends the account's
// sessions) and policies (if not nil: the text of a policies.Scope,
// checked by the caller; "" for every policy). A change applies to open
// sessions and tokens at once.
func (m *Manager) UpdateAccount(ctx context.Context, name string, role Role, password string, policies *string) error {
	if role != "" || password != "" || policies == nil {
		if _, err := ParseRole(string(role)); err != nil {
			return err
		}
	}
	var h string
	if password != "" {
		var err error
		if h, err = m.hashPassword(password); err != nil {
			return err
		}
	}
	return m.st.UpdateAccount(ctx, name, store.AccountChange{Role: string(role), PasswordHash: h, Policies: policies})
}

// UpdateUser sets a user's role and, if password is not empty, the
// password (which ends the user's sessions).
func (m *Manager) UpdateUser(ctx context.Context, name string, role Role, password string) error {
	return m.UpdateAccount(ctx, name, role, password, nil)
}

// SetUserPolicies sets the policies an account may change (UpdateAccount).
func (m *Manager) SetUserPolicies(ctx context.Context, name, policies string) error {
	return m.UpdateAccount(ctx, name, "", "", &policies)
}

// DeleteUser removes an account, its tokens and its sessions.
func (m *Manager) DeleteUser(ctx context.Context, name string) error {
	return m.st.DeleteUser(ctx, name)
}

// Users lists the accounts.
func (m *Manager) Users(ctx context.Context) ([]store.User, error) { return m.st.Users(ctx) }

// dummyHash is compared against when the user does not exist, so a login
// for an unknown name costs as much as one with a wrong password.
func (m *Manager) dummyHash() []byte {
	m.dummyOnce.Do(func() {
		m.dummy, _ = bcrypt.GenerateFromPassword([]byte("no such user, no such password"), m.cost)
	})
	return m.dummy
}

// CheckPassword checks a user's password and returns the account's
// principal, or ErrBadCredentials.
func (m *Manager) CheckPassword(ctx context.Context, user, password string) (Principal, error) {
	u, err := m.st.User(ctx, user)
	if errors.Is(err, store.ErrNotFound) {
		bcrypt.CompareHashAndPassword(m.dummyHash(), []byte(password))
		return Principal{}, ErrBadCredentials
	}
	if err != nil {
		return Principal{}, err
	}
	if bcrypt.CompareHashAndPassword([]byte(u.PasswordHash), []byte(password)) != nil {
		return Principal{}, ErrBadCredentials
	}
	role, err := ParseRole(u.Role)
	if err != nil {
		return Principal{}, err
	}
	return Principal{Name: u.Name, Role: role, Policies: u.Policies}, nil
}

// LoginPassword checks a user's password and opens a session for them.
func (m *Manager) LoginPassword(ctx context.Context, user, password string) (string, Session, error) {
	p, err := m.CheckPassword(ctx, user, password)
	if err != nil {
		return "", Session{}, err
	}
	return m.openSession(ctx, p.Name, p.Name, p.Role)
}

// TokenUseEvery is how often a token's last use is written at most.
const TokenUseEvery = time.Minute

// Authenticate returns the principal of a bearer token: the admin token
// (an admin named "admin") or a user's API token in force (its user, with
// the user's role now). Anything else is ErrBadToken.
func (m *Manager) Authenticate(ctx context.Context, token string) (Principal, error) {
	if token == "" {
		return Principal{}, ErrBadToken
	}
	if m.CheckToken(token) {
		return Principal{Name: "admin", Role: RoleAdmin, AdminToken: true}, nil
	}
	t, err := m.st.APITokenByHash(ctx, tokenHashHex(token))
	if errors.Is(err, store.ErrNotFound) {
		return Principal{}, ErrBadToken
	}
	if err != nil {
		return Principal{}, err
	}
	role, err := ParseRole(t.Role)
	if err != nil {
		return Principal{}, err
	}
	if now := m.now(); now.Sub(t.LastUsed) >= TokenUseEvery {
		if err := m.st.TouchAPIToken(ctx, t.ID, now, TokenUseEvery); err != nil {
			return Principal{}, err
		}
	}
	return Principal{Name: t.User, Role: role, TokenID: t.ID, Policies: t.Policies}, nil
}

func tokenHashHex(token string) string { return hex.EncodeToString(hashToken(token)) }

// TokenHintLen is how many characters of a token its hint shows.
const TokenHintLen = len(TokenPrefix) + 4

// CreateToken makes an API token for user, stores its hash and returns the
// token (to show once) with its record.
func (m *Manager) CreateToken(ctx context.Context, user, label string) (string, store.APIToken, error) {
	label = strings.TrimSpace(label)
	if utf8.RuneCountInString(label) > MaxLabelLen || !printableText(label) {
		return "", store.APIToken{}, &FieldError{Field: "label", Message: fmt.Sprintf("must be at most %d printable characters", MaxLabelLen)}
	}
	tok := GenerateToken()
	t := store.APIToken{ID: RandomToken()[:12], User: user, Label: label, Hash: tokenHashHex(tok), Hint: tok[:TokenHintLen], Created: m.now()}
	if err := m.st.CreateAPIToken(ctx, t); errors.Is(err, store.ErrNotFound) {
		return "", store.APIToken{}, &FieldError{Field: "user", Message: fmt.Sprintf("there is no user %q", user)}
	} else if err != nil {
		return "", store.APIToken{}, err
	}
	return tok, t, nil
}

// Tokens lists every API token (hashes and hints only).
func (m *Manager) Tokens(ctx context.Context) ([]store.APIToken, error) { return m.st.APITokens(ctx) }

// RevokeToken revokes a token; it stops working at once.
func (m *Manager) RevokeToken(ctx context.Context, id string) (store.APIToken, error) {
	return m.st.RevokeAPIToken(ctx, id, m.now())
}

func printableText(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}
