package policies

import (
	"errors"
	"strconv"
	"strings"
)

// MaxPreviewRows is how many rows a preview shows.
const MaxPreviewRows = 10

// OverridesPreview is what importing a CSV of overrides into a rule would
// do, for a person to check before saving: the rows read, the first of
// them, the merge's counts and every problem, by CSV line and column.
type OverridesPreview struct {
	Rule     string
	Columns  []string     // the CSV's limit columns, in order
	Rows     []PreviewRow // the first MaxPreviewRows good rows
	Count    int          // rows read after the header, good or not
	Stats    MergeStats   // valid only when Problems is empty
	Problems []CSVProblem // the CSV's problems, then the filter's about the merged rule
	// Policy is the merged configuration (indented JSON), validated; nil
	// when there are problems.
	Policy []byte
}

// PreviewRow is one identity of the CSV with its limit cells.
type PreviewRow struct {
	Line  int
	Key   string
	Cells []string
}

// PreviewOverridesCSV reads a CSV of overrides as MergeOverridesCSV does
// and merges it into the rule named rule of doc, reporting every problem
// instead of the first: the CSV's (line and column), then, for a CSV
// without any, the filter's errors about the merged configuration, placed
// on the CSV line and column that caused them when they concern an
// imported row (an error elsewhere has line 0 and its JSON path). The
// error is for a rule that does not exist or a doc that is not JSON.
func PreviewOverridesCSV(doc []byte, rule string, data []byte, replace bool) (OverridesPreview, error) {
	pv := OverridesPreview{Rule: rule}
	sc := scanOverrideCSV(data)
	pv.Columns, pv.Count, pv.Problems = sc.columns, sc.count, sc.problems
	for _, r := range sc.rows[:min(len(sc.rows), MaxPreviewRows)] {
		pv.Rows = append(pv.Rows, PreviewRow{Line: r.line, Key: r.key, Cells: r.cells})
	}
	m, err := mergeRows(doc, rule, sc.rows, replace)
	if err != nil {
		return pv, err
	}
	if len(pv.Problems) > 0 {
		return pv, nil
	}
	pv.Stats = m.stats
	if _, err := Validate(m.out); err != nil {
		var ve *ValidationError
		if !errors.As(err, &ve) {
			return pv, err
		}
		for _, e := range ve.Errors {
			if len(pv.Problems) == MaxCSVProblems {
				break
			}
			pv.Problems = append(pv.Problems, m.place(e.Path, e.Message))
		}
		return pv, nil
	}
	pv.Policy = append(m.out, '\n')
	return pv, nil
}

// place turns a filter error about the merged configuration into a CSV
// problem: "<rule>.overrides[i].algorithm_config.burst" of an imported row
// is that row's line and the column burst.
func (m merged) place(path, msg string) CSVProblem {
	rest, ok := strings.CutPrefix(path, m.rulePath+".overrides[")
	if !ok {
		return CSVProblem{Message: path + ": " + msg}
	}
	idx, field, _ := strings.Cut(rest, "]")
	i, err := strconv.Atoi(idx)
	line, imported := m.lineAt[i]
	if err != nil || !imported {
		return CSVProblem{Message: path + ": " + msg + " (an override the rule already had)"}
	}
	column := ""
	switch field = strings.TrimPrefix(field, "."); {
	case field == "key", field == "from", field == "until":
		column = field
	case strings.HasPrefix(field, "algorithm_config."):
		column = strings.TrimPrefix(field, "algorithm_config.")
	}
	if column == "" {
		return CSVProblem{Line: line, Message: msg}
	}
	return CSVProblem{Line: line, Column: column, Message: column + ": " + msg}
}
