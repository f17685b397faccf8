package auth

import (
	"context"
	"errors"
	"testing"
)

func TestExternalLoginCreatesUpdatesOrRefusesAccounts(t *testing.T) {
	m, _, _ := newManager(t)
	ctx := context.Background()
	if _, _, err := m.LoginExternal(ctx, "gina", RoleEditor, false); !errors.Is(err, ErrUnknownUser) {
		t.Fatalf("unknown user without creation: %v", err)
	}
	id, sess, err := m.LoginExternal(ctx, "gina", RoleEditor, true)
	if err != nil || sess.User != "gina" || sess.Role != RoleEditor {
		t.Fatalf("first login: %+v %v", sess, err)
	}
	if got, err := m.Session(ctx, id); err != nil || got.Principal() != (Principal{Name: "gina", Role: RoleEditor}) {
		t.Fatalf("session: %+v %v", got, err)
	}
	// The next login brings the provider's new role to the account and
	// to the session opened before.
	if _, _, err := m.LoginExternal(ctx, "gina", RoleViewer, false); err != nil {
		t.Fatal(err)
	}
	if got, _ := m.Session(ctx, id); got.Role != RoleViewer {
		t.Fatalf("role after the provider demoted: %s", got.Role)
	}
	// The account created has a password nobody was told.
	if _, err := m.CheckPassword(ctx, "gina", ""); !errors.Is(err, ErrBadCredentials) {
		t.Fatalf("empty password: %v", err)
	}
	var fe *FieldError
	if _, _, err := m.LoginExternal(ctx, "gina smith", RoleViewer, true); !errors.As(err, &fe) || fe.Field != "name" {
		t.Fatalf("bad name: %v", err)
	}
	if _, _, err := m.LoginExternal(ctx, "hal", Role("root"), true); err == nil {
		t.Fatal("an unknown role was accepted")
	}
}
