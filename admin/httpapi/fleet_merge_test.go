package httpapi

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/admin/fleet"
	"github.com/sluice-rl/sluice/admin/policies"
	"github.com/sluice-rl/sluice/admin/telemetry"
)

// fleetPolicy has one global rule and says what plugins do with the
// backend down.
const fleetPolicy = `{"fleet": {"cluster": "sluice_rls", "on_backend_down": "%s"},
  "rules": [{"name": "api-global", "scope": "global", "limit_keys": ["header:x-k"],
             "algorithm": "token_bucket", "algorithm_config": {"tokens_per_second": 10, "burst": 20}}]}`

// fleetEnv is an admin with telemetry, fleetPolicy saved as v2 (with mode
// on_backend_down), and optionally an RLS (ov).
type fleetEnv struct {
	*env
	state *telemetry.State
	hash  string // config_hash of v2
	now   time.Time
}

func newFleetEnv(t *testing.T, mode string, ov *fleet.Overview) *fleetEnv {
	t.Helper()
	idx := telemetry.NewVersionIndex(nil, nil)
	st := telemetry.NewState(telemetry.Options{Versions: idx})
	e := newEnv(t, func(c *Config) {
		c.Telemetry = &Telemetry{State: st, Tokens: &fakeTokens{tok: telToken}, Metrics: telemetry.NewMetrics(st)}
		if ov != nil {
			c.Fleet = fakeFleet{*ov}
		}
	})
	v, err := e.svc.Save(context.Background(), policies.SaveRequest{Base: 1, JSON: []byte(strings.Replace(fleetPolicy, "%s", mode, 1))})
	if err != nil {
		t.Fatal(err)
	}
	idx.Add(v.Number, v.JSON)
	return &fleetEnv{env: e, state: st, hash: telemetry.ConfigHash(v.JSON), now: time.Now()}
}

// report ingests a report of node with the given fleet view.
func (fe *fleetEnv) report(node string, seq uint64, f *telemetry.Fleet) {
	var rules []telemetry.RuleCounters
	if f != nil {
		for _, r := range f.Rules {
			rules = append(rules, telemetry.RuleCounters{Rule: r.Rule, Allowed: seq})
		}
	}
	start := fe.now.Add(-time.Minute).UnixMilli()
	fe.state.Ingest(&telemetry.Report{V: 1, Node: node, VM: "vm1", VMStartMS: start, Seq: seq,
		SentAtMS: fe.now.UnixMilli(), IntervalMS: 1000, ConfigHash: fe.hash, Rules: rules, Fleet: f}, fe.now)
}

func (fe *fleetEnv) page(t *testing.T) string {
	t.Helper()
	return get(t, login(t, fe.env, "ops"), fe.srv.URL+"/dashboard?fragment=1")
}

// nodeRow returns the Global rules table row of node in rule's card.
func nodeRow(t *testing.T, page, rule, node string) string {
	t.Helper()
	card := regexp.MustCompile(`(?s)<article class="fleet-rule[^"]*" data-rule="` + regexp.QuoteMeta(rule) + `".*?</article>`).FindString(page)
	row := regexp.MustCompile(`(?s)<tr data-node="` + regexp.QuoteMeta(node) + `".*?</tr>`).FindString(card)
	if row == "" {
		t.Fatalf("no row for node %q in rule %q:\n%s", node, rule, card)
	}
	return row
}

func rlsOverview(now time.Time) *fleet.Overview {
	return &fleet.Overview{
		Backend: "redis 127.0.0.1:6379",
		Health:  fleet.Health{Up: true, Checked: now, Latency: 400 * time.Microsecond},
		Nodes:   2,
		Rules: []fleet.RuleOverview{{Name: "api-global", Limit: fleet.Limit{Rate: 10, Burst: 20}, Known: true,
			Usage: []fleet.RuleUsage{{Domain: "sluice", Rule: "api-global", GrantedPerSecond: 9.5,
				Nodes: []fleet.NodeUsage{
					{Node: "edge-1", LastLease: 25, Granted: 95, LastSeen: now},
					{Node: "edge-3", LastLease: 4, Granted: 4, LastSeen: now}, // no fleet telemetry from edge-3
				}}}}},
	}
}

// Both views: per node the lease held (telemetry) next to the last grant
// (RLS); the node in fallback is highlighted with its mode; the backend's
// health from both sides; fleet-wide sums.
func TestGlobalRulesMergesRLSAndTelemetry(t *testing.T) {
	fe := newFleetEnv(t, "local_share", rlsOverview(time.Now()))
	fe.report("edge-1", 1, &telemetry.Fleet{BackendHealthy: true, FleetSize: 2,
		Rules: []telemetry.FleetRule{{Rule: "api-global", LeaseTokens: 12.5, Pools: 3}}})
	fe.report("edge-2", 1, &telemetry.Fleet{BackendHealthy: false, FleetSize: 2,
		Rules: []telemetry.FleetRule{{Rule: "api-global", LeaseTokens: 2, Pools: 1, FallbackActive: true}}})
	page := fe.page(t)

	for _, want := range []string{
		`data-rls="true" data-telemetry="true"`, `data-health="up"`, `redis 127.0.0.1:6379`,
		`2 nodes in fleet mode`, `data-nodes-down="1"`, `data-nodes-fallback="1"`,
		`<article class="fleet-rule has-fallback" data-rule="api-global" data-domain="sluice"`,
		`<b>9.5/s</b> granted`, `data-leased="14.5"`, `data-fallback-nodes="1"`,
		`<th>Backend (node`, `<th class="num">Last grant</th>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the Global rules section lacks %s", want)
		}
	}
	r1 := nodeRow(t, page, "api-global", "edge-1")
	for _, want := range []string{`data-fallback="false"`, `12.5 in 3 pools`, `leasing`, `<span class="badge ok">up</span>`, `<td class="num">25</td>`, `<td class="num">95</td>`} {
		if !strings.Contains(r1, want) {
			t.Errorf("edge-1's row lacks %s:\n%s", want, r1)
		}
	}
	r2 := nodeRow(t, page, "api-global", "edge-2")
	for _, want := range []string{`data-fallback="true" class="fallback"`, `2 in 1 pool`,
		`fallback: local share (1/2 of the limit)`, `<span class="badge error">down</span>`, `no call in the last minute`} {
		if !strings.Contains(r2, want) {
			t.Errorf("edge-2's row lacks %s:\n%s", want, r2)
		}
	}
	r3 := nodeRow(t, page, "api-global", "edge-3") // RLS only
	if !strings.Contains(r3, `<td class="num held">—</td>`) || !strings.Contains(r3, `<td class="num">4</td>`) || !strings.Contains(r3, `data-fallback="false"`) || strings.Contains(r3, "fallback:") {
		t.Errorf("edge-3 (no fleet telemetry) row:\n%s", r3)
	}
	if strings.Index(page, `data-node="edge-1"`) > strings.Index(page, `data-node="edge-2"`) ||
		strings.Index(page, `data-node="edge-2"`) > strings.Index(page, `data-node="edge-3"`) {
		t.Error("nodes are not sorted")
	}
}

// The fallback's mode comes from the policy version the node runs.
func TestGlobalRulesFallbackModes(t *testing.T) {
	for mode, want := range map[string]string{"allow": "fallback: allow", "deny": "fallback: deny"} {
		fe := newFleetEnv(t, mode, nil)
		fe.report("edge-1", 1, &telemetry.Fleet{BackendHealthy: false, FleetSize: 1,
			Rules: []telemetry.FleetRule{{Rule: "api-global", FallbackActive: true}}})
		if row := nodeRow(t, fe.page(t), "api-global", "edge-1"); !strings.Contains(row, want) {
			t.Errorf("%s: row lacks %q:\n%s", mode, want, row)
		}
	}
	// A node on a configuration the admin never saved: in fallback, mode
	// unknown.
	fe := newFleetEnv(t, "deny", nil)
	fe.hash = "00000000000000ff"
	fe.report("edge-9", 1, &telemetry.Fleet{BackendHealthy: false, FleetSize: 1,
		Rules: []telemetry.FleetRule{{Rule: "api-global", FallbackActive: true}}})
	if row := nodeRow(t, fe.page(t), "api-global", "edge-9"); !strings.Contains(row, "fallback: mode unknown") {
		t.Errorf("unsaved configuration: %s", row)
	}
}

// No RLS in this admin (a third-party RLS such as envoyproxy/ratelimit):
// the nodes' view alone, rules and limits from the current policy, no
// Redis health, no RLS columns.
func TestGlobalRulesTelemetryOnly(t *testing.T) {
	fe := newFleetEnv(t, "local_share", nil)
	fe.report("edge-1", 1, &telemetry.Fleet{BackendHealthy: true, FleetSize: 3,
		Rules: []telemetry.FleetRule{{Rule: "api-global", LeaseTokens: 7, Pools: 2}}})
	page := fe.page(t)
	for _, want := range []string{`data-rls="false" data-telemetry="true"`, `<h2>Global rules</h2>`,
		`rate limit service: not this admin`, `data-rule="api-global"`, `10/s, burst 20`, `data-leased="7"`, `7 in 2 pools`} {
		if !strings.Contains(page, want) {
			t.Errorf("telemetry-only section lacks %s", want)
		}
	}
	for _, bad := range []string{`data-health=`, `Last grant`, `granted</span>`, `Redis`} {
		if strings.Contains(page, bad) {
			t.Errorf("telemetry-only section shows RLS data: %s", bad)
		}
	}
	// The JSON API carries the nodes' fleet views.
	_, body := fe.apiJSON(t, "GET", "/api/v1/telemetry", "")
	views, _ := body["fleet"].([]any)
	if len(views) != 1 {
		t.Fatalf("/api/v1/telemetry fleet = %v", body["fleet"])
	}
	v := views[0].(map[string]any)
	rules := v["rules"].([]any)
	if v["node"] != "edge-1" || v["backend_healthy"] != true || v["fleet_size"] != 3.0 || v["version"] != 2.0 ||
		rules[0].(map[string]any)["lease_tokens"] != 7.0 {
		t.Errorf("fleet view %v", v)
	}
}

// Nodes without fleet telemetry: the RLS's view alone, no telemetry
// columns, and a note saying why.
func TestGlobalRulesRLSOnly(t *testing.T) {
	fe := newFleetEnv(t, "local_share", rlsOverview(time.Now()))
	fe.report("edge-1", 1, nil) // reports, but no fleet object
	page := fe.page(t)
	for _, want := range []string{`data-rls="true" data-telemetry="false"`, `No node reports its fleet view`,
		`<b>9.5/s</b> granted`, `<th class="num">Last grant</th>`} {
		if !strings.Contains(page, want) {
			t.Errorf("RLS-only section lacks %s", want)
		}
	}
	for _, bad := range []string{`Lease held`, `data-fallback="true"`, `leased now`, `Backend (node`} {
		if strings.Contains(page, bad) {
			t.Errorf("RLS-only section shows telemetry columns: %s", bad)
		}
	}
}

// A stale node is shown (marked) but left out of the sums.
func TestGlobalRulesStaleNode(t *testing.T) {
	fe := newFleetEnv(t, "local_share", nil)
	fe.now = time.Now().Add(-time.Minute)
	fe.report("edge-old", 1, &telemetry.Fleet{BackendHealthy: false, FleetSize: 1,
		Rules: []telemetry.FleetRule{{Rule: "api-global", LeaseTokens: 50, Pools: 1, FallbackActive: true}}})
	fe.now = time.Now()
	fe.report("edge-new", 1, &telemetry.Fleet{BackendHealthy: true, FleetSize: 1,
		Rules: []telemetry.FleetRule{{Rule: "api-global", LeaseTokens: 5, Pools: 1}}})
	page := fe.page(t)
	if !strings.Contains(page, `data-leased="5"`) || strings.Contains(page, `data-nodes-fallback`) || !strings.Contains(page, `data-nodes-down="0"`) {
		t.Error("a stale node counts in the sums")
	}
	if row := nodeRow(t, page, "api-global", "edge-old"); !strings.Contains(row, `class="fallback stale"`) || !strings.Contains(row, `badge warn">stale`) {
		t.Errorf("stale row:\n%s", row)
	}
}

// Node ids and rule names come from the network: escaped everywhere,
// control characters shown.
func TestGlobalRulesEscaping(t *testing.T) {
	now := time.Now()
	ov := rlsOverview(now)
	hostileRule := `<img src=x onerror="alert(1)">`
	ov.Rules = append(ov.Rules, fleet.RuleOverview{Name: hostileRule, Usage: []fleet.RuleUsage{{Domain: "<b>d</b>", Rule: hostileRule,
		Nodes: []fleet.NodeUsage{{Node: "<script>alert(2)</script>\x07", LastSeen: now}}}}})
	fe := newFleetEnv(t, "local_share", ov)
	hostileNode := `"><script>alert(3)</script>`
	fe.report(hostileNode, 1, &telemetry.Fleet{BackendHealthy: false, FleetSize: 1,
		Rules: []telemetry.FleetRule{{Rule: "api-global", FallbackActive: true}}})
	page := fe.page(t)
	for _, bad := range []string{"<script>", "<img", "<b>d</b>"} {
		if strings.Contains(page, bad) {
			t.Errorf("unescaped %s in the page", bad)
		}
	}
	for _, want := range []string{`&lt;img src=x onerror=&#34;alert(1)&#34;&gt;`, `&lt;script&gt;alert(2)&lt;/script&gt;\a`,
		`data-node="&#34;&gt;&lt;script&gt;alert(3)&lt;/script&gt;"`, `<code>&#34;&gt;&lt;script&gt;alert(3)&lt;/script&gt;</code>`, `&lt;b&gt;d&lt;/b&gt;`} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks the escaped %s", want)
		}
	}
}
