package web

// MigratePage is the conversion of another rate limiter's configuration
// into a policy: the form and, after a preview, the result.
type MigratePage struct {
	Nav     Nav
	Flashes []Flash
	Form    MigrateForm
	Result  *MigrateResult // nil: nothing converted yet
	// Conflict, when set, says the save was refused: its base version is
	// no longer the current one.
	Conflict string
}

// MigrateForm is the form's fields.
type MigrateForm struct {
	CSRF        string
	BaseVersion int64
	CanEdit     bool   // the session may save
	Config      string // envoyproxy/ratelimit's configuration (YAML)
	RateLimits  string // the route's rate_limits (YAML)
	Scope       string // "global" or "local"
	Replace     bool   // replace the current policy instead of adding to it
	Message     string
}

// MigrateResult is a conversion that worked: the policy that Save would
// store (the current one with the converted policies added, or the
// converted one alone), the converted rules and what differs.
type MigrateResult struct {
	Policy string // indented JSON
	Rules  []MigratedRule
	Notes  []string
}

// MigratedRule is one converted rule, summarized.
type MigratedRule struct {
	Policy, Name, Summary string
}
