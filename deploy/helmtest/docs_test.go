package helmtest

import (
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/admin/gitops"
)

// TestDocsCommands checks every command of docs/kubernetes.md: each
// "# values: NAME" YAML block renders through the chart; helm lines name
// this chart and only value files the page defines, and their --set values
// render too; ratelimit-admin policy lines parse with the CLI's own flags
// (against no admin: only parsing is checked, so they must fail to
// connect, not on a flag); make lines name real targets; curl lines name
// a route the admin serves.
func TestDocsCommands(t *testing.T) {
	raw, err := os.ReadFile("../../docs/kubernetes.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```(yaml|sh)\n(.*?)```").FindAllStringSubmatch(string(raw), -1)
	values := map[string]string{}
	var lines []string
	for _, b := range blocks {
		if b[1] == "yaml" {
			first, _, _ := strings.Cut(b[2], "\n")
			name, ok := strings.CutPrefix(first, "# values: ")
			if !ok {
				t.Errorf("a YAML block without a '# values: NAME' first line: %q", first)
				continue
			}
			values[name] = b[2]
			if _, _, err := render(t, b[2]); err != nil {
				t.Errorf("values %s do not render: %v", name, err)
			}
			continue
		}
		for _, l := range strings.Split(strings.TrimSpace(b[2]), "\n") {
			lines = append(lines, strings.TrimSpace(l))
		}
	}
	if len(values) < 4 || len(lines) < 10 {
		t.Fatalf("found %d value files and %d commands; the page's blocks were not read", len(values), len(lines))
	}
	makefile, _ := os.ReadFile("../../Makefile")
	routes, _ := os.ReadFile("../../admin/httpapi/envoygateway.go")
	for _, l := range lines {
		f := strings.Fields(l)
		switch f[0] {
		case "helm":
			checkHelm(t, l, f, values)
		case "ratelimit-admin":
			checkPolicyCLI(t, l, f, values)
		case "make":
			if !bytes.Contains(makefile, []byte("\n"+f[1]+":")) {
				t.Errorf("%q: no make target %s", l, f[1])
			}
			if f[1] == "push" && (len(f) != 3 || !strings.HasPrefix(f[2], "REGISTRY=")) {
				t.Errorf("%q: make push takes REGISTRY=", l)
			}
		case "curl":
			path := regexp.MustCompile(`/api/v1/[a-z/]+`).FindString(l)
			if path == "" || !bytes.Contains(routes, []byte(`"GET `+path+`"`)) {
				t.Errorf("%q: the admin serves no GET %s", l, path)
			}
		case "kubectl":
			if !strings.Contains(l, "-n sluice") || !(strings.Contains(l, "svc/sluice 9000") || strings.Contains(l, "get secret sluice")) {
				t.Errorf("%q: not one of the checked kubectl commands (port-forward to the chart's Service, read its Secret)", l)
			}
		case "export":
			if !strings.Contains(l, "SLUICE_ADMIN_URL=") || !strings.Contains(l, "SLUICE_ADMIN_TOKEN=") {
				t.Errorf("%q: exports something the CLI does not read", l)
			}
		default:
			t.Errorf("%q: a command this test does not check", l)
		}
	}
}

func checkHelm(t *testing.T, l string, f []string, values map[string]string) {
	t.Helper()
	if len(f) < 4 || (f[1] != "install" && f[1] != "upgrade") {
		t.Errorf("%q: want helm install|upgrade", l)
		return
	}
	args := f[2:]
	if args[0] == "--install" {
		args = args[1:]
	}
	if args[0] != "sluice" || args[1] != "deploy/helm/sluice" {
		t.Errorf("%q: want release sluice of deploy/helm/sluice", l)
		return
	}
	var vals strings.Builder
	for i := 2; i < len(args); i++ {
		switch args[i] {
		case "--namespace", "-n":
			i++
		case "--create-namespace", "--reuse-values":
		case "-f":
			i++
			v, ok := values[args[i]]
			if !ok {
				t.Errorf("%q: the page defines no values %s", l, args[i])
			}
			vals.WriteString(v + "\n")
		case "--set":
			i++
			k, v, _ := strings.Cut(args[i], "=")
			parts := strings.Split(k, ".")
			for j, p := range parts {
				vals.WriteString(strings.Repeat("  ", j) + p + ":")
				if j < len(parts)-1 {
					vals.WriteString("\n")
				}
			}
			vals.WriteString(" " + v + "\n")
		default:
			t.Errorf("%q: flag %s not checked", l, args[i])
		}
	}
	if _, _, err := render(t, vals.String()); err != nil {
		t.Errorf("%q: %v", l, err)
	}
}

func checkPolicyCLI(t *testing.T, l string, f []string, values map[string]string) {
	t.Helper()
	if len(f) < 3 || f[1] != "policy" {
		t.Errorf("%q: want ratelimit-admin policy ...", l)
		return
	}
	args := []string{}
	for _, a := range f[2:] {
		args = append(args, strings.Trim(a, `"`))
	}
	// Quoted messages were split by Fields: join them back for -m.
	joined := strings.Join(args, " ")
	if i := strings.Index(l, `-m "`); i >= 0 {
		msg := l[i+4 : strings.Index(l[i+4:], `"`)+i+4]
		joined = strings.Replace(joined, msg, strings.ReplaceAll(msg, " ", "_"), 1)
	}
	joined, _, _ = strings.Cut(joined, " #") // a comment
	args = strings.Fields(joined)
	dir := t.TempDir()
	os.WriteFile(dir+"/policy.json", []byte(`{"rules": [{"name": "per-ip", "limit_keys": ["ip:address"], "algorithm": "token_bucket", "algorithm_config": {"rps": 5, "burst": 10}}]}`), 0o644)
	os.WriteFile(dir+"/policy.tests.yaml", []byte("tests: [{name: anything passes, expect: {status: 200}}]\n"), 0o644)
	os.WriteFile(dir+"/plans.csv", []byte("key,burst,until\n10.0.0.1,40,2027-01-01T00:00:00Z\n"), 0o644)
	wd, _ := os.Getwd()
	os.Chdir(dir)
	defer os.Chdir(wd)
	for name, body := range values { // for check -values NAME
		os.WriteFile(dir+"/"+name, []byte(body), 0o644)
	}
	var out, errb bytes.Buffer
	if args[0] == "check" { // offline: what an admin following the policy would do
		if code := gitops.Main(args, strings.NewReader(""), &out, &errb); code != gitops.ExitOK || !strings.Contains(out.String(), "would apply it") {
			t.Errorf("%q: exit %d, %q %q; want the policy applied", l, code, out.String(), errb.String())
		}
		return
	}
	if args[0] == "test" { // offline: runs the tests
		if code := gitops.Main(args, strings.NewReader(""), &out, &errb); code != gitops.ExitOK || !strings.HasPrefix(out.String(), "PASS: 1 test") {
			t.Errorf("%q: exit %d, %q %q; want the tests to run and pass", l, code, out.String(), errb.String())
		}
		return
	}
	args = append(args, "-url", "http://127.0.0.1:1", "-token", "docs-check-token-0123", "-timeout", "1s")
	code := gitops.Main(args, strings.NewReader(""), &out, &errb)
	if code != gitops.ExitError || !strings.Contains(errb.String(), "the admin at http://127.0.0.1:1") {
		t.Errorf("%q: exit %d, %q; want it to parse and then fail only to reach the admin", l, code, errb.String())
	}
}
