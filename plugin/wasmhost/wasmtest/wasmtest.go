// Package wasmtest builds proxy-wasm test modules for tests.
//
// Build compiles a package of this module with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared
//
// once per process and package, and returns the module bytes. If the
// environment variable SLUICE_WASM_DIR names a directory holding a prebuilt
// module for the package, newer than go.mod, go.sum and every .go file of
// the package and of the packages of this module it imports, that file is
// used instead of building. The file is <base>.wasm (base = last element of
// the package path, e.g. empty.wasm for ./plugin/wasmhost/testdata/empty),
// or for ./plugin the Makefile's ratelimit.wasm.
package wasmtest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	mu     sync.Mutex
	builds = map[string]*build{}
)

type build struct {
	once sync.Once
	wasm []byte
	err  error
}

// Build returns the wasm module built from pkg, a package path relative to
// the module root ("./plugin", "./plugin/wasmhost/testdata/empty"). It builds
// at most once per process and package; concurrent callers wait for the same
// build. It fails the test with instructions when the build fails.
func Build(tb testing.TB, pkg string) []byte {
	tb.Helper()
	root, err := moduleRoot()
	if err != nil {
		tb.Fatalf("wasmtest: %v", err)
	}
	wasm, err := Load(root, pkg)
	if err != nil {
		tb.Fatalf("%v", err)
	}
	return wasm
}

// CacheDir returns a directory for wazero's on-disk compilation cache
// (wasmhost.Config.CacheDir), so that test binaries after the first skip
// compiling the modules (about a second each, much more under -race):
// $SLUICE_WAZERO_CACHE if set ("off" disables it: ""), else
// <user cache dir>/sluice/wazero, in a subdirectory per wazero version (as
// required by go.mod) and Go version: wazero keys its cache by module
// content and its own version, but cannot see that version in test binaries.
// It returns "" if no directory is usable.
func CacheDir(tb testing.TB) string {
	tb.Helper()
	dir := os.Getenv("SLUICE_WAZERO_CACHE")
	switch dir {
	case "off":
		return ""
	case "":
		base, err := os.UserCacheDir()
		if err != nil {
			return ""
		}
		dir = filepath.Join(base, "sluice", "wazero")
	}
	root, err := moduleRoot()
	if err != nil {
		return ""
	}
	dir = filepath.Join(dir, wazeroVersion(root)+"-"+runtime.Version())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Logf("wasmtest: no compilation cache: %v", err)
		return ""
	}
	return dir
}

// wazeroVersion returns the wazero version go.mod requires ("unknown").
func wazeroVersion(root string) string {
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		if len(f) >= 2 && f[0] == "github.com/tetratelabs/wazero" {
			return f[1]
		}
	}
	return "unknown"
}

// ModuleRoot returns the directory holding the go.mod of this module (found
// by walking up from the working directory).
func ModuleRoot(tb testing.TB) string {
	tb.Helper()
	root, err := moduleRoot()
	if err != nil {
		tb.Fatalf("wasmtest: %v", err)
	}
	return root
}

// Root returns the module root (the directory holding go.mod, found by
// walking up from the working directory), for callers without testing.TB.
func Root() (string, error) { return moduleRoot() }

// Load is Build without testing.TB: root is the module root, pkg a package
// path relative to it. Results (including failures) are cached per process.
func Load(root, pkg string) ([]byte, error) {
	key := root + "\x00" + pkg
	mu.Lock()
	b := builds[key]
	if b == nil {
		b = &build{}
		builds[key] = b
	}
	mu.Unlock()
	b.once.Do(func() { b.wasm, b.err = load(root, pkg) })
	return b.wasm, b.err
}

func load(root, pkg string) ([]byte, error) {
	if !strings.HasPrefix(pkg, "./") && !strings.HasPrefix(pkg, "../") && pkg != "." {
		pkg = "./" + pkg
	}
	dir := filepath.Join(root, filepath.FromSlash(pkg))
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("wasmtest: package %s not found under module root %s", pkg, root)
	}
	base := filepath.Base(dir)
	if pre := os.Getenv("SLUICE_WASM_DIR"); pre != "" {
		names := append([]string{base + ".wasm"}, prebuiltAliases[filepath.ToSlash(filepath.Clean(pkg))]...)
		for _, name := range names {
			file := filepath.Join(pre, name)
			if fresh, err := isFresh(file, root, pkg); err == nil && fresh {
				return os.ReadFile(file)
			}
		}
	}
	tmp, err := os.MkdirTemp("", "sluice-wasmtest-")
	if err != nil {
		return nil, fmt.Errorf("wasmtest: %v", err)
	}
	defer os.RemoveAll(tmp)
	out := filepath.Join(tmp, base+".wasm")
	goBin := goCommand()
	args := []string{"build", "-buildmode=c-shared", "-o", out}
	if profile := filepath.Join(root, profilePath); isFile(profile) {
		args = append(args, "-pgo="+profile) // as the Makefile builds
	}
	cmd := exec.Command(goBin, append(args, pkg)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
	var output bytes.Buffer
	cmd.Stdout = &output
	cmd.Stderr = &output
	start := time.Now()
	if err := cmd.Run(); err != nil {
		//lint:ignore ST1005 the error says what to do, in sentences.
		return nil, fmt.Errorf("wasmtest: building %s for wasip1/wasm failed (%v after %v):\n%s\n"+
			"To reproduce: cd %s && GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o /tmp/%s.wasm %s\n"+
			"Fix the build error above (the package must be `package main` with an empty main and register its "+
			"VM context in init), or prebuild it into $SLUICE_WASM_DIR/%s.wasm.",
			pkg, err, time.Since(start).Round(time.Millisecond), strings.TrimSpace(output.String()),
			root, base, pkg, base)
	}
	wasm, err := os.ReadFile(out)
	if err != nil {
		return nil, fmt.Errorf("wasmtest: reading the built module: %v", err)
	}
	return wasm, nil
}

// profilePath is the profile every module is compiled with (relative to
// the module root): the Makefile's PGO.
const profilePath = "plugin/default.pgo"

// isFile reports whether path exists.
func isFile(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// prebuiltAliases are other names the Makefile gives prebuilt modules.
var prebuiltAliases = map[string][]string{"plugin": {"ratelimit.wasm"}}

// isFresh reports whether file exists and is newer than go.mod, go.sum, the
// profile and every .go file of pkg and of the packages of this module it
// depends on (for wasip1/wasm, per go list).
func isFresh(file, root, pkg string) (bool, error) {
	st, err := os.Stat(file)
	if err != nil {
		return false, err
	}
	mod := st.ModTime()
	cmd := exec.Command(goCommand(), "list", "-deps", "-f", "{{if not .Standard}}{{.Dir}}{{end}}", pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		return false, err
	}
	check := []string{filepath.Join(root, "go.mod"), filepath.Join(root, "go.sum"), filepath.Join(root, profilePath)}
	for _, dir := range strings.Fields(string(out)) {
		if rel, err := filepath.Rel(root, dir); err != nil || strings.HasPrefix(rel, "..") {
			continue // not in this module (module cache: versioned, immutable)
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			return false, err
		}
		for _, e := range entries {
			if !e.IsDir() && strings.HasSuffix(e.Name(), ".go") {
				check = append(check, filepath.Join(dir, e.Name()))
			}
		}
	}
	for _, f := range check {
		fs, err := os.Stat(f)
		if err != nil {
			continue
		}
		if fs.ModTime().After(mod) {
			return false, nil
		}
	}
	return true, nil
}

// goCommand is the go command of PATH; go test puts its own GOROOT/bin
// first there, so tests build with the toolchain that runs them.
func goCommand() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return "go"
}

func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if isFile(filepath.Join(dir, "go.mod")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod found above the working directory; run the tests from inside the module")
		}
		dir = parent
	}
}
