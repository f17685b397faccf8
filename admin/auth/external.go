package auth

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluice-rl/sluice/admin/store"
)

// ErrUnknownUser is an external login (OIDC) of a user who has no account
// while accounts are not created on first login.
var ErrUnknownUser = errors.New("no account for this user")

// External is an account as the identity provider's claims describe it.
type External struct {
	User string
	Role Role
	// Policies are the policies the user may change ("": all), set on
	// the account when SetPolicies (the provider maps teams to policies);
	// otherwise the account keeps the ones an admin gave.
	Policies    string
	SetPolicies bool
}

// LoginExternal opens a session for a user the identity provider vouched
// for, with the role (and policies) mapped from the provider's claims. The
// account's stored role is set to a.Role, so API tokens and later sessions
// follow the provider. A user without an account gets one when create is
// set (with a random password nobody knows: it can only log in through the
// provider, until an admin sets a password), else ErrUnknownUser.
func (m *Manager) LoginExternal(ctx context.Context, a External, create bool) (string, Session, error) {
	user, role := a.User, a.Role
	if err := CheckUserName(user); err != nil {
		return "", Session{}, err
	}
	if _, err := ParseRole(string(role)); err != nil {
		return "", Session{}, err
	}
	u, err := m.st.User(ctx, user)
	var policies *string // the provider's, when it maps them and they changed
	if a.SetPolicies && (err != nil || u.Policies != a.Policies) {
		policies = &a.Policies
	}
	switch {
	case errors.Is(err, store.ErrNotFound) && !create:
		return "", Session{}, ErrUnknownUser
	case errors.Is(err, store.ErrNotFound):
		if err := m.CreateScopedUser(ctx, user, role, RandomToken(), a.Policies); err != nil {
			return "", Session{}, fmt.Errorf("creating the account of %q: %w", user, err)
		}
	case err != nil:
		return "", Session{}, err
	case u.Role != string(role) || policies != nil:
		// One write: a new role never applies without its policies.
		if err := m.UpdateAccount(ctx, user, role, "", policies); err != nil {
			return "", Session{}, fmt.Errorf("updating the role and policies of %q: %w", user, err)
		}
	}
	return m.openSession(ctx, user, user, role)
}
