package auth

import (
	"context"
	"errors"
	"testing"
)

func TestExternalLoginCreatesUpdatesOrRefusesAccounts(t *testing.T) {
	m, _, _ := newManager(t)
	ctx := context.Background()
	if _, _, err := m.LoginExternal(ctx, External{User: "gina", Role: RoleEditor}, false); !errors.Is(err, ErrUnknownUser) {
		t.Fatalf("unknown user without creation: %v", err)
	}
	id, sess, err := m.LoginExternal(ctx, External{User: "gina", Role: RoleEditor}, true)
	if err != nil || sess.User != "gina" || sess.Role != RoleEditor {
		t.Fatalf("first login: %+v %v", sess, err)
	}
	if got, err := m.Session(ctx, id); err != nil || got.Principal() != (Principal{Name: "gina", Role: RoleEditor}) {
		t.Fatalf("session: %+v %v", got, err)
	}
	// The next login brings the provider's new role to the account and
	// to the session opened before.
	if _, _, err := m.LoginExternal(ctx, External{User: "gina", Role: RoleViewer}, false); err != nil {
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
	if _, _, err := m.LoginExternal(ctx, External{User: "gina smith", Role: RoleViewer}, true); !errors.As(err, &fe) || fe.Field != "name" {
		t.Fatalf("bad name: %v", err)
	}
	if _, _, err := m.LoginExternal(ctx, External{User: "hal", Role: Role("root")}, true); err == nil {
		t.Fatal("an unknown role was accepted")
	}
}

// TestExternalLoginSetsPoliciesOnlyWhenTheProviderMapsThem: with team
// mapping, each login brings the provider's policies to the account; without
// it, the policies an admin gave stay.
func TestExternalLoginSetsPoliciesOnlyWhenTheProviderMapsThem(t *testing.T) {
	m, _, _ := newManager(t)
	ctx := context.Background()
	id, _, err := m.LoginExternal(ctx, External{User: "ivy", Role: RoleEditor, Policies: "payments-*", SetPolicies: true}, true)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := m.Session(ctx, id); got.Principal().Policies != "payments-*" {
		t.Fatalf("policies after the first login: %q", got.Principal().Policies)
	}
	if _, _, err := m.LoginExternal(ctx, External{User: "ivy", Role: RoleEditor, Policies: "search", SetPolicies: true}, false); err != nil {
		t.Fatal(err)
	}
	if got, _ := m.Session(ctx, id); got.Principal().Policies != "search" {
		t.Fatalf("policies after the provider moved ivy: %q", got.Principal().Policies)
	}
	if _, _, err := m.LoginExternal(ctx, External{User: "ivy", Role: RoleEditor}, false); err != nil {
		t.Fatal(err)
	}
	if got, _ := m.Session(ctx, id); got.Principal().Policies != "search" {
		t.Fatalf("without team mapping the admin's policies must stay: %q", got.Principal().Policies)
	}
}
