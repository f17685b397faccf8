package policies

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// OverrideColumns are the columns a CSV of overrides may have besides the
// first, "key": the limits an override's algorithm_config may set, and
// TimeColumns.
var OverrideColumns = []string{"tokens_per_second", "rps", "burst", "limit", "max_per_period", "from", "until"}

// TimeColumns are the columns that bound when an override applies: RFC
// 3339 times, an empty cell for no bound.
var TimeColumns = []string{"from", "until"}

// MaxOverrideRows bounds the rows of one CSV import.
const MaxOverrideRows = 100000

// MergeStats says what a CSV import changed in the rule's overrides.
type MergeStats struct {
	Added    int `json:"added"`    // keys the rule had no override for
	Replaced int `json:"replaced"` // keys whose override the CSV replaced
	Total    int `json:"total"`    // the rule's overrides after the import
}

// MergeOverridesCSV merges a CSV of overrides into the rule named rule of
// the configuration doc and returns the configuration (indented JSON,
// fields in alphabetical order), validated with the filter's parser.
//
// The CSV has a header row: "key" first, then some of OverrideColumns. Each
// row is one identity's override; an empty cell leaves that limit to the
// rule. A row whose key the rule already has replaces that override; the
// rule's other overrides stay, unless replace is set (then the CSV is the
// whole table). Problems in the CSV are an *InputError naming the line and
// column; an invalid result is a *ValidationError with JSON paths.
func MergeOverridesCSV(doc []byte, rule string, data []byte, replace bool) ([]byte, MergeStats, error) {
	sc := scanOverrideCSV(data)
	if len(sc.problems) > 0 {
		return nil, MergeStats{}, &InputError{Field: "csv", Message: sc.problems[0].String()}
	}
	m, err := mergeRows(doc, rule, sc.rows, replace)
	if err != nil {
		return nil, m.stats, err
	}
	if _, err := Validate(m.out); err != nil {
		return nil, m.stats, err
	}
	return append(m.out, '\n'), m.stats, nil
}

// CSVProblem is one problem of a CSV of overrides: Line is its line in
// the CSV (1 is the header; 0: the table as a whole), Column the column it
// concerns ("" for the line or the table) and Message what is wrong, with
// the column named (`burst: "ten" is not a number`).
type CSVProblem struct {
	Line    int
	Column  string
	Message string
}

// String is the problem as the API reports it: "line 3: burst: ...".
func (p CSVProblem) String() string {
	if p.Line == 0 {
		return p.Message
	}
	return "line " + strconv.Itoa(p.Line) + ": " + p.Message
}

// MaxCSVProblems bounds the problems a preview lists.
const MaxCSVProblems = 50

// csvRow is one identity of a CSV of overrides.
type csvRow struct {
	line  int
	key   string
	cells []string       // the limit columns' cells, trimmed
	obj   map[string]any // the override: {"key", "algorithm_config"}
}

// csvScan is what scanOverrideCSV read: the limit columns, the good rows
// and every problem found (up to MaxCSVProblems).
type csvScan struct {
	columns  []string
	rows     []csvRow
	count    int // rows read, good or not
	problems []CSVProblem
}

func (sc *csvScan) problem(line int, column, format string, args ...any) {
	if len(sc.problems) < MaxCSVProblems {
		sc.problems = append(sc.problems, CSVProblem{Line: line, Column: column, Message: fmt.Sprintf(format, args...)})
	}
}

// scanOverrideCSV reads a CSV of overrides, collecting every problem of
// its rows; a bad header or a broken quote ends the scan.
func scanOverrideCSV(data []byte) csvScan {
	var sc csvScan
	cr := csv.NewReader(bytes.NewReader(data))
	cr.TrimLeadingSpace = true
	header, err := cr.Read()
	if err != nil {
		if errors.Is(err, io.EOF) {
			sc.problem(0, "", "is empty; the first line names the columns: key, then some of %s", strings.Join(OverrideColumns, ", "))
		} else {
			sc.problem(1, "", "%s", csvError(err))
		}
		return sc
	}
	if len(header) > 0 {
		header[0] = strings.TrimPrefix(header[0], "\ufeff") // a spreadsheet's byte order mark
	}
	if len(header) < 2 || strings.TrimSpace(header[0]) != "key" {
		sc.problem(1, "", "the columns must be key, then some of %s", strings.Join(OverrideColumns, ", "))
		return sc
	}
	for i, h := range header[1:] {
		h = strings.TrimSpace(h)
		header[i+1] = h
		if !slices.Contains(OverrideColumns, h) {
			sc.problem(1, h, "unknown column %q; the columns after key are some of %s", h, strings.Join(OverrideColumns, ", "))
		} else if slices.Index(header[1:], h) != i {
			sc.problem(1, h, "column %q appears twice", h)
		}
	}
	if len(sc.problems) > 0 {
		return sc
	}
	sc.columns = header[1:]
	seen := map[string]int{}
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil && !errors.Is(err, csv.ErrFieldCount) {
			var pe *csv.ParseError
			line := 0
			if errors.As(err, &pe) {
				line = pe.Line
			}
			sc.problem(line, "", "%s", csvError(err))
			return sc
		}
		line, _ := cr.FieldPos(0)
		sc.count++
		if sc.count > MaxOverrideRows {
			sc.problem(0, "", "has more than %d rows", MaxOverrideRows)
			return sc
		}
		if err != nil { // csv.ErrFieldCount
			sc.problem(line, "", "has %d cells; the header has %d columns (%s)", len(rec), len(header), strings.Join(header, ","))
			continue
		}
		if r, ok := sc.row(line, rec, seen); ok {
			sc.rows = append(sc.rows, r)
		}
	}
	if sc.count == 0 {
		sc.problem(0, "", "has no rows after the header")
	}
	return sc
}

// row checks one record; seen maps the keys so far to their line.
func (sc *csvScan) row(line int, rec []string, seen map[string]int) (csvRow, bool) {
	before := len(sc.problems)
	r := csvRow{line: line, key: rec[0], cells: make([]string, len(rec)-1)}
	switch prev, dup := seen[r.key]; {
	case r.key == "":
		sc.problem(line, "key", "key is empty")
	case !utf8.ValidString(r.key):
		// Written into the policy, the bytes would become U+FFFD and the
		// override would apply to another key than the one in the file.
		sc.problem(line, "key", "key %q is not UTF-8 (a spreadsheet's Latin-1 or Windows-1252?); save the CSV as UTF-8", r.key)
	case strings.ContainsRune(r.key, utf8.RuneError):
		// The same, already replaced: a JSON body (the API) carries the
		// CSV as a string, and a JSON decoder replaces such bytes.
		sc.problem(line, "key", "key %q holds U+FFFD, which stands for bytes that were not UTF-8; save the CSV as UTF-8", r.key)
	case dup:
		sc.problem(line, "key", "key %q is also on line %d", r.key, prev)
	default:
		seen[r.key] = line
	}
	limits, times := map[string]any{}, map[string]any{}
	for i, cell := range rec[1:] {
		cell = strings.TrimSpace(cell)
		r.cells[i] = cell
		if cell == "" {
			continue
		}
		if col := sc.columns[i]; slices.Contains(TimeColumns, col) {
			if _, err := time.Parse(time.RFC3339Nano, cell); err != nil {
				sc.problem(line, col, "%s: %q is not an RFC 3339 time such as 2026-12-24T18:00:00Z", col, cell)
			} else {
				times[col] = cell
			}
			continue
		}
		x, err := strconv.ParseFloat(cell, 64)
		if err != nil {
			sc.problem(line, sc.columns[i], "%s: %q is not a number", sc.columns[i], cell)
			continue
		}
		limits[sc.columns[i]] = json.Number(strconv.FormatFloat(x, 'g', -1, 64))
	}
	if len(limits) == 0 && len(sc.problems) == before {
		sc.problem(line, "", "key %q has no limits; fill in at least one column", r.key)
	}
	r.obj = map[string]any{"key": r.key, "algorithm_config": limits}
	for col, t := range times {
		r.obj[col] = t
	}
	return r, len(sc.problems) == before
}

// csvError is a CSV syntax error without the reader's "record on line N"
// (the problem carries the line).
func csvError(err error) string {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return fmt.Sprintf("column %d: %v", pe.Column, pe.Err)
	}
	return err.Error()
}

// merged is a configuration with a CSV's rows merged into one rule.
type merged struct {
	out      []byte // indented JSON, not yet validated
	stats    MergeStats
	rulePath string      // the rule's JSON path, e.g. "policies[1].rules[0]"
	lineAt   map[int]int // the index of a CSV row's override -> its line
}

// mergeRows merges rows into the rule named rule of doc.
func mergeRows(doc []byte, rule string, rows []csvRow, replace bool) (merged, error) {
	var m merged
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var cfg map[string]any
	if err := dec.Decode(&cfg); err != nil {
		return m, &InputError{Field: "policy", Message: "is not a JSON object: " + err.Error()}
	}
	r, path := findRule(cfg, rule)
	if r == nil {
		return m, &InputError{Field: "rule", Message: fmt.Sprintf("no rule named %q in the configuration", rule)}
	}
	m.rulePath, m.lineAt = path, make(map[int]int, len(rows))
	var list []any
	if old, ok := r["overrides"].([]any); ok && !replace {
		list = old
	}
	at := map[string]int{}
	for i, o := range list {
		if om, ok := o.(map[string]any); ok {
			if k, ok := om["key"].(string); ok {
				at[k] = i
			}
		}
	}
	for _, row := range rows {
		if i, ok := at[row.key]; ok {
			list[i] = row.obj
			m.lineAt[i] = row.line
			m.stats.Replaced++
			continue
		}
		at[row.key] = len(list)
		m.lineAt[len(list)] = row.line
		list = append(list, row.obj)
		m.stats.Added++
	}
	r["overrides"] = list
	m.stats.Total = len(list)
	out, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil { // unreachable: decoded JSON encodes
		return m, err
	}
	m.out = out
	return m, nil
}

// findRule returns the rule object named name of a decoded configuration
// (top-level "rules" or any policy's) and its JSON path, or nil.
func findRule(cfg map[string]any, name string) (map[string]any, string) {
	lists, prefixes := []any{cfg["rules"]}, []string{""}
	if ps, ok := cfg["policies"].([]any); ok {
		for i, p := range ps {
			if pm, ok := p.(map[string]any); ok {
				lists = append(lists, pm["rules"])
				prefixes = append(prefixes, "policies["+strconv.Itoa(i)+"].")
			}
		}
	}
	for li, l := range lists {
		rs, _ := l.([]any)
		for i, r := range rs {
			if rm, ok := r.(map[string]any); ok && rm["name"] == name {
				return rm, prefixes[li] + "rules[" + strconv.Itoa(i) + "]"
			}
		}
	}
	return nil, ""
}
