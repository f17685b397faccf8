package migrate

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/shared/policy"
)

// notesContain checks that the notes say each of want.
func notesContain(t *testing.T, notes []string, want ...string) {
	t.Helper()
	all := strings.Join(notes, "\n")
	for _, w := range want {
		if !strings.Contains(all, w) {
			t.Errorf("the notes lack %q:\n%s", w, all)
		}
	}
}

// sameAsGuide checks that a conversion's policy is the guide's example:
// the same JSON, and the same configuration once parsed.
func sameAsGuide(t *testing.T, shown string, converted []byte) {
	t.Helper()
	var want, got any
	if err := json.Unmarshal([]byte(shown), &want); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(converted, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(want, got) {
		t.Errorf("the guide shows\n%s\nthe conversion makes\n%s", shown, converted)
	}
	wantCfg, err := policy.Parse([]byte(shown))
	if err != nil {
		t.Fatal(err)
	}
	gotCfg, err := policy.Parse(converted)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := wantCfg.MarshalJSON()
	b, _ := gotCfg.MarshalJSON()
	if string(a) != string(b) {
		t.Errorf("normalized, the guide's is\n%s\nthe conversion's\n%s", a, b)
	}
}

// parsed is a conversion of in that worked, parsed by the filter's parser.
func parsed(t *testing.T, in string, res Result, err error) (*policy.Config, Result) {
	t.Helper()
	if err != nil {
		t.Fatalf("%v\n%s", err, in)
	}
	cfg, err := policy.Parse(res.Policy)
	if err != nil {
		t.Fatalf("the policy is refused: %v\n%s", err, res.Policy)
	}
	return cfg, res
}
