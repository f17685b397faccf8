package web

// ChangesPage lists the changes waiting for review, and recent decisions.
type ChangesPage struct {
	// Only, when review is required, lists the policies whose changes
	// wait for it ("payments-*,checkout"); "" for every change.
	Only     string
	Nav      Nav
	Flashes  []Flash
	Required bool // saves wait for review on this admin
	Open     []ChangeInfo
	Decided  []ChangeInfo
}

// ChangeInfo is a proposed change.
type ChangeInfo struct {
	ID         int64
	Base       int64
	Author     string
	Message    string
	Created    string
	CreatedISO string
	State      string // open, approved, rejected, withdrawn
	DecidedBy  string
	Decided    string
	Reason     string
	Version    int64 // the version an approval saved
	WithTests  bool  // the change brings its own tests
	// StaleBy is the current version when it is open on an older base:
	// an approval would be refused (0 otherwise).
	StaleBy int64
}

// ChangePage shows one change: what it changes against its base, and the
// forms that decide it.
type ChangePage struct {
	Nav     Nav
	Flashes []Flash
	Change  ChangeInfo
	Diff    DiffView
	Current int64 // the current version: a change on another base cannot be approved
	// Mine: the viewer proposed it (withdraw, not approve); CanReview: the
	// viewer may decide it (an editor).
	Mine      bool
	CanReview bool
	Tests     string // the tests it brings ("" for none)
	// TestReport is the saved tests' run that refused an approval.
	TestReport *TestReport
}
