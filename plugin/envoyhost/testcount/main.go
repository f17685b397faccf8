// Command testcount reads `go test -json` on stdin and ends with one line
// "N passed, N failed", counting leaf tests (a test with subtests counts
// through its subtests: each scenario, each WAMR mode). It prints the output
// of failed tests and exits 1 if anything failed, including a package that
// did not build.
//
//	go test -json ./plugin/envoyhost/... | go run ./plugin/envoyhost/testcount
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

func main() {
	if _, failed := count(os.Stdin, os.Stdout); failed > 0 {
		os.Exit(1)
	}
}

// count reads go test -json from r, writes the report to w and returns the
// counts of the summary line.
func count(r io.Reader, w io.Writer) (passed, failed int) {
	results := map[string]string{} // package \x00 test -> pass/fail/skip
	output := map[string][]string{}
	pkgFailed := map[string]bool{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			fmt.Fprintln(w, sc.Text()) // not JSON: a build error, pass it on
			continue
		}
		id := e.Package + "\x00" + e.Test
		switch e.Action {
		case "output":
			if e.Test != "" {
				output[id] = append(output[id], e.Output)
			} else if strings.HasPrefix(e.Output, "ok ") || strings.HasPrefix(e.Output, "FAIL") || strings.Contains(e.Output, "[build failed]") {
				fmt.Fprint(w, e.Output)
			}
		case "pass", "fail", "skip":
			if e.Test != "" {
				results[id] = e.Action
			} else if e.Action == "fail" {
				pkgFailed[e.Package] = true
			}
		}
	}
	var ids []string
	for id := range results {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	skipped := 0
	for _, id := range ids {
		leaf := true
		for _, other := range ids {
			if strings.HasPrefix(other, id+"/") {
				leaf = false
				break
			}
		}
		if !leaf {
			continue
		}
		switch results[id] {
		case "pass":
			passed++
		case "skip":
			skipped++
			fmt.Fprintf(w, "SKIP %s\n", strings.ReplaceAll(id, "\x00", " "))
		case "fail":
			failed++
			fmt.Fprintf(w, "--- FAIL %s\n%s", strings.ReplaceAll(id, "\x00", " "), strings.Join(output[id], ""))
		}
	}
	for pkg := range pkgFailed {
		hasFailedTest := false
		for _, id := range ids {
			if strings.HasPrefix(id, pkg+"\x00") && results[id] == "fail" {
				hasFailedTest = true
			}
		}
		if !hasFailedTest {
			failed++ // the package failed outside any test (build error, panic, timeout)
			fmt.Fprintf(w, "--- FAIL %s (outside any test)\n", pkg)
		}
	}
	line := fmt.Sprintf("%d passed, %d failed", passed, failed)
	if skipped > 0 {
		line += fmt.Sprintf(" (%d skipped)", skipped)
	}
	fmt.Fprintln(w, line)
	return passed, failed
}
