// Package layering checks that imports run the way docs/architecture.md
// says: plugin → shared ← admin → web, with nothing in plugin/ (tests
// included) importing admin/, and the admin's lower packages not importing
// the ones above them.
package layering

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/sluice-rl/sluice/"

// deps lists every package in the import graph of patterns, test imports
// included.
func deps(t *testing.T, patterns ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-deps", "-test", "-f", "{{.ImportPath}}"}, patterns...)...)
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v", patterns, err)
	}
	return strings.Fields(string(out))
}

// direct maps each package matched by patterns to its imports, test
// imports included.
func direct(t *testing.T, patterns ...string) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-f", "{{.ImportPath}} {{join .Imports \" \"}} {{join .TestImports \" \"}} {{join .XTestImports \" \"}}"}, patterns...)...)
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v", patterns, err)
	}
	m := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		m[f[0]] = f[1:]
	}
	return m
}

// ours strips the module path from a package path ("" for other modules'
// packages and for test variants' decorations).
func ours(p string) string {
	p, _, _ = strings.Cut(p, " ") // "pkg [pkg.test]"
	p = strings.TrimSuffix(p, ".test")
	if rest, ok := strings.CutPrefix(p, module); ok {
		return rest
	}
	return ""
}

func TestSideImportsNothingAbove(t *testing.T) {
	for _, tc := range []struct {
		side      string
		forbidden []string
	}{
		{"plugin", []string{"admin", "web"}},
		{"shared", []string{"plugin", "admin", "web"}},
	} {
		for _, p := range deps(t, "./"+tc.side+"/...") {
			p = ours(p)
			for _, f := range tc.forbidden {
				if p == f || strings.HasPrefix(p, f+"/") {
					t.Errorf("%s/ (tests included) depends on %s: %s must not import %s/", tc.side, p, tc.side, f)
				}
			}
		}
	}
}

// TestAdminLowerPackagesDoNotImportUpward: the admin's packages that the
// HTTP API and main wire together do not import them back, and the HTTP API
// reaches the fleet backends only through admin/fleet.
func TestAdminLowerPackagesDoNotImportUpward(t *testing.T) {
	wrong := map[string][]string{
		"admin/xds":       {"admin/httpapi"},
		"admin/telemetry": {"admin/auth", "admin/httpapi"},
		"admin/fleet":     {"admin/httpapi"},
		"admin/policies":  {"admin/httpapi", "admin/xds"},
		"admin/store":     {"admin/httpapi", "admin/auth", "admin/telemetry"},
		"admin/httpapi":   {"admin/fleet/redisgcra", "admin/fleet/pggcra"},
	}
	imports := direct(t, "./admin/...")
	if len(imports) < len(wrong) {
		t.Fatalf("go list found %d admin packages", len(imports))
	}
	for pkg, imps := range imports {
		from := ours(pkg)
		for _, imp := range imps {
			for _, bad := range wrong[from] {
				if ours(imp) == bad {
					t.Errorf("%s imports %s", from, bad)
				}
			}
		}
	}
}
