package web

// The view structs below are everything the pages show: plain values,
// already formatted. Handlers (admin/httpapi) fill them in; the templ
// components only lay them out, and templ escapes every value.

// Nav is the page header: which page is active and the logged-in user.
type Nav struct {
	Active string // "dashboard", "policy", "history", "nodes", "telemetry", "istio", "trial", "audit", "users"; "" on the login page
	Author string // the logged-in user's name
	CSRF   string // the session's CSRF token, for the logout form
	Role   string // the logged-in user's role: "viewer", "editor" or "admin"
	// Policies are the policies an editor may change ("": all).
	Policies string
}

// Flash is a one-line notice at the top of a page.
type Flash struct {
	Kind string // "ok", "warn" or "error"
	Text string
}

// LoginPage is the login form.
type LoginPage struct {
	Error string // why the last attempt failed
	Name  string // the author name typed last time (admin token logins)
	User  string // the user name typed last time
	Next  string // where to go after logging in (a local path)
	CSRF  string // login CSRF token (double-submit cookie)
	// OIDCName is the identity provider's name for the "Log in with"
	// button ("": OIDC login is off).
	OIDCName string
}

// VersionInfo describes one policy version.
type VersionInfo struct {
	Number     int64
	Parent     int64
	RollbackOf int64
	Author     string
	Message    string
	Created    string // human-readable, UTC
	CreatedISO string // RFC 3339, for <time datetime>
	Current    bool
}

// Problem is one configuration error, with the line of the draft it is on
// (0 when it could not be placed).
type Problem struct {
	Path    string
	Message string
	Line    int
}

// ListingLine is one line of the draft as submitted, with the problems
// found on it.
type ListingLine struct {
	Number   int
	Text     string
	Problems []Problem
}

// DiffLine is one line of a diff.
type DiffLine struct {
	Kind string // "ctx", "add" or "del"
	Sign string // " ", "+" or "-"
	Text string
	Old  string // old line number, "" for added lines
	New  string // new line number, "" for removed lines
}

// Hunk is a group of changes.
type Hunk struct {
	Header string
	Lines  []DiffLine
}

// DiffView is a rendered diff.
type DiffView struct {
	From, To string // labels, e.g. "v3" and "v4"
	Hunks    []Hunk
}

// EditorPage is the policy editor.
type EditorPage struct {
	Nav         Nav
	Flashes     []Flash
	Current     VersionInfo
	BaseVersion int64
	Draft       string // the JSON in the textarea
	Message     string
	Rows        int
	Problems    []Problem     // the last save was refused: why
	Listing     []ListingLine // the refused draft, line by line, problems inline
	Conflict    *Conflict     // the last save was based on a stale version
	Sim         SimForm       // the simulator's fields
	SimResult   *SimView      // the last simulation (nil: none)
	Rules       RulesView     // the draft's rules in words (structured view)
	// TrialDuration is the "Try in shadow" duration typed last ("" shows
	// the default).
	TrialDuration string
	// DefaultOp is what Enter in a field does: "" simulates; with the rule
	// form open, "apply:<ref>" applies it. Saving always takes a click.
	DefaultOp string
	// Import is the form that imports a CSV of overrides (nil: not shown,
	// e.g. to a viewer).
	Import *OverridesForm
	// TestReport is the last run of the saved tests on the draft (nil:
	// none); OfferSkipTests shows "save without the tests" after a save
	// they refused.
	TestReport     *TestReport
	OfferSkipTests bool
	// Review: saves wait for another person's approval (-require-review);
	// ReviewOnly, when set, lists the policies whose changes wait for it
	// (the others are saved at once).
	Review     bool
	ReviewOnly string
	// Follows is the file the policy follows (nil: none): saves here are
	// refused, and the page says whether the file is applied.
	Follows *FileFollow
}

// FileFollow is what the admin found at its last look at the policy file
// it follows.
type FileFollow struct {
	Path, Tests string
	SHA256      string // short
	Version     int64  // the current version when it is the file's, else 0
	Checked     string // the last look
	Err         string // why the file is not applied, "" when it is
}

// Conflict explains a refused save whose base version was stale.
type Conflict struct {
	Base    int64
	Current VersionInfo
	Diff    DiffView // from the current version to the draft
	Message string
}

// HistoryPage lists versions.
type HistoryPage struct {
	Nav        Nav
	Flashes    []Flash
	Versions   []VersionInfo
	Current    int64
	NextBefore int64 // 0: no older page
	Paged      bool  // this is not the first page
}

// VersionPage shows one version and its diff.
type VersionPage struct {
	Nav     Nav
	Flashes []Flash
	Version VersionInfo
	Against int64 // the version it is compared with (0: nothing)
	Diff    DiffView
	Pretty  string
	Current int64
}

// NodeView is one xDS client.
type NodeView struct {
	ID            string
	Cluster       string
	Connected     bool
	LastSeen      string
	Acked         string
	UpToDate      bool
	NackedVersion string
	NackError     string
}

// NodesPage lists the Envoy nodes.
type NodesPage struct {
	Nav          Nav
	XDS          bool // the xDS server runs in this admin
	Nodes        []NodeView
	Current      int64
	Published    string // "version 4 at 12:00:01 UTC"
	PublishError string
}

// EnvoyGatewayPage shows the EnvoyExtensionPolicy manifest.
type EnvoyGatewayPage struct {
	Nav      Nav
	Format   string // "yaml" or "json"
	Target   string // Gateway/<name> or HTTPRoute/<name>
	Manifest string
	Version  int64
	Error    string
	Notes    []string // the clusters the Gateway's Envoy must have
}

// IstioPage shows the WasmPlugin manifest.
type IstioPage struct {
	Nav      Nav
	Format   string // "yaml" or "json"
	Manifest string
	Version  int64
	Error    string
	Warnings []string // what will not work under Istio as the policy stands
	Target   string   // the form's targets (Kind/name, comma-separated); "": the flags'
	Attached string   // what the WasmPlugin attaches to, in words
}

// ErrorPage is shown for errors a person can act on.
type ErrorPage struct {
	Nav     Nav
	Status  int
	Title   string
	Message string
}

// TrialPage shows the running shadow trial, if any.
type TrialPage struct {
	Nav       Nav
	Flashes   []Flash
	Available bool       // false: the admin runs without xDS, so without trials
	Trial     *TrialView // nil: none running
}

// TrialView is a running trial with its rates beside the current policy's.
type TrialView struct {
	ID            int64
	Author        string
	Base, Over    int64 // the version it started on; the one it is pushed over now
	Started, Ends string
	EndsISO       string
	Left          string
	Telemetry     bool // false: no telemetry, so no rates
	Rules         []TrialRuleView
	Identities    []TrialIdentity
}

// TrialRuleView is one draft rule beside the current rule of the same name
// (rates per second, "—" when no node reports the rule).
type TrialRuleView struct {
	Rule, Trial                        string
	CurAllowed, CurRejected, CurShadow string
	DraftAllowed, DraftRejecting       string
}

// TrialIdentity is an identity the draft would reject that the current
// policy admits.
type TrialIdentity struct {
	Rule, Identity string
	Rejects        uint64
	Nodes          int
}
