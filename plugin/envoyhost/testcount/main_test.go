package main

import (
	"strings"
	"testing"
)

func TestCountsLeafTestsAndFailures(t *testing.T) {
	in := `{"Action":"run","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Test":"TestA/x","Output":"boom\n"}
{"Action":"fail","Package":"p","Test":"TestA/x"}
{"Action":"pass","Package":"p","Test":"TestA/y"}
{"Action":"fail","Package":"p","Test":"TestA"}
{"Action":"pass","Package":"p","Test":"TestB"}
{"Action":"skip","Package":"p","Test":"TestC"}
{"Action":"fail","Package":"p"}
{"Action":"fail","Package":"q"}
`
	var out strings.Builder
	passed, failed := count(strings.NewReader(in), &out)
	// TestA counts through its subtests; q failed outside any test.
	if passed != 2 || failed != 2 {
		t.Fatalf("passed %d, failed %d; want 2, 2\n%s", passed, failed, out.String())
	}
	if !strings.HasSuffix(out.String(), "2 passed, 2 failed (1 skipped)\n") || !strings.Contains(out.String(), "boom") {
		t.Fatalf("report:\n%s", out.String())
	}
}
