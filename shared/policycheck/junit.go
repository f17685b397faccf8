package policycheck

import (
	"encoding/xml"
	"strings"
)

// JUnit is the report as JUnit XML, which CI systems (GitLab, Jenkins,
// GitHub Actions' test reporters) show test by test: one testsuite named
// suite, a testcase per test, a failure with what differed and how the
// policy decided.
func (r Report) JUnit(suite string) []byte {
	type failure struct {
		Message string `xml:"message,attr"`
		Text    string `xml:",chardata"`
	}
	type testcase struct {
		Name      string   `xml:"name,attr"`
		Classname string   `xml:"classname,attr"`
		Failure   *failure `xml:"failure,omitempty"`
	}
	type testsuite struct {
		XMLName  xml.Name   `xml:"testsuite"`
		Name     string     `xml:"name,attr"`
		Tests    int        `xml:"tests,attr"`
		Failures int        `xml:"failures,attr"`
		Cases    []testcase `xml:"testcase"`
	}
	ts := testsuite{Name: suite, Tests: len(r.Tests), Failures: r.Failed()}
	for _, t := range r.Tests {
		tc := testcase{Name: t.Name, Classname: suite}
		if f := t.Failure; f != nil {
			var b strings.Builder
			if w := f.Where(); w != "" {
				b.WriteString(w + ":\n")
			}
			for _, m := range f.Mismatches {
				b.WriteString("  " + m + "\n")
			}
			for _, c := range f.Context {
				b.WriteString(c + "\n")
			}
			tc.Failure = &failure{Message: strings.Join(f.Mismatches, "; "), Text: b.String()}
		}
		ts.Cases = append(ts.Cases, tc)
	}
	out, err := xml.MarshalIndent(struct {
		XMLName xml.Name `xml:"testsuites"`
		Suite   testsuite
	}{Suite: ts}, "", "  ")
	if err != nil { // plain structs of strings and ints: cannot fail
		panic(err)
	}
	return append([]byte(xml.Header), append(out, '\n')...)
}
