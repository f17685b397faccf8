package httpapi

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/admin/fleet"
	"github.com/sluice-rl/sluice/admin/telemetry"
)

type fakeFleet struct{ ov fleet.Overview }

func (f fakeFleet) Overview() fleet.Overview { return f.ov }

func TestDashboardGlobalRules(t *testing.T) {
	now := time.Now()
	ov := fleet.Overview{
		Backend: "redis 127.0.0.1:6379",
		Health:  fleet.Health{Up: false, Checked: now, LastError: "dial tcp: <refused>", ErrorAt: now, Errors: 3},
		Nodes:   2,
		Rules: []fleet.RuleOverview{
			{Name: "api-global", Limit: fleet.Limit{Rate: 10, Burst: 20}, Known: true, Usage: []fleet.RuleUsage{{
				Domain: "sluice", Rule: "api-global", GrantedPerSecond: 12.5, DeniedPerSecond: 0.5, ReturnedPerSecond: 1,
				Nodes: []fleet.NodeUsage{
					{Node: "envoy-1", LastLease: 25, Granted: 100, Returned: 10, LastSeen: now},
					{Node: "<script>x</script>\x07", LastLease: 5, Granted: 25, LastSeen: now},
				},
			}}},
			{Name: "idle-global", Limit: fleet.Limit{Rate: 0.5, Burst: 3}, Known: true, Overrides: 2},
		},
	}
	e := newEnv(t, func(c *Config) {
		st := telemetry.NewState(telemetry.Options{})
		c.Telemetry = &Telemetry{State: st, Tokens: &fakeTokens{tok: telToken}, Metrics: telemetry.NewMetrics(st)}
		c.Fleet = fakeFleet{ov}
	})
	c := login(t, e, "ops")
	page := get(t, c, e.srv.URL+"/dashboard?fragment=1")
	for _, want := range []string{
		`id="fleet"`, `<h2>Global rules</h2>`, `data-health="down"`, `redis 127.0.0.1:6379`,
		`dial tcp: &lt;refused&gt;`, `3 since start`, `2 nodes in the last 30 s`,
		`data-rule="api-global" data-domain="sluice"`, `10/s, burst 20`, `<b>12.5/s</b> granted`,
		`data-node="envoy-1"`, `<td class="num">25</td>`,
		`&lt;script&gt;x&lt;/script&gt;\a`, // escaped, control character shown as \a
		`data-rule="idle-global"`, `0.5/s, burst 3; 2 overrides`, `No lease in the last minute.`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the Global rules section lacks %s", want)
		}
	}
	if strings.Contains(page, "<script>x") {
		t.Error("a node id was not escaped")
	}
}

func TestDashboardWithoutFleetHasNoGlobalRules(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		st := telemetry.NewState(telemetry.Options{})
		c.Telemetry = &Telemetry{State: st, Tokens: &fakeTokens{tok: telToken}, Metrics: telemetry.NewMetrics(st)}
	})
	c := login(t, e, "ops")
	if page := get(t, c, e.srv.URL+"/dashboard?fragment=1"); strings.Contains(page, "Global rules") {
		t.Error("the dashboard shows Global rules with fleet mode off")
	}
}

// A rule whose pools were charged response costs shows what was charged,
// per second and per node, and the clients the service blocked; a rule
// without charges or blocks shows neither.
func TestDashboardGlobalRulesShowResponseChargesAndBlocks(t *testing.T) {
	now := time.Now()
	ov := fleet.Overview{
		Backend: "redis 127.0.0.1:6379", Health: fleet.Health{Up: true, Checked: now}, Nodes: 1,
		Rules: []fleet.RuleOverview{
			{Name: "llm-tokens", Limit: fleet.Limit{Rate: 100, Burst: 60000}, Known: true, Usage: []fleet.RuleUsage{{
				Domain: "sluice", Rule: "llm-tokens", GrantedPerSecond: 50, ChargedPerSecond: 240,
				Nodes: []fleet.NodeUsage{{Node: "envoy-1", LastLease: 500, Granted: 500, Charged: 2400, Blocked: 2, LastSeen: now},
					{Node: "envoy-2", LastLease: 500, Granted: 500, Blocked: 1, LastSeen: now}},
			}}},
			{Name: "api-global", Limit: fleet.Limit{Rate: 10, Burst: 20}, Known: true, Usage: []fleet.RuleUsage{{
				Domain: "sluice", Rule: "api-global", GrantedPerSecond: 1,
				Nodes: []fleet.NodeUsage{{Node: "envoy-1", LastLease: 10, Granted: 10, LastSeen: now}},
			}}},
		},
	}
	e := newEnv(t, func(c *Config) {
		st := telemetry.NewState(telemetry.Options{})
		c.Telemetry = &Telemetry{State: st, Tokens: &fakeTokens{tok: telToken}, Metrics: telemetry.NewMetrics(st)}
		c.Fleet = fakeFleet{ov}
	})
	page := get(t, login(t, e, "ops"), e.srv.URL+"/dashboard?fragment=1")
	llm, api, ok := strings.Cut(page[strings.Index(page, `data-rule="llm-tokens"`):], `data-rule="api-global"`)
	if !ok {
		t.Fatal("the two rules are not on the page in order")
	}
	for _, want := range []string{`<b>240/s</b> charged from responses`, `Charged (10 s)`, `<td class="num charged">2,400</td>`,
		`<b>3 clients</b> blocked (10 s)`} {
		if !strings.Contains(llm, want) {
			t.Errorf("the charged rule lacks %s", want)
		}
	}
	if strings.Contains(api, "Charged") || strings.Contains(api, "charged from responses") {
		t.Error("a rule without charges shows a charged column")
	}
	if strings.Contains(api, "blocked (10 s)") {
		t.Error("a rule without blocks shows blocks")
	}
}
