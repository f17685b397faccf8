package wasmtest

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const emptyPkg = "./plugin/wasmhost/testdata/empty"

func TestBuildOnce(t *testing.T) {
	a := Build(t, emptyPkg)
	if !bytes.HasPrefix(a, []byte("\x00asm")) {
		t.Fatalf("not a wasm module: %q", a[:min(8, len(a))])
	}
	b := Build(t, "plugin/wasmhost/testdata/empty/../empty")
	if len(b) != len(a) {
		t.Fatalf("different builds: %d vs %d bytes", len(a), len(b))
	}
	if c := Build(t, emptyPkg); &c[0] != &a[0] {
		t.Fatal("the second Build did not reuse the first")
	}
}

func TestPrebuiltDir(t *testing.T) {
	root := ModuleRoot(t)
	dir := t.TempDir()
	t.Setenv("SLUICE_WASM_DIR", dir)
	fake := []byte("\x00asm-prebuilt")
	file := filepath.Join(dir, "empty.wasm")
	if err := os.WriteFile(file, fake, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := load(root, emptyPkg)
	if err != nil || !bytes.Equal(got, fake) {
		t.Fatalf("fresh prebuilt file not used: %q %v", got, err)
	}
	// Older than the sources: rebuilt.
	old := time.Unix(1000, 0)
	if err := os.Chtimes(file, old, old); err != nil {
		t.Fatal(err)
	}
	got, err = load(root, emptyPkg)
	if err != nil || bytes.Equal(got, fake) || !bytes.HasPrefix(got, []byte("\x00asm")) {
		t.Fatalf("stale prebuilt file used: %q %v", got[:min(16, len(got))], err)
	}
}

func TestBuildErrors(t *testing.T) {
	root := ModuleRoot(t)
	if _, err := load(root, "./no/such/package"); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("missing package: %v", err)
	}
	_, err := load(root, "./plugin/wasmhost/wasmtest") // not a main package
	if err == nil || !strings.Contains(err.Error(), "To reproduce") || !strings.Contains(err.Error(), "SLUICE_WASM_DIR") {
		t.Fatalf("build failure: %v", err)
	}
}

func TestCacheDir(t *testing.T) {
	t.Setenv("SLUICE_WAZERO_CACHE", "off")
	if d := CacheDir(t); d != "" {
		t.Fatalf("off: %q", d)
	}
	base := t.TempDir()
	t.Setenv("SLUICE_WAZERO_CACHE", base)
	d := CacheDir(t)
	if !strings.HasPrefix(d, base) || !strings.Contains(d, "v1.") {
		t.Fatalf("cache dir %q: want a per-version directory under %s", d, base)
	}
	if st, err := os.Stat(d); err != nil || !st.IsDir() {
		t.Fatalf("not created: %v", err)
	}
}

// TestPrebuiltFreshnessFollowsDeps: freshness is judged against the
// package's dependencies in this module (go list), and go.mod.
func TestPrebuiltFreshnessFollowsDeps(t *testing.T) {
	root := ModuleRoot(t)
	file := filepath.Join(t.TempDir(), "probe.wasm")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if fresh, err := isFresh(file, root, "./plugin/wasmhost/testdata/probe"); err != nil || !fresh {
		t.Fatalf("new file: fresh=%v err=%v", fresh, err)
	}
	// Older than go.mod: stale.
	old := time.Unix(1000, 0)
	os.Chtimes(file, old, old)
	if fresh, _ := isFresh(file, root, "./plugin/wasmhost/testdata/probe"); fresh {
		t.Fatal("a file older than the sources counted as fresh")
	}
}
