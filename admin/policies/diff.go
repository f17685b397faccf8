package policies

import (
	"fmt"
	"strings"
)

// LineKind says how a diff line relates the two texts.
type LineKind byte

const (
	Context LineKind = ' ' // in both
	Removed LineKind = '-' // only in the old text
	Added   LineKind = '+' // only in the new text
)

// DiffLine is one line of a hunk. OldLine and NewLine count from 1; the one
// that does not apply is 0.
type DiffLine struct {
	Kind    LineKind
	Text    string
	OldLine int
	NewLine int
}

// Hunk is a group of changes with up to ContextLines lines of context.
type Hunk struct {
	OldStart, OldCount int
	NewStart, NewCount int
	Lines              []DiffLine
}

// Header returns the unified diff header "@@ -a,b +c,d @@".
func (h Hunk) Header() string {
	return fmt.Sprintf("@@ -%s +%s @@", span(h.OldStart, h.OldCount), span(h.NewStart, h.NewCount))
}

func span(start, count int) string {
	if count == 1 {
		return fmt.Sprint(start)
	}
	return fmt.Sprintf("%d,%d", start, count)
}

// ContextLines is the number of unchanged lines shown around each change.
const ContextLines = 3

// maxEdits bounds the diff's work and memory: texts that differ by more
// lines than this are shown as replaced whole.
const maxEdits = 1000

// LineDiff compares two texts line by line (Myers' algorithm: a shortest
// edit script) and groups the changes into hunks.
func LineDiff(oldText, newText string) []Hunk {
	a, b := splitLines(oldText), splitLines(newText)
	return hunks(editScript(a, b), ContextLines)
}

// Unified renders hunks as a unified diff with the given file names.
func Unified(oldName, newName string, hs []Hunk) string {
	if len(hs) == 0 {
		return ""
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "--- %s\n+++ %s\n", oldName, newName)
	for _, h := range hs {
		sb.WriteString(h.Header())
		sb.WriteByte('\n')
		for _, l := range h.Lines {
			sb.WriteByte(byte(l.Kind))
			sb.WriteString(l.Text)
			sb.WriteByte('\n')
		}
	}
	return sb.String()
}

func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

// editScript returns every line of a and b in order, each marked Context,
// Removed or Added, with its line numbers.
func editScript(a, b []string) []DiffLine {
	// Common prefix and suffix are context; diff only the middle.
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	out := make([]DiffLine, 0, len(a)+len(b))
	for i := range pre {
		out = append(out, DiffLine{Kind: Context, Text: a[i], OldLine: i + 1, NewLine: i + 1})
	}
	ma, mb := a[pre:len(a)-suf], b[pre:len(b)-suf]
	for _, op := range myers(ma, mb) {
		l := DiffLine{Kind: op.kind}
		switch op.kind {
		case Context:
			l.Text, l.OldLine, l.NewLine = ma[op.i], pre+op.i+1, pre+op.j+1
		case Removed:
			l.Text, l.OldLine = ma[op.i], pre+op.i+1
		case Added:
			l.Text, l.NewLine = mb[op.j], pre+op.j+1
		}
		out = append(out, l)
	}
	for k := range suf {
		i, j := len(a)-suf+k, len(b)-suf+k
		out = append(out, DiffLine{Kind: Context, Text: a[i], OldLine: i + 1, NewLine: j + 1})
	}
	return out
}

type edit struct {
	kind LineKind
	i, j int // indexes into a and b
}

// myers computes a shortest edit script from a to b. Past maxEdits
// differences it gives up and replaces a with b whole.
func myers(a, b []string) []edit {
	n, m := len(a), len(b)
	replaceAll := func() []edit {
		out := make([]edit, 0, n+m)
		for i := range n {
			out = append(out, edit{kind: Removed, i: i})
		}
		for j := range m {
			out = append(out, edit{kind: Added, j: j})
		}
		return out
	}
	if n == 0 || m == 0 {
		return replaceAll()
	}
	maxD := min(n+m, maxEdits)
	off := maxD + 1
	v := make([]int, 2*maxD+3)
	var trace [][]int
	found := -1
	for d := 0; d <= maxD && found < 0; d++ {
		trace = append(trace, append([]int(nil), v...))
		for k := -d; k <= d; k += 2 {
			var x int
			if k == -d || (k != d && v[off+k-1] < v[off+k+1]) {
				x = v[off+k+1] // down: insertion
			} else {
				x = v[off+k-1] + 1 // right: deletion
			}
			y := x - k
			for x < n && y < m && a[x] == b[y] {
				x++
				y++
			}
			v[off+k] = x
			if x >= n && y >= m {
				found = d
				break
			}
		}
	}
	if found < 0 {
		return replaceAll()
	}
	// Walk back through the saved V arrays.
	var rev []edit
	x, y := n, m
	for d := found; d > 0; d-- {
		vp := trace[d]
		k := x - y
		var prevK int
		if k == -d || (k != d && vp[off+k-1] < vp[off+k+1]) {
			prevK = k + 1
		} else {
			prevK = k - 1
		}
		prevX := vp[off+prevK]
		prevY := prevX - prevK
		for x > prevX && y > prevY {
			x--
			y--
			rev = append(rev, edit{kind: Context, i: x, j: y})
		}
		if x == prevX {
			y--
			rev = append(rev, edit{kind: Added, j: y})
		} else {
			x--
			rev = append(rev, edit{kind: Removed, i: x})
		}
	}
	for x > 0 && y > 0 {
		x--
		y--
		rev = append(rev, edit{kind: Context, i: x, j: y})
	}
	out := make([]edit, len(rev))
	for i, e := range rev {
		out[len(rev)-1-i] = e
	}
	return out
}

// hunks groups an edit script into hunks with ctx lines of context.
func hunks(lines []DiffLine, ctx int) []Hunk {
	var out []Hunk
	i := 0
	for i < len(lines) {
		// Find the next change.
		for i < len(lines) && lines[i].Kind == Context {
			i++
		}
		if i == len(lines) {
			break
		}
		start := max(0, i-ctx)
		// Extend while the gap between changes is at most 2*ctx.
		end := i
		for end < len(lines) {
			if lines[end].Kind != Context {
				end++
				continue
			}
			g := end
			for g < len(lines) && lines[g].Kind == Context {
				g++
			}
			if g == len(lines) || g-end > 2*ctx {
				end = min(len(lines), end+ctx)
				break
			}
			end = g
		}
		h := Hunk{Lines: lines[start:end]}
		for _, l := range h.Lines {
			if l.Kind != Added {
				h.OldCount++
			}
			if l.Kind != Removed {
				h.NewCount++
			}
		}
		h.OldStart, h.NewStart = startLine(lines, start, true), startLine(lines, start, false)
		if h.OldCount == 0 {
			h.OldStart--
		}
		if h.NewCount == 0 {
			h.NewStart--
		}
		out = append(out, h)
		i = end
	}
	return out
}

// startLine is the 1-based line number in the old (or new) text at which
// lines[from:] begins.
func startLine(lines []DiffLine, from int, old bool) int {
	n := 1
	for _, l := range lines[:from] {
		if old && l.Kind != Added || !old && l.Kind != Removed {
			n++
		}
	}
	return n
}
