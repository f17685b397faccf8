package web

// TestsPage is the saved policy tests' page.
type TestsPage struct {
	Nav     Nav
	Flashes []Flash
	// Saved describes the saved tests ("" for none); Revision is the
	// revision the next save is based on.
	Saved    string
	Revision int64
	Body     string // the file in the textarea: the saved one, or the one submitted
	Rows     int
	// FileErrors are the mistakes of a submitted file; Report the last
	// run (nil: none).
	FileErrors []TestFileError
	Report     *TestReport
	// Conflict: the save was based on a stale revision.
	Conflict string
}

// TestFileError is a mistake of a test file at a line.
type TestFileError struct {
	Line int
	Text string
}

// TestReport is a run of tests against a policy.
type TestReport struct {
	Against  string // "the current policy (v7)", "the draft"
	Revision int64  // the saved tests' revision (0: a submitted file)
	Passed   int
	Failed   int
	Requests int
	Tests    []TestResultView
	// Unexercised are the rules no request applied ("policy/rule").
	Unexercised []string
}

// TestResultView is one test's outcome.
type TestResultView struct {
	Name     string
	Line     int
	Requests int
	OK       bool
	// Where says which request failed; Mismatches what differed; Context
	// how each policy decided it.
	Where      string
	Mismatches []string
	Context    []string
}
