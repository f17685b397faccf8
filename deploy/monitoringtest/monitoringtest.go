// Package monitoringtest reads the alerting rules and the Grafana
// dashboard the Helm chart ships (deploy/helm/sluice/files), for the tests
// that check them with promtool and against a running stack.
package monitoringtest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/sluice-rl/sluice/admin/fleet/fleettest"
)

// Dir is the directory of the shipped files.
func Dir() string {
	_, here, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(here), "..", "helm", "sluice", "files")
}

// AlertsFile and DashboardFile are the shipped files' paths.
func AlertsFile() string    { return filepath.Join(Dir(), "alerts.yaml") }
func DashboardFile() string { return filepath.Join(Dir(), "dashboard.json") }

// Promtool and Prometheus return the paths of Debian's prometheus package's
// binaries, or skip the test (fail it under CI=true) when they are missing.
func Promtool(t testing.TB) string {
	return fleettest.Require(t, "promtool", "apt-get install prometheus")
}

func Prometheus(t testing.TB) string {
	return fleettest.Require(t, "prometheus", "apt-get install prometheus")
}

// Alert is one alerting rule of the rules file.
type Alert struct {
	Name string `json:"alert"`
	Expr string `json:"expr"`
	For  string `json:"for"`
}

// Alerts reads the rules file's alerts.
func Alerts(t testing.TB) []Alert {
	t.Helper()
	raw, err := os.ReadFile(AlertsFile())
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Rules []Alert `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(raw, &file); err != nil {
		t.Fatalf("%s: %v", AlertsFile(), err)
	}
	var out []Alert
	for _, g := range file.Groups {
		out = append(out, g.Rules...)
	}
	return out
}

// Panel is one dashboard panel with its queries.
type Panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	GridPos struct{ H, W, X, Y int } `json:"gridPos"`
}

// Dashboard is the part of the dashboard the tests read.
type Dashboard struct {
	UID         string  `json:"uid"`
	Title       string  `json:"title"`
	Panels      []Panel `json:"panels"`
	Annotations struct {
		List []struct {
			Name string `json:"name"`
			Expr string `json:"expr"`
		} `json:"list"`
	} `json:"annotations"`
	Templating struct {
		List []struct {
			Name     string `json:"name"`
			Type     string `json:"type"`
			Query    any    `json:"query"`
			AllValue string `json:"allValue"`
		} `json:"list"`
	} `json:"templating"`
}

// ReadDashboard reads the shipped dashboard.
func ReadDashboard(t testing.TB) Dashboard {
	t.Helper()
	raw, err := os.ReadFile(DashboardFile())
	if err != nil {
		t.Fatal(err)
	}
	var d Dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", DashboardFile(), err)
	}
	return d
}

// Query is one panel query as Prometheus would receive it from Grafana
// with every variable at "All".
type Query struct {
	Panel, Expr string
}

// Queries returns every panel and annotation query, its Grafana variables
// replaced:
// $rule and $node by their "All" value, $__rate_interval by rateInterval.
func (d Dashboard) Queries(rateInterval string) []Query {
	var out []Query
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			expr := strings.NewReplacer("$__rate_interval", rateInterval, "$rule", ".*", "$node", ".*").Replace(tg.Expr)
			out = append(out, Query{Panel: p.Title + " " + tg.RefID, Expr: expr})
		}
	}
	for _, a := range d.Annotations.List {
		out = append(out, Query{Panel: "annotation " + a.Name, Expr: a.Expr})
	}
	return out
}

var metricName = regexp.MustCompile(`\bsluice_[a-z_]+\b`)

// MetricNames returns the sluice_* metric names an expression reads, with
// a histogram's _bucket suffix taken off.
func MetricNames(expr string) []string {
	seen := map[string]bool{}
	for _, n := range metricName.FindAllString(expr, -1) {
		seen[strings.TrimSuffix(n, "_bucket")] = true
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
