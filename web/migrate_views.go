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
	CanEdit     bool // the session may save
	Sources     []MigrateSource
	From        string // the chosen source's Name ("" for the first)
	Config      string // its configuration
	RateLimits  string // envoyproxy/ratelimit: the route's rate_limits (YAML)
	Scope       string // envoyproxy/ratelimit: "global" or "local"
	Status      string // ingress-nginx: the rejection status
	// The other choices, by their API names (fleet_cluster,
	// annotations_prefix, consumer_key, plugin, default_cost).
	FleetCluster, AnnotationsPrefix, ConsumerKey, Plugin, DefaultCost string
	Replace                                                           bool // replace the current policy instead of adding to it
	Message                                                           string
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

// MigrateSource is a rate limiter the form converts from.
type MigrateSource struct {
	Name, Title string
	Config      string   // what its configuration document is
	Reads       []string // the form's other fields it reads
}
