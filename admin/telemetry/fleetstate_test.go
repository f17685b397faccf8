package telemetry

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// fleetRep is a report of a node with global rules.
func fleetRep(node, vm string, seq uint64, healthy bool, rules ...FleetRule) *Report {
	var counters []RuleCounters
	for _, r := range rules {
		counters = append(counters, rc(r.Rule, seq, 0, 0, 0))
	}
	r := rep(node, vm, t0.UnixMilli(), seq, counters...)
	r.Fleet = &Fleet{BackendHealthy: healthy, FleetSize: 3, Rules: rules}
	return r
}

func TestFleetViewPerNode(t *testing.T) {
	s := NewState(Options{})
	// Two VMs of one node report the same process-wide view: the node's
	// view is the latest, never a sum.
	s.Ingest(fleetRep("edge-b", "vm1", 1, true, FleetRule{Rule: "g", LeaseTokens: 10, Pools: 2}), t0)
	s.Ingest(fleetRep("edge-b", "vm2", 1, true, FleetRule{Rule: "g", LeaseTokens: 12, Pools: 2}), t0.Add(100*time.Millisecond))
	s.Ingest(fleetRep("edge-a", "vm1", 1, false,
		FleetRule{Rule: "z", LeaseTokens: 1, Pools: 1}, FleetRule{Rule: "g", LeaseTokens: 3, Pools: 1, FallbackActive: true}), t0)
	s.Ingest(rep("edge-c", "vm1", t0.UnixMilli(), 1, rc("local", 1, 0, 0, 0)), t0) // no global rules

	now := t0.Add(time.Second)
	got := s.Fleet(now)
	if len(got) != 2 || got[0].Node != "edge-a" || got[1].Node != "edge-b" {
		t.Fatalf("fleet views %+v, want edge-a and edge-b", got)
	}
	a, b := got[0], got[1]
	if a.BackendHealthy || a.FleetSize != 3 || len(a.Rules) != 2 || a.Rules[0].Rule != "g" || !a.Rules[0].FallbackActive || a.Rules[1].Rule != "z" {
		t.Errorf("edge-a %+v (rules sorted by name, fallback on g)", a)
	}
	if !b.BackendHealthy || len(b.Rules) != 1 || b.Rules[0].LeaseTokens != 12 {
		t.Errorf("edge-b %+v, want the latest VM's 12 tokens", b)
	}
	if ov := s.Overview(now, OverviewOptions{}); len(ov.Fleet) != 2 {
		t.Errorf("the overview carries %d fleet views", len(ov.Fleet))
	}

	// A duplicate report changes nothing; a report without the fleet
	// object (no global rule any more) clears the node's view.
	s.Ingest(fleetRep("edge-b", "vm2", 1, false, FleetRule{Rule: "g", LeaseTokens: 99}), now)
	if v := s.Fleet(now)[1]; !v.BackendHealthy || v.Rules[0].LeaseTokens != 12 {
		t.Errorf("a duplicate report changed the view: %+v", v)
	}
	s.Ingest(rep("edge-b", "vm2", t0.UnixMilli(), 2, rc("g", 3, 0, 0, 0)), now)
	if got := s.Fleet(now); len(got) != 1 || got[0].Node != "edge-a" {
		t.Errorf("after edge-b dropped its global rules: %+v", got)
	}

	// Stale, then forgotten with the node.
	if v := s.Fleet(t0.Add(10 * time.Second)); len(v) != 1 || !v[0].Stale {
		t.Errorf("edge-a silent for 10 s: %+v, want stale", v)
	}
	if v := s.Fleet(t0.Add(time.Hour)); len(v) != 0 {
		t.Errorf("fleet views after the node TTL: %+v", v)
	}
	if s.nfleet != 0 {
		t.Errorf("nfleet = %d after every node went", s.nfleet)
	}
}

func TestFleetViewBound(t *testing.T) {
	s := NewState(Options{MaxFleetRules: 3})
	s.Ingest(fleetRep("n1", "vm", 1, true, FleetRule{Rule: "a"}, FleetRule{Rule: "b"}), t0)
	s.Ingest(fleetRep("n2", "vm", 1, true, FleetRule{Rule: "a"}), t0.Add(time.Second))
	// n3's two rules do not fit: the least recently reported view (n1) goes.
	s.Ingest(fleetRep("n3", "vm", 1, true, FleetRule{Rule: "a"}, FleetRule{Rule: "b"}), t0.Add(2*time.Second))
	got := s.Fleet(t0.Add(2 * time.Second))
	if len(got) != 2 || got[0].Node != "n2" || got[1].Node != "n3" || s.nfleet != 3 {
		t.Errorf("views %+v (nfleet %d), want n2 and n3", got, s.nfleet)
	}
	// One node alone beyond the bound keeps the first rules.
	s.Ingest(fleetRep("n4", "vm", 1, true, FleetRule{Rule: "a"}, FleetRule{Rule: "b"}, FleetRule{Rule: "c"}, FleetRule{Rule: "d"}), t0.Add(3*time.Second))
	got = s.Fleet(t0.Add(3 * time.Second))
	if len(got) != 1 || got[0].Node != "n4" || len(got[0].Rules) != 3 || s.nfleet != 3 {
		t.Errorf("views %+v (nfleet %d), want n4 with 3 rules", got, s.nfleet)
	}
	// Node eviction takes the view's count with it.
	s2 := NewState(Options{MaxNodes: 1})
	s2.Ingest(fleetRep("n1", "vm", 1, true, FleetRule{Rule: "a"}), t0)
	s2.Ingest(fleetRep("n2", "vm", 1, true, FleetRule{Rule: "a"}, FleetRule{Rule: "b"}), t0.Add(IdleAfter))
	if s2.nfleet != 2 {
		t.Errorf("nfleet = %d after evicting n1, want 2", s2.nfleet)
	}
}

func TestFleetMetrics(t *testing.T) {
	now := t0.Add(time.Second)
	s := NewState(Options{Now: func() time.Time { return now }})
	m := NewMetrics(s)
	s.Ingest(fleetRep("edge-a", "vm1", 1, false, FleetRule{Rule: "g", LeaseTokens: 2.5, Pools: 1, FallbackActive: true}), t0)
	s.Ingest(fleetRep("edge-b", "vm1", 1, true, FleetRule{Rule: "g", LeaseTokens: 40, Pools: 4}), t0)
	s.Ingest(rep("edge-c", "vm1", t0.UnixMilli(), 1, rc("local", 1, 0, 0, 0)), t0)
	expected := `
# HELP sluice_fleet_fallback_active 1 when the node serves the global rule without the rate limit service (backend down, or a pool on its local share).
# TYPE sluice_fleet_fallback_active gauge
sluice_fleet_fallback_active{node="edge-a",rule="g"} 1
sluice_fleet_fallback_active{node="edge-b",rule="g"} 0
# HELP sluice_fleet_lease_pools Pools (keys) of the global rule the node's plugin holds leases for.
# TYPE sluice_fleet_lease_pools gauge
sluice_fleet_lease_pools{node="edge-a",rule="g"} 1
sluice_fleet_lease_pools{node="edge-b",rule="g"} 4
# HELP sluice_fleet_lease_tokens Tokens the node holds in leases of the global rule (its hot pools), as its plugin last reported.
# TYPE sluice_fleet_lease_tokens gauge
sluice_fleet_lease_tokens{node="edge-a",rule="g"} 2.5
sluice_fleet_lease_tokens{node="edge-b",rule="g"} 40
# HELP sluice_fleet_plugin_backend_up 1 when the rate limit service answered the node's last call, as the node's plugin sees it.
# TYPE sluice_fleet_plugin_backend_up gauge
sluice_fleet_plugin_backend_up{node="edge-a"} 0
sluice_fleet_plugin_backend_up{node="edge-b"} 1
# HELP sluice_fleet_plugin_fleet_size N of the node's local share (fleet_size configured, else reported by the rate limit service, else 1).
# TYPE sluice_fleet_plugin_fleet_size gauge
sluice_fleet_plugin_fleet_size{node="edge-a"} 3
sluice_fleet_plugin_fleet_size{node="edge-b"} 3
`
	names := []string{"sluice_fleet_fallback_active", "sluice_fleet_lease_pools", "sluice_fleet_lease_tokens",
		"sluice_fleet_plugin_backend_up", "sluice_fleet_plugin_fleet_size"}
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(expected), names...); err != nil {
		t.Error(err)
	}

	// edge-b keeps reporting, edge-a goes silent: its series go once it
	// is stale, long before the node itself is forgotten.
	now = t0.Add(20 * time.Second)
	s.Ingest(fleetRep("edge-b", "vm1", 2, true, FleetRule{Rule: "g", LeaseTokens: 41, Pools: 4}), now)
	if n, _ := testutil.GatherAndCount(m.Registry(), "sluice_fleet_lease_tokens"); n != 1 {
		t.Errorf("%d lease series with edge-a stale, want edge-b's only", n)
	}
	if n, _ := testutil.GatherAndCount(m.Registry(), "sluice_node_vms"); n != 3 {
		t.Errorf("%d node series: a stale node is still a node until its TTL", n)
	}
	now = t0.Add(time.Hour)
	s.Sweep(now)
	for _, name := range names {
		if n, _ := testutil.GatherAndCount(m.Registry(), name); n != 0 {
			t.Errorf("%d %s series after every node expired", n, name)
		}
	}
}
