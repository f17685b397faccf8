package policycheck_test

import (
	"os"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/shared/policycheck"
)

const guide = "../../docs/policy-tests.md"

// block returns the fenced block of the given language after marker in
// the guide.
func block(t *testing.T, marker, lang string) string {
	t.Helper()
	b, err := os.ReadFile(guide)
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), marker+"\n```"+lang+"\n")
	if !ok {
		t.Fatalf("%s: no %s block after %s", guide, lang, marker)
	}
	body, _, _ := strings.Cut(after, "```\n")
	return body
}

// The guide's example passes against the demo policy, and the failure it
// shows is what the same tests report when the free burst becomes 6.
func TestTheGuidesExampleAndItsFailureAreCurrent(t *testing.T) {
	suite := parseSuite(t, block(t, "<!-- example: policy-tests -->", "yaml"))
	demo := readFile(t, demoConfig)
	if rep := policycheck.Run(parseConfig(t, demo), suite, policycheck.Options{}); rep.Failed() != 0 || len(rep.Tests) != 4 {
		t.Fatalf("the guide's example against the demo policy:\n%s", rep.Text(true))
	}
	burst6 := strings.Replace(demo, `"tokens_per_second": 1, "burst": 5`, `"tokens_per_second": 1, "burst": 6`, 1)
	got := policycheck.Run(parseConfig(t, burst6), suite, policycheck.Options{}).Text(false)
	if want := block(t, "<!-- output: policy-tests with a free burst of 6 -->", "text"); got != want {
		t.Fatalf("the guide shows\n%s\nthe tests report\n%s", want, got)
	}
}
