package policycheck

import (
	"fmt"
	"strings"
)

// Text is the report as `ratelimit-admin policy test` prints it: every
// failure with what differed and how the request was decided, each
// passing test and the rules no test exercises too when verbose, and a
// last line with the totals.
func (r Report) Text(verbose bool) string {
	var b strings.Builder
	requests := 0
	for _, t := range r.Tests {
		requests += t.Requests
		f := t.Failure
		if f == nil {
			if verbose {
				fmt.Fprintf(&b, "ok    %s (%d %s)\n", t.Name, t.Requests, plural(t.Requests, "request"))
			}
			continue
		}
		fmt.Fprintf(&b, "FAIL  %s (line %d)\n", t.Name, t.Line)
		if w := f.Where(); w != "" {
			fmt.Fprintf(&b, "      %s:\n", w)
		}
		for _, m := range f.Mismatches {
			fmt.Fprintf(&b, "        %s\n", m)
		}
		for _, c := range f.Context {
			fmt.Fprintf(&b, "      %s\n", c)
		}
	}
	if verbose && len(r.Unexercised) > 0 {
		them := "it"
		if len(r.Unexercised) > 1 {
			them = "them"
		}
		fmt.Fprintf(&b, "not exercised: %s (no request of the tests applies %s)\n", strings.Join(r.Unexercised, ", "), them)
	}
	if n := r.Failed(); n > 0 {
		fmt.Fprintf(&b, "FAIL: %d of %d %s failed\n", n, len(r.Tests), plural(len(r.Tests), "test"))
	} else {
		fmt.Fprintf(&b, "PASS: %d %s, %d %s\n", len(r.Tests), plural(len(r.Tests), "test"), requests, plural(requests, "request"))
	}
	return b.String()
}

// Where says which request failed: its step, line, number and time ("" for
// a failure of no step).
func (f *Failure) Where() string {
	switch {
	case f.Step == "":
		return ""
	case f.Request == 0: // names the configuration lacks: nothing was sent
		return fmt.Sprintf("%s (line %d)", f.Step, f.Line)
	}
	return fmt.Sprintf("%s (line %d), request %d of %d, at +%s", f.Step, f.Line, f.Request, f.Repeat, f.At)
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
