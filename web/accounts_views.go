package web

// UserView is one account on the users page.
type UserView struct {
	Name     string
	Role     string
	Policies string // the policies the user may change; "" for all
	Created  string
}

// TokenView is one API token: never the token, only its first characters.
type TokenView struct {
	ID       string
	User     string
	Label    string
	Hint     string
	Created  string
	LastUsed string // "never" if unused
	Revoked  string // "" while in force
}

// UsersPage lists the accounts and API tokens (admins only).
type UsersPage struct {
	Nav      Nav
	Flashes  []Flash
	Roles    []string
	Users    []UserView
	Tokens   []TokenView
	NewToken string // a token just created, shown this once
}

// AuditView is one audit entry.
type AuditView struct {
	At      string
	Actor   string
	Action  string
	Remote  string
	Target  string
	Detail  string
	Version int64  // the policy version it created (0: none)
	DiffURL string // that version's diff
}

// AuditPage is the audit log with its filters.
type AuditPage struct {
	Nav                                 Nav
	Enabled                             bool
	Actor, Action, Remote, Since, Until string // the filters as given
	Entries                             []AuditView
	OlderURL                            string // "" on the last page
}
