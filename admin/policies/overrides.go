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
)

// OverrideColumns are the columns a CSV of overrides may have besides the
// first, "key": the limits an override's algorithm_config may set.
var OverrideColumns = []string{"tokens_per_second", "rps", "burst", "limit", "max_per_period"}

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
	var st MergeStats
	rows, err := readOverrideCSV(data)
	if err != nil {
		return nil, st, err
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var cfg map[string]any
	if err := dec.Decode(&cfg); err != nil {
		return nil, st, &InputError{Field: "policy", Message: "is not a JSON object: " + err.Error()}
	}
	r := findRule(cfg, rule)
	if r == nil {
		return nil, st, &InputError{Field: "rule", Message: fmt.Sprintf("no rule named %q in the configuration", rule)}
	}
	var list []any
	if old, ok := r["overrides"].([]any); ok && !replace {
		list = old
	}
	at := map[string]int{}
	for i, o := range list {
		if m, ok := o.(map[string]any); ok {
			if k, ok := m["key"].(string); ok {
				at[k] = i
			}
		}
	}
	for _, row := range rows {
		if i, ok := at[row["key"].(string)]; ok {
			list[i] = row
			st.Replaced++
			continue
		}
		at[row["key"].(string)] = len(list)
		list = append(list, row)
		st.Added++
	}
	r["overrides"] = list
	st.Total = len(list)
	out, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil { // unreachable: decoded JSON encodes
		return nil, st, err
	}
	if _, err := Validate(out); err != nil {
		return nil, st, err
	}
	return append(out, '\n'), st, nil
}

// readOverrideCSV reads the rows as override objects.
func readOverrideCSV(data []byte) ([]map[string]any, error) {
	cr := csv.NewReader(bytes.NewReader(data))
	cr.TrimLeadingSpace = true
	cr.ReuseRecord = false
	header, err := cr.Read()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &InputError{Field: "csv", Message: "is empty; the first line names the columns: key, then some of " + strings.Join(OverrideColumns, ", ")}
		}
		return nil, &InputError{Field: "csv", Message: err.Error()}
	}
	if len(header) > 0 {
		header[0] = strings.TrimPrefix(header[0], "\ufeff") // a spreadsheet's byte order mark
	}
	if len(header) < 2 || strings.TrimSpace(header[0]) != "key" {
		return nil, &InputError{Field: "csv", Message: "line 1: the columns must be key, then some of " + strings.Join(OverrideColumns, ", ")}
	}
	for i, h := range header[1:] {
		h = strings.TrimSpace(h)
		header[i+1] = h
		if !slices.Contains(OverrideColumns, h) {
			return nil, &InputError{Field: "csv", Message: fmt.Sprintf("line 1: unknown column %q; the columns after key are some of %s", h, strings.Join(OverrideColumns, ", "))}
		}
		if slices.Index(header[1:], h) != i {
			return nil, &InputError{Field: "csv", Message: fmt.Sprintf("line 1: column %q appears twice", h)}
		}
	}
	var rows []map[string]any
	seen := map[string]int{}
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, &InputError{Field: "csv", Message: err.Error()}
		}
		line, _ := cr.FieldPos(0)
		if len(rows) >= MaxOverrideRows {
			return nil, &InputError{Field: "csv", Message: fmt.Sprintf("has more than %d rows", MaxOverrideRows)}
		}
		key := rec[0]
		if key == "" {
			return nil, &InputError{Field: "csv", Message: fmt.Sprintf("line %d: key is empty", line)}
		}
		if prev, dup := seen[key]; dup {
			return nil, &InputError{Field: "csv", Message: fmt.Sprintf("line %d: key %q is also on line %d", line, key, prev)}
		}
		seen[key] = line
		limits := map[string]any{}
		for i, cell := range rec[1:] {
			cell = strings.TrimSpace(cell)
			if cell == "" {
				continue
			}
			x, err := strconv.ParseFloat(cell, 64)
			if err != nil {
				return nil, &InputError{Field: "csv", Message: fmt.Sprintf("line %d: %s: %q is not a number", line, header[i+1], cell)}
			}
			limits[header[i+1]] = json.Number(strconv.FormatFloat(x, 'g', -1, 64))
		}
		if len(limits) == 0 {
			return nil, &InputError{Field: "csv", Message: fmt.Sprintf("line %d: key %q has no limits; fill in at least one column", line, key)}
		}
		rows = append(rows, map[string]any{"key": key, "algorithm_config": limits})
	}
	if len(rows) == 0 {
		return nil, &InputError{Field: "csv", Message: "has no rows after the header"}
	}
	return rows, nil
}

// findRule returns the rule object named name of a decoded configuration
// (top-level "rules" or any policy's), or nil.
func findRule(cfg map[string]any, name string) map[string]any {
	lists := []any{cfg["rules"]}
	if ps, ok := cfg["policies"].([]any); ok {
		for _, p := range ps {
			if pm, ok := p.(map[string]any); ok {
				lists = append(lists, pm["rules"])
			}
		}
	}
	for _, l := range lists {
		rs, _ := l.([]any)
		for _, r := range rs {
			if rm, ok := r.(map[string]any); ok && rm["name"] == name {
				return rm
			}
		}
	}
	return nil
}
