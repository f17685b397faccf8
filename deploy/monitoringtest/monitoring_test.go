package monitoringtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestAlertRulesPassPromtoolAndTheirUnitTests: the rules file is valid
// for Prometheus, and promtool's unit tests (testdata/alerts_test.yaml)
// pass: each alert fires on its problem after its "for", with its labels
// and texts, and not on the healthy series beside it.
func TestAlertRulesPassPromtoolAndTheirUnitTests(t *testing.T) {
	promtool := Promtool(t)
	run(t, promtool, "check", "rules", AlertsFile())
	run(t, promtool, "test", "rules", filepath.Join("testdata", "alerts_test.yaml"))
}

// TestEveryAlertIsTestedAndDocumented: each alert has a firing case in the
// unit tests and a section in docs/monitoring.md, which its runbook_url
// names.
func TestEveryAlertIsTestedAndDocumented(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "alerts_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string           `json:"alertname"`
				ExpAlerts []map[string]any `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(raw, &tests); err != nil {
		t.Fatal(err)
	}
	fires := map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			}
		}
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "monitoring.md"))
	if err != nil {
		t.Fatal(err)
	}
	alerts := Alerts(t)
	if len(alerts) == 0 {
		t.Fatal("no alerts read")
	}
	for _, a := range alerts {
		if !fires[a.Name] {
			t.Errorf("alert %s has no unit test where it fires", a.Name)
		}
		if !regexp.MustCompile(`(?m)^### ` + a.Name + `$`).Match(doc) {
			t.Errorf("docs/monitoring.md has no section %q for alert %s (its runbook_url points there)", "### "+a.Name, a.Name)
		}
	}
}

// TestDashboardQueriesAreValidPromQL: every panel query, its variables
// replaced as Grafana does, parses (promtool checks it as a recording rule).
func TestDashboardQueriesAreValidPromQL(t *testing.T) {
	promtool := Promtool(t)
	var b strings.Builder
	b.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	queries := ReadDashboard(t).Queries("5m")
	if len(queries) < 10 {
		t.Fatalf("%d dashboard queries", len(queries))
	}
	for i, q := range queries {
		fmt.Fprintf(&b, "      - record: dashboard:query:%d # %s\n        expr: %q\n", i, q.Panel, q.Expr)
	}
	file := filepath.Join(t.TempDir(), "dashboard-queries.yaml")
	if err := os.WriteFile(file, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	run(t, promtool, "check", "rules", file)
}

// TestDashboardIsWellFormed: unique panel ids; every query panel on the
// data source variable; the variables the queries use are defined, with an
// "All" that matches everything; no two panels overlap.
func TestDashboardIsWellFormed(t *testing.T) {
	d := ReadDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("uid %q title %q", d.UID, d.Title)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.AllValue
	}
	if _, ok := vars["datasource"]; !ok {
		t.Error("no datasource variable")
	}
	for _, name := range []string{"rule", "node"} {
		if vars[name] != ".*" {
			t.Errorf("variable %s: All is %q, want .* (a regex matching every value)", name, vars[name])
		}
	}
	used := regexp.MustCompile(`\$([a-z_]+)`)
	ids := map[int]string{}
	cells := map[[2]int]string{}
	for _, p := range d.Panels {
		if other, dup := ids[p.ID]; dup {
			t.Errorf("panels %q and %q share id %d", other, p.Title, p.ID)
		}
		ids[p.ID] = p.Title
		for x := p.GridPos.X; x < p.GridPos.X+p.GridPos.W; x++ {
			for y := p.GridPos.Y; y < p.GridPos.Y+p.GridPos.H; y++ {
				if other, taken := cells[[2]int{x, y}]; taken {
					t.Fatalf("panels %q and %q overlap at %d,%d", other, p.Title, x, y)
				}
				cells[[2]int{x, y}] = p.Title
			}
		}
		if p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q is wider than the grid", p.Title)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource.UID != "${datasource}" || len(p.Targets) == 0 {
			t.Errorf("panel %q: data source %+v, %d queries", p.Title, p.Datasource, len(p.Targets))
		}
		for _, tg := range p.Targets {
			for _, m := range used.FindAllStringSubmatch(tg.Expr, -1) {
				if _, ok := vars[m[1]]; !ok && m[1] != "__rate_interval" {
					t.Errorf("panel %q uses $%s, which the dashboard does not define", p.Title, m[1])
				}
			}
		}
	}
}

func run(t *testing.T, bin string, args ...string) {
	t.Helper()
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
	}
}
