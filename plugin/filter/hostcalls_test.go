package filter

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
	"unsafe"
)

// TestHostCallsGoThroughHostcallsFiles: outside hostcalls*.go, the filter
// reaches the host only through the helpers of hostcalls*.go, never the
// SDK's proxywasm package directly.
func TestHostCallsGoThroughHostcallsFiles(t *testing.T) {
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") ||
			strings.HasPrefix(name, "hostcalls") {
			continue
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == "proxywasm" {
				t.Errorf("%s: proxywasm.%s called directly; add a helper to hostcalls.go", fset.Position(sel.Pos()), sel.Sel.Name)
			}
			return true
		})
	}
	if checked < 10 {
		t.Fatalf("only %d files checked; run from the package directory", checked)
	}
}

// A value the host returns lands in the spare capacity of the buffer the
// wrapper was given when it fits there, and is then taken in without a
// copy; otherwise it goes to the scratch buffer and is copied in.
func TestReturnedValuesLandInTheCallersSpareCapacity(t *testing.T) {
	var at *byte // where the host was told to write
	place := func(dst []byte, v string) []byte {
		arm(dst)
		at = allocReturned(uint32(len(v)))
		copy(unsafe.Slice(at, len(v)), v)
		hostRet.data, hostRet.size = at, uint32(len(v))
		return takeInto(dst)
	}
	buf := make([]byte, 2, 16)
	copy(buf, "ab")
	got := place(buf, "cdef")
	if string(got) != "abcdef" || at != &buf[:3][2] {
		t.Fatalf("fitting value: %q, written at %p; want abcdef written at %p, after buf's bytes", got, at, &buf[:3][2])
	}
	if scratch.armed || scratch.into != nil {
		t.Error("takeInto left the arming")
	}
	small := make([]byte, 1, 3)
	small[0] = 'x'
	got = place(small, "yzw")
	if string(got) != "xyzw" {
		t.Fatalf("value larger than the spare capacity: %q, want xyzw", got)
	}
	if at == &small[:2][1] {
		t.Error("a value that did not fit was written into the buffer")
	}
}
