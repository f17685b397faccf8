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

// LoginExternal opens a session for a user the identity provider vouched
// for, with the role mapped from the provider's claims. The account's
// stored role is set to role, so API tokens and later sessions follow the
// provider. A user without an account gets one when create is set (with a
// random password nobody knows: it can only log in through the provider,
// until an admin sets a password), else ErrUnknownUser.
func (m *Manager) LoginExternal(ctx context.Context, user string, role Role, create bool) (string, Session, error) {
	if err := CheckUserName(user); err != nil {
		return "", Session{}, err
	}
	if _, err := ParseRole(string(role)); err != nil {
		return "", Session{}, err
	}
	u, err := m.st.User(ctx, user)
	switch {
	case errors.Is(err, store.ErrNotFound) && !create:
		return "", Session{}, ErrUnknownUser
	case errors.Is(err, store.ErrNotFound):
		if err := m.CreateUser(ctx, user, role, RandomToken()); err != nil {
			return "", Session{}, fmt.Errorf("creating the account of %q: %w", user, err)
		}
	case err != nil:
		return "", Session{}, err
	case u.Role != string(role):
		if err := m.UpdateUser(ctx, user, role, ""); err != nil {
			return "", Session{}, fmt.Errorf("updating the role of %q: %w", user, err)
		}
	}
	return m.openSession(ctx, user, user, role)
}
