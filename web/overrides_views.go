package web

// OverridesPage is the page that imports a CSV of overrides into a rule:
// the form, and after a preview what the import would do.
type OverridesPage struct {
	Nav     Nav
	Flashes []Flash
	Form    OverridesForm
	Preview *OverridesPreview // nil: nothing previewed yet
	// Conflict, when set, says the save was refused: its base version is
	// no longer the current one.
	Conflict string
}

// OverridesForm is the import form's fields and the rules it offers.
type OverridesForm struct {
	CSRF        string
	BaseVersion int64
	Rules       []RuleChoice
	Rule        string // the chosen rule's name
	CSV         string
	Replace     bool
	Message     string
}

// RuleChoice is a rule that takes overrides.
type RuleChoice struct {
	Name, Policy, Algorithm string
	Columns                 string // the CSV columns its overrides may set, comma-separated
	Overrides               int    // overrides it has now
}

// OverridesPreview is what the import would do.
type OverridesPreview struct {
	Rule                   string
	Count                  int // rows read
	Added, Replaced, Total int
	Columns                []string
	Rows                   []CSVRowView // the first rows
	Problems               []CSVProblemView
	OK                     bool // no problems: the form offers to save
}

// CSVRowView is one row of the CSV.
type CSVRowView struct {
	Line  int
	Key   string
	Cells []string
}

// CSVProblemView is one problem, by CSV line (0: the table or the rule)
// and column ("" for the whole line).
type CSVProblemView struct {
	Line    int
	Column  string
	Message string
}

func boolText(b bool) string {
	if b {
		return "true"
	}
	return "false"
}
