package policies

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/shared/policy"
)

// lcsLen is the textbook dynamic program, the reference for minimality.
func lcsLen(a, b []string) int {
	dp := make([][]int, len(a)+1)
	for i := range dp {
		dp[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				dp[i][j] = dp[i+1][j+1] + 1
			} else {
				dp[i][j] = max(dp[i+1][j], dp[i][j+1])
			}
		}
	}
	return dp[0][0]
}

func TestEditScriptRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "b", "c", "d"}
	gen := func() []string {
		n := rng.IntN(14)
		out := make([]string, n)
		for i := range out {
			out[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return out
	}
	for iter := range 3000 {
		a, b := gen(), gen()
		script := editScript(a, b)
		var gotA, gotB []string
		ctx := 0
		for _, l := range script {
			if l.Kind != Added {
				gotA = append(gotA, l.Text)
				if l.OldLine != len(gotA) {
					t.Fatalf("%d: old line number %d at position %d", iter, l.OldLine, len(gotA))
				}
			}
			if l.Kind != Removed {
				gotB = append(gotB, l.Text)
				if l.NewLine != len(gotB) {
					t.Fatalf("%d: new line number %d at position %d", iter, l.NewLine, len(gotB))
				}
			}
			if l.Kind == Context {
				ctx++
			}
		}
		if strings.Join(gotA, ",") != strings.Join(a, ",") || strings.Join(gotB, ",") != strings.Join(b, ",") {
			t.Fatalf("%d: script does not rebuild the texts: %v %v -> %v", iter, a, b, script)
		}
		if want := lcsLen(a, b); ctx != want {
			t.Fatalf("%d: %d common lines, the LCS has %d (%v vs %v)", iter, ctx, want, a, b)
		}
		// Hunks cover every change, and their headers agree with their lines.
		changes := 0
		for _, h := range hunks(script, ContextLines) {
			oldN, newN := 0, 0
			for i, l := range h.Lines {
				if l.Kind != Added {
					if oldN == 0 && l.OldLine != h.OldStart {
						t.Fatalf("%d: hunk starts at old line %d, header says %d", iter, l.OldLine, h.OldStart)
					}
					oldN++
				}
				if l.Kind != Removed {
					newN++
				}
				if l.Kind != Context {
					changes++
				}
				_ = i
			}
			if oldN != h.OldCount || newN != h.NewCount {
				t.Fatalf("%d: header %s, lines %d/%d", iter, h.Header(), oldN, newN)
			}
		}
		if want := len(a) + len(b) - 2*ctx; changes != want {
			t.Fatalf("%d: hunks hold %d changes, the script %d", iter, changes, want)
		}
	}
}

func TestUnifiedFormat(t *testing.T) {
	old := "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n"
	new := "1\n2\nthree\n4\n5\n6\n7\n8\n9\n10\n11\n12\n13\n"
	got := Unified("a", "b", LineDiff(old, new))
	want := "--- a\n+++ b\n@@ -1,6 +1,6 @@\n 1\n 2\n-3\n+three\n 4\n 5\n 6\n@@ -10,3 +10,4 @@\n 10\n 11\n 12\n+13\n"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if Unified("a", "b", LineDiff(old, old)) != "" {
		t.Error("identical texts give a diff")
	}
	if got := Unified("a", "b", LineDiff("", "x\n")); got != "--- a\n+++ b\n@@ -0,0 +1 @@\n+x\n" {
		t.Errorf("from empty:\n%s", got)
	}
}

func TestLineDiffLargeIsBounded(t *testing.T) {
	// Completely different large texts exceed maxEdits and are replaced whole.
	var a, b strings.Builder
	for i := range 5000 {
		a.WriteString("a" + strings.Repeat("x", i%7) + "\n")
		b.WriteString("b" + strings.Repeat("y", i%5) + "\n")
	}
	hs := LineDiff(a.String(), b.String())
	if len(hs) != 1 || hs[0].OldCount != 5000 || hs[0].NewCount != 5000 {
		t.Fatalf("got %d hunks", len(hs))
	}
}

func TestLocator(t *testing.T) {
	doc := `{
  "mode": "audit",
  "rules": [
    {
      "name": "free",
      "limit_keys": ["header:x-api-key"],
      "match": {"jwt:plan": 1, "path_prefix": "/a"},
      "algorithm": "token_bucket",
      "algorithm_config": {
        "tokens_per_second": 10,
        "burst": 5
      }
    },
    {"name": "free", "limit_keys": ["form:session"], "algorithm": "leaky_bucket",
     "algorithm_config": {"rps": 1}}
  ]
}`
	_, err := policy.Parse([]byte(doc))
	var es policy.Errors
	if !errors.As(err, &es) {
		t.Fatal(err)
	}
	wantLine := map[string]int{
		"mode":                            2,
		"rules[0].match[\"jwt:plan\"]":    7,
		"rules[0].algorithm_config.burst": 11,
		"rules[1].name":                   14,
		"rules[1].limit_keys[0]":          14,
		"rules[1].algorithm":              14,
		"rules[1].algorithm_config.burst": 15, // missing: the enclosing object
	}
	l := NewLocator([]byte(doc))
	checked := 0
	for _, e := range es {
		want, ok := wantLine[e.Path]
		if !ok {
			t.Errorf("unexpected error %v", e)
			continue
		}
		pos, found := l.Locate(e)
		if !found || pos.Line != want {
			t.Errorf("%s: line %d (found %v), want %d", e.Path, pos.Line, found, want)
		}
		checked++
	}
	if checked < 6 {
		t.Errorf("only %d errors checked: %v", checked, es)
	}
	// Columns count characters; the key's opening quote is the position.
	if pos, _ := l.Locate(policy.FieldError{Path: "rules[0].algorithm_config.burst"}); pos.Column != 9 {
		t.Errorf("column %d", pos.Column)
	}
	// Malformed JSON: the line and column from the message.
	bad := "{\n  \"rules\": x\n}"
	_, err = policy.Parse([]byte(bad))
	errors.As(err, &es)
	if pos, ok := NewLocator([]byte(bad)).Locate(es[0]); !ok || pos.Line != 2 || pos.Column != 12 {
		t.Errorf("syntax error at %+v %v", pos, ok)
	}
	// Root-level problems point at the document.
	if pos, ok := NewLocator([]byte("  {}")).Locate(policy.FieldError{Message: "no rules"}); !ok || pos.Line != 1 || pos.Column != 3 {
		t.Errorf("root at %+v %v", pos, ok)
	}
	// Duplicate fields point at the second occurrence.
	dup := "{\"mode\": \"shadow\",\n\"mode\": \"shadow\", \"rules\": []}"
	if pos, _ := NewLocator([]byte(dup)).Locate(policy.FieldError{Path: "mode", Message: "duplicate field \"mode\"; ..."}); pos.Line != 2 {
		t.Errorf("duplicate at line %d", pos.Line)
	}
}

func TestLocatorQuotedAndLongKeys(t *testing.T) {
	long := strings.Repeat("k", 100)
	doc := `{"rules":[{"match":{"header:X-Tier.v[1]":"a", "` + long + `": 1, "a\"b\/c": 2}}]}`
	l := NewLocator([]byte(doc))
	for key, literal := range map[string]string{"header:X-Tier.v[1]": `"header:X-Tier`, long: `"` + long, `a"b/c`: `"a\"b`} {
		path := policy.JoinPath("rules[0].match", key)
		pos, ok := l.Locate(policy.FieldError{Path: path})
		if !ok || pos.Offset != strings.Index(doc, literal) {
			t.Errorf("%s: %+v %v, want offset %d", path, pos, ok, strings.Index(doc, literal))
		}
	}
	// A missing nested path falls back to the deepest existing ancestor.
	pos, ok := l.Locate(policy.FieldError{Path: `rules[0].match["header:X-Tier.v[1]"].deeper[3].x`})
	if !ok || pos.Offset != strings.Index(doc, `"header:X-Tier`) {
		t.Errorf("fallback: %+v %v", pos, ok)
	}
}

func FuzzLocator(f *testing.F) {
	f.Add([]byte(`{"rules":[{"name":"x"}]}`), "rules[0].name")
	f.Add([]byte(`{"a":[1,2,{"b":"\u00e9"}]`), `a[2]["b"]`)
	f.Fuzz(func(t *testing.T, doc []byte, path string) {
		l := NewLocator(doc)
		pos, ok := l.Locate(policy.FieldError{Path: path, Message: "m"})
		if ok && pos.Offset >= 0 && (pos.Offset > len(doc) || pos.Line < 1 || pos.Column < 1) {
			t.Fatalf("bad position %+v for %d bytes", pos, len(doc))
		}
	})
}
