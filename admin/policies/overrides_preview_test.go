package policies

import (
	"slices"
	"strings"
	"testing"
)

const quotaDoc = `{"policies":[{"name":"p","rules":[
 {"name":"other","limit_keys":["path"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":1}},
 {"name":"monthly","limit_keys":["header:x-api-key"],"algorithm":"quota","algorithm_config":{"limit":1000,"period":"month"},
  "overrides":[{"key":"old","algorithm_config":{"limit":5}}]}]}]}`

func TestPreviewListsEveryCSVProblemByLineAndColumn(t *testing.T) {
	pv, err := PreviewOverridesCSV([]byte(quotaDoc), "monthly", []byte("key,limit\na,10\nb,x\n,3\na,4\nc,\ncaf\xe9,5\ncaf\uFFFD,5\n"), false)
	if err != nil {
		t.Fatal(err)
	}
	want := []CSVProblem{
		{3, "limit", `limit: "x" is not a number`},
		{4, "key", "key is empty"},
		{5, "key", `key "a" is also on line 2`},
		{6, "", `key "c" has no limits; fill in at least one column`},
		{7, "key", `key "caf\xe9" is not UTF-8 (a spreadsheet's Latin-1 or Windows-1252?); save the CSV as UTF-8`},
		{8, "key", `key "caf�" holds U+FFFD, which stands for bytes that were not UTF-8; save the CSV as UTF-8`},
	}
	if len(pv.Problems) != len(want) {
		t.Fatalf("problems %+v, want %+v", pv.Problems, want)
	}
	for i := range want {
		if pv.Problems[i] != want[i] {
			t.Errorf("problem %d = %+v, want %+v", i, pv.Problems[i], want[i])
		}
	}
	if pv.Count != 7 || len(pv.Rows) != 1 || pv.Rows[0].Key != "a" || pv.Policy != nil {
		t.Errorf("count %d rows %+v policy %d bytes", pv.Count, pv.Rows, len(pv.Policy))
	}
}

func TestPreviewPlacesTheFiltersErrorsOnTheImportedLine(t *testing.T) {
	// The filter refuses the limit 0 of line 3, reported on that line.
	pv, err := PreviewOverridesCSV([]byte(quotaDoc), "monthly", []byte("key,limit\nold,50\nnew,0\n"), false)
	if err != nil {
		t.Fatal(err)
	}
	if len(pv.Problems) != 1 || pv.Problems[0].Line != 3 || pv.Problems[0].Column != "limit" || !strings.HasPrefix(pv.Problems[0].Message, "limit: ") {
		t.Fatalf("problems %+v", pv.Problems)
	}
	pv, err = PreviewOverridesCSV([]byte(quotaDoc), "monthly", []byte("key,limit\nold,50\nnew,70000\n"), false)
	if err != nil || len(pv.Problems) != 0 {
		t.Fatalf("%v %+v", err, pv.Problems)
	}
	if pv.Stats != (MergeStats{Added: 1, Replaced: 1, Total: 2}) || !strings.Contains(string(pv.Policy), `"key": "new"`) {
		t.Errorf("stats %+v\n%s", pv.Stats, pv.Policy)
	}
	if _, err := PreviewOverridesCSV([]byte(quotaDoc), "nope", []byte("key,limit\na,1\n"), false); err == nil || !strings.Contains(err.Error(), `no rule named "nope"`) {
		t.Errorf("unknown rule: %v", err)
	}
}

func FuzzPreviewOverridesCSV(f *testing.F) {
	for _, s := range []string{
		"key,limit\na,10\nb,x\n", "key,limit\n\"a,b\",1\n", "\ufeffkey,limit,burst\na,1,2\n", "key\n", "",
		"key,limit\n\"unterminated,1\n", "key,limit\na,1,2\n", "key,max_per_period\na|b,1e300\n", "key,limit\nold,-1\n",
		"key,limit,from,until\na,5,2026-12-24T00:00:00Z,2026-12-27T00:00:00+01:00\nb,6,,2026-01-01T00:00:00.5Z\n",
		"key,limit,until,until\na,5,x,y\n", "key,limit,from,until\na,5,2026-12-27T00:00:00Z,2026-12-24T00:00:00Z\n",
	} {
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, csv string, replace bool) {
		pv, err := PreviewOverridesCSV([]byte(quotaDoc), "monthly", []byte(csv), replace)
		if err != nil {
			t.Fatalf("the rule exists; only the CSV varies: %v", err)
		}
		if (len(pv.Problems) == 0) != (pv.Policy != nil) {
			t.Fatalf("%d problems with a policy of %d bytes", len(pv.Problems), len(pv.Policy))
		}
		if len(pv.Problems) > MaxCSVProblems || len(pv.Rows) > MaxPreviewRows {
			t.Fatalf("%d problems, %d rows", len(pv.Problems), len(pv.Rows))
		}
		if pv.Policy != nil {
			if _, err := Validate(pv.Policy); err != nil {
				t.Fatalf("a previewed policy is invalid: %v", err)
			}
		}
	})
}

// The from and until columns bound when an imported override applies:
// written into the override as given, a cell that is not a time refused
// on its line and column, and a row whose until is not after its from
// refused by the filter on that row's line, in the until column.
func TestCSVFromAndUntilColumnsBoundTheOverrides(t *testing.T) {
	csv := "key,limit,from,until\nholiday,5000,2026-12-24T00:00:00Z,2026-12-27T00:00:00Z\nlaunch,3000,,2026-12-01T12:00:00+01:00\n"
	out, stats, err := MergeOverridesCSV([]byte(quotaDoc), "monthly", []byte(csv), false)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"from": "2026-12-24T00:00:00Z"`, `"until": "2026-12-27T00:00:00Z"`, `"until": "2026-12-01T12:00:00+01:00"`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("merged policy lacks %s:\n%s", want, out)
		}
	}
	if strings.Count(string(out), `"from"`) != 1 || stats.Added != 2 {
		t.Errorf("an empty from cell was written, or rows lost (%+v):\n%s", stats, out)
	}

	pv, err := PreviewOverridesCSV([]byte(quotaDoc), "monthly", []byte("key,limit,until\na,10,tomorrow\nb,10,2026-12-24\n"), false)
	if err != nil {
		t.Fatal(err)
	}
	want := []CSVProblem{
		{2, "until", `until: "tomorrow" is not an RFC 3339 time such as 2026-12-24T18:00:00Z`},
		{3, "until", `until: "2026-12-24" is not an RFC 3339 time such as 2026-12-24T18:00:00Z`},
	}
	if !slices.Equal(pv.Problems, want) {
		t.Errorf("problems %+v, want %+v", pv.Problems, want)
	}

	pv, err = PreviewOverridesCSV([]byte(quotaDoc), "monthly", []byte("key,limit,from,until\na,10,2026-12-24T00:00:00Z,2026-12-23T00:00:00Z\n"), false)
	if err != nil {
		t.Fatal(err)
	}
	if len(pv.Problems) != 1 || pv.Problems[0].Line != 2 || pv.Problems[0].Column != "until" || !strings.Contains(pv.Problems[0].Message, "must be after from") {
		t.Errorf("an until before from: %+v", pv.Problems)
	}
}
