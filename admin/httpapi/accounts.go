package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/admin/auth"
	"github.com/sluice-rl/sluice/admin/policies"
	"github.com/sluice-rl/sluice/admin/store"
	"github.com/sluice-rl/sluice/web"
)

// registerAccounts adds the users, API tokens and audit routes. Users and
// tokens are for admins (requiredRole); the audit log is for everyone.
func (s *server) registerAccounts(mux *http.ServeMux) {
	mux.Handle("GET /api/v1/users", s.api(s.apiUsers))
	mux.Handle("POST /api/v1/users", s.api(s.apiCreateUser))
	mux.Handle("PATCH /api/v1/users/{name}", s.api(s.apiUpdateUser))
	mux.Handle("DELETE /api/v1/users/{name}", s.api(s.apiDeleteUser))
	mux.Handle("GET /api/v1/tokens", s.api(s.apiTokens))
	mux.Handle("POST /api/v1/tokens", s.api(s.apiCreateToken))
	mux.Handle("DELETE /api/v1/tokens/{id}", s.api(s.apiRevokeToken))
	mux.Handle("GET /api/v1/audit", s.api(s.apiAudit))

	mux.Handle("GET /users", s.page(s.usersPage))
	mux.Handle("POST /users", s.page(s.createUserSubmit))
	mux.Handle("POST /users/{name}", s.page(s.updateUserSubmit))
	mux.Handle("POST /users/{name}/delete", s.page(s.deleteUserSubmit))
	mux.Handle("POST /tokens", s.page(s.createTokenSubmit))
	mux.Handle("POST /tokens/{id}/revoke", s.page(s.revokeTokenSubmit))
	mux.Handle("GET /audit", s.page(s.auditPage))
}

// accountErr turns the accounts' errors into the handlers' input and
// not-found errors.
func accountErr(err error, what string) error {
	var fe *auth.FieldError
	switch {
	case errors.As(err, &fe):
		return &policies.InputError{Field: fe.Field, Message: fe.Message}
	case errors.Is(err, store.ErrNotFound):
		return &apiErr{status: http.StatusNotFound, msg: "there is no " + what}
	}
	return err
}

type userJSON struct {
	Name     string    `json:"name"`
	Role     string    `json:"role"`
	Policies []string  `json:"policies"` // the policies an editor may change; empty: all
	Created  time.Time `json:"created"`
}

// scopeText checks the policies an account may change, given as a list
// (API) or as text (form), and returns the text stored with the account.
// An admin changes everything: a scope for one is refused rather than
// silently ignored.
func scopeText(role string, list []string) (string, error) {
	sc, err := policies.NewScope(list)
	if err != nil {
		return "", err
	}
	if sc.Restricted() && role == string(auth.RoleAdmin) {
		return "", &policies.InputError{Field: "policies", Message: "an admin may change every policy; give a scope to an editor"}
	}
	return sc.String(), nil
}

func scopeList(text string) []string {
	sc, _ := policies.ParseScope(text)
	if sc == nil {
		return []string{}
	}
	return sc
}

func (s *server) apiUsers(w http.ResponseWriter, r *http.Request) error {
	us, err := s.Auth.Users(r.Context())
	if err != nil {
		return err
	}
	out := struct {
		Users []userJSON `json:"users"`
	}{Users: []userJSON{}}
	for _, u := range us {
		out.Users = append(out.Users, userJSON{Name: u.Name, Role: u.Role, Policies: scopeList(u.Policies), Created: u.Created.UTC()})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *server) apiCreateUser(w http.ResponseWriter, r *http.Request) error {
	var b struct {
		Name     string   `json:"name"`
		Role     string   `json:"role"`
		Password string   `json:"password"`
		Policies []string `json:"policies"`
	}
	if err := s.decodeJSON(w, r, &b, []string{"name", "role", "password", "policies"}); err != nil {
		return err
	}
	scope, err := s.createUser(r, b.Name, b.Role, b.Password, b.Policies)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, userJSON{Name: b.Name, Role: b.Role, Policies: scopeList(scope), Created: time.Now().UTC()})
	return nil
}

// createUser adds an account with the policies it may change, and returns
// them as stored.
func (s *server) createUser(r *http.Request, name, role, password string, scope []string) (string, error) {
	text, err := scopeText(role, scope)
	if err != nil {
		return "", err
	}
	if err := s.Auth.CreateScopedUser(r.Context(), name, auth.Role(role), password, text); err != nil {
		return "", accountErr(err, "user "+name)
	}
	detail := "role " + role
	if text != "" {
		detail += ", policies " + text
	}
	s.record(r, store.AuditEntry{Action: ActionUserCreate, Target: name, Detail: detail})
	return text, nil
}

func (s *server) apiUpdateUser(w http.ResponseWriter, r *http.Request) error {
	var b struct {
		Role     string    `json:"role"`
		Password string    `json:"password"`
		Policies *[]string `json:"policies"` // absent: unchanged; []: every policy
	}
	if err := s.decodeJSON(w, r, &b, []string{"role", "password", "policies"}); err != nil {
		return err
	}
	name := r.PathValue("name")
	if err := s.updateUser(r, name, b.Role, b.Password, b.Policies); err != nil {
		return err
	}
	// The account as it is now, whatever the request left out.
	us, err := s.Auth.Users(r.Context())
	if err != nil {
		return err
	}
	for _, u := range us {
		if u.Name == name {
			writeJSON(w, http.StatusOK, userJSON{Name: u.Name, Role: u.Role, Policies: scopeList(u.Policies), Created: u.Created.UTC()})
			return nil
		}
	}
	return &apiErr{status: http.StatusNotFound, msg: "user " + name + " was removed meanwhile"}
}

// updateUser changes an account's role and password (when role is given)
// and the policies it may change (when scope is not nil).
func (s *server) updateUser(r *http.Request, name, role, password string, scope *[]string) error {
	var policies *string
	if scope != nil {
		text, err := scopeText(role, *scope)
		if err != nil {
			return err
		}
		policies = &text
	}
	if err := s.Auth.UpdateAccount(r.Context(), name, auth.Role(role), password, policies); err != nil {
		return accountErr(err, "user "+name)
	}
	var details []string
	if role != "" || password != "" || scope == nil {
		details = append(details, "role "+role)
		if password != "" {
			details = append(details, "new password")
		}
	}
	if policies != nil {
		text := *policies
		if text == "" {
			text = "all"
		}
		details = append(details, "policies "+text)
	}
	s.record(r, store.AuditEntry{Action: ActionUserUpdate, Target: name, Detail: strings.Join(details, ", ")})
	return nil
}

func (s *server) deleteUser(r *http.Request, name string) error {
	if err := s.Auth.DeleteUser(r.Context(), name); err != nil {
		return accountErr(err, "user "+name)
	}
	s.record(r, store.AuditEntry{Action: ActionUserDelete, Target: name})
	return nil
}

func (s *server) apiDeleteUser(w http.ResponseWriter, r *http.Request) error {
	if err := s.deleteUser(r, r.PathValue("name")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

type tokenJSON struct {
	ID       string     `json:"id"`
	User     string     `json:"user"`
	Label    string     `json:"label"`
	Hint     string     `json:"hint"`
	Created  time.Time  `json:"created"`
	LastUsed *time.Time `json:"last_used"`
	Revoked  *time.Time `json:"revoked,omitempty"`
	Token    string     `json:"token,omitempty"` // only in the answer that creates it
}

func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

func tokenToJSON(t store.APIToken) tokenJSON {
	return tokenJSON{ID: t.ID, User: t.User, Label: t.Label, Hint: t.Hint, Created: t.Created.UTC(), LastUsed: optTime(t.LastUsed), Revoked: optTime(t.Revoked)}
}

func (s *server) apiTokens(w http.ResponseWriter, r *http.Request) error {
	ts, err := s.Auth.Tokens(r.Context())
	if err != nil {
		return err
	}
	out := struct {
		Tokens []tokenJSON `json:"tokens"`
	}{Tokens: []tokenJSON{}}
	for _, t := range ts {
		out.Tokens = append(out.Tokens, tokenToJSON(t))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *server) createToken(r *http.Request, user, label string) (string, store.APIToken, error) {
	tok, t, err := s.Auth.CreateToken(r.Context(), user, label)
	if err != nil {
		return "", t, accountErr(err, "user "+user)
	}
	s.record(r, store.AuditEntry{Action: ActionTokenCreate, Target: t.ID, Detail: fmt.Sprintf("for %s (%s), %s…", user, label, t.Hint)})
	return tok, t, nil
}

func (s *server) apiCreateToken(w http.ResponseWriter, r *http.Request) error {
	var b struct{ User, Label string }
	if err := s.decodeJSON(w, r, &b, []string{"user", "label"}); err != nil {
		return err
	}
	tok, t, err := s.createToken(r, b.User, b.Label)
	if err != nil {
		return err
	}
	j := tokenToJSON(t)
	j.Token = tok
	writeJSON(w, http.StatusCreated, j)
	return nil
}

func (s *server) revokeToken(r *http.Request, id string) error {
	t, err := s.Auth.RevokeToken(r.Context(), id)
	if err != nil {
		return accountErr(err, "token "+id+" in force")
	}
	s.record(r, store.AuditEntry{Action: ActionTokenRevoke, Target: id, Detail: fmt.Sprintf("of %s (%s), %s…", t.User, t.Label, t.Hint)})
	return nil
}

func (s *server) apiRevokeToken(w http.ResponseWriter, r *http.Request) error {
	if err := s.revokeToken(r, r.PathValue("id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// Pages.

func (s *server) usersView(r *http.Request, sess auth.Session) (web.UsersPage, error) {
	p := web.UsersPage{Nav: nav(sess, "users")}
	for _, ro := range auth.Roles {
		p.Roles = append(p.Roles, string(ro))
	}
	us, err := s.Auth.Users(r.Context())
	if err != nil {
		return p, err
	}
	for _, u := range us {
		p.Users = append(p.Users, web.UserView{Name: u.Name, Role: u.Role, Policies: u.Policies, Created: timeText(u.Created)})
	}
	ts, err := s.Auth.Tokens(r.Context())
	if err != nil {
		return p, err
	}
	for _, t := range ts {
		v := web.TokenView{ID: t.ID, User: t.User, Label: t.Label, Hint: t.Hint + "…", Created: timeText(t.Created),
			LastUsed: timeText(t.LastUsed), Revoked: timeText(t.Revoked)}
		if v.LastUsed == "" {
			v.LastUsed = "never"
		}
		p.Tokens = append(p.Tokens, v)
	}
	return p, nil
}

// usersSubmit runs a users-page form's action, then shows the page again
// with the outcome (rendered, not redirected, so a new token never sits
// in a URL or the history).
func (s *server) usersSubmit(w http.ResponseWriter, r *http.Request, sess auth.Session, act func() (string, string, error)) error {
	ok, newToken, err := act()
	status := http.StatusOK
	var flash web.Flash
	var ie *policies.InputError
	var ae *apiErr
	switch {
	case err == nil:
		flash = web.Flash{Kind: "ok", Text: ok}
	case errors.As(err, &ie):
		status, flash = http.StatusBadRequest, web.Flash{Kind: "error", Text: "Not done: " + ie.Error()}
	case errors.As(err, &ae):
		status, flash = ae.status, web.Flash{Kind: "error", Text: "Not done: " + ae.msg}
	default:
		return err
	}
	p, err := s.usersView(r, sess)
	if err != nil {
		return err
	}
	p.Flashes, p.NewToken = []web.Flash{flash}, newToken
	s.render(w, r, status, web.Users(p))
	return nil
}

func (s *server) usersPage(w http.ResponseWriter, r *http.Request, sess auth.Session) error {
	p, err := s.usersView(r, sess)
	if err != nil {
		return err
	}
	s.render(w, r, http.StatusOK, web.Users(p))
	return nil
}

func (s *server) createUserSubmit(w http.ResponseWriter, r *http.Request, sess auth.Session) error {
	f := r.PostForm
	return s.usersSubmit(w, r, sess, func() (string, string, error) {
		if _, err := s.createUser(r, f.Get("name"), f.Get("role"), f.Get("password"), policies.SplitScope(f.Get("policies"))); err != nil {
			return "", "", err
		}
		return "Created " + f.Get("name") + ".", "", nil
	})
}

func (s *server) updateUserSubmit(w http.ResponseWriter, r *http.Request, sess auth.Session) error {
	name := r.PathValue("name")
	return s.usersSubmit(w, r, sess, func() (string, string, error) {
		scope := policies.SplitScope(r.PostForm.Get("policies"))
		return "Updated " + name + ".", "", s.updateUser(r, name, r.PostForm.Get("role"), r.PostForm.Get("password"), &scope)
	})
}

func (s *server) deleteUserSubmit(w http.ResponseWriter, r *http.Request, sess auth.Session) error {
	name := r.PathValue("name")
	return s.usersSubmit(w, r, sess, func() (string, string, error) {
		return "Deleted " + name + " with their tokens and sessions.", "", s.deleteUser(r, name)
	})
}

func (s *server) createTokenSubmit(w http.ResponseWriter, r *http.Request, sess auth.Session) error {
	return s.usersSubmit(w, r, sess, func() (string, string, error) {
		tok, t, err := s.createToken(r, r.PostForm.Get("user"), r.PostForm.Get("label"))
		if err != nil {
			return "", "", err
		}
		return "Created token " + t.ID + " for " + t.User + ". Copy it now: it is stored hashed and will not be shown again.", tok, nil
	})
}

func (s *server) revokeTokenSubmit(w http.ResponseWriter, r *http.Request, sess auth.Session) error {
	id := r.PathValue("id")
	return s.usersSubmit(w, r, sess, func() (string, string, error) {
		return "Revoked token " + id + "; it no longer works.", "", s.revokeToken(r, id)
	})
}
